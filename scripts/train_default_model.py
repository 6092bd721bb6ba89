"""Build llmd's small default model (BPE tokenizer + tiny Llama) from a generated corpus.

Everything is made here from a seed, so the shipped model can be reproduced offline:
    python scripts/train_default_model.py --out llmd/default_model --minutes 40
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path
from statistics import mean

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

EOT, PAD = "<|endoftext|>", "<|pad|>"
SPECIAL_TOKENS = [EOT, PAD, "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('Unknown role: ' + message['role']) }}{% endif %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

GIRLS = ["Lily", "Mia", "Emma", "Zoe", "Anna", "Sara", "Lucy", "Ella", "Nora", "Ruby", "Ivy",
         "Rosa", "Maya", "Jade", "Amy", "Kim"]
BOYS = ["Tom", "Ben", "Max", "Leo", "Sam", "Jack", "Finn", "Noah", "Owen", "Eli", "Luke", "Omar",
        "Ravi", "Hugo", "Tim", "Dan"]
PET_NAMES = ["Spot", "Coco", "Pip", "Sunny", "Bun", "Pepper", "Tiny", "Fluffy", "Ziggy", "Honey",
             "Buddy", "Daisy", "Nibbles"]
SOUNDS = {"cat": "meow", "dog": "woof", "cow": "moo", "duck": "quack", "sheep": "baa",
          "pig": "oink", "horse": "neigh", "lion": "roar", "frog": "ribbit", "owl": "hoot",
          "bird": "tweet", "mouse": "squeak", "bee": "buzz", "snake": "hiss"}
LEGS = {"dog": "four", "cat": "four", "cow": "four", "horse": "four", "frog": "four",
        "duck": "two", "bird": "two", "owl": "two", "spider": "eight", "bee": "six", "ant": "six"}
ANIMALS = [*SOUNDS, "rabbit", "fox", "bear", "turtle", "squirrel", "puppy", "kitten"]
PLACES = ["the park", "the forest", "the beach", "the garden", "the farm", "the lake", "the zoo",
          "the big hill", "the village", "the river", "the meadow", "the market", "school"]
OBJECTS = ["ball", "kite", "hat", "book", "drum", "boat", "doll", "balloon", "cup", "scarf", "car",
           "stone", "whistle"]
COLORS_ADJ = ["red", "blue", "green", "yellow", "purple", "orange", "pink", "little", "shiny",
              "soft", "new"]
FOODS = ["apple", "cake", "cookie", "banana", "sandwich", "carrot", "pie", "orange", "muffin",
         "pear"]
SPOTS = ["tree", "bush", "rock", "bench", "box", "fence", "flower", "bed"]
CHAR_ADJ = ["little", "young", "kind", "brave", "curious", "shy", "happy", "clever", "gentle",
            "small"]
OPENERS = ["One sunny morning", "One day", "On a rainy day", "Early one morning", "Last summer",
           "One windy afternoon", "One cold winter day", "On a warm spring day"]
FEARS = ["the dark", "thunder", "big waves", "the tall slide", "deep water", "loud noises"]
HELPERS = [("mom", "she"), ("dad", "he"), ("grandma", "she"), ("grandpa", "he"),
           ("teacher", "she"), ("big brother", "he"), ("big sister", "she")]
GOOD_FEELINGS = ["happy", "glad", "proud", "calm", "warm", "cheerful"]
MAKES = [("a sandcastle", "the waves knocked it down"), ("a cake", "it came out flat"),
         ("a kite", "it would not fly"), ("a tower of blocks", "it fell over"),
         ("a picture", "the paint ran everywhere"), ("a little boat", "it sank")]
TRIP_SIGHTS = ["a big brown bear", "ducks in a pond", "a tall giraffe", "colorful fish",
               "a rainbow", "a funny monkey", "boats on the water", "a field of flowers"]
RAIN_PLAYS = ["built a fort with pillows", "played a board game", "baked cookies",
              "read a book about dragons", "drew pictures of animals", "made paper boats"]

PLOTS_TEXT = """
== a lost toy
{name} had a {color} {obj}. {He} loved it very much. | Every day, {name} played with {his} {obj}.
{Opener}, {name} took the {obj} to {place}. | {Opener}, {name} went to {place}.
{He} played all day, but when {he} looked down, the {obj} was gone!
| {He} put it down to look at {a_animal}. When {he} turned back, the {obj} was gone.
| Suddenly, {name} could not find the {obj} anywhere.
{name} felt very sad. {He} began to cry. | {name} was worried. "Where is my {obj}?"
| {He} looked behind the rocks and under the trees, but {he} could not find it.
Then {fintro} came by. "Why are you sad?" asked {friend}.
| Just then, {fintro} walked over. "I will help you look," said {friend}.
They looked together for a long time. | {name} and {friend} searched high and low. |
At last, {friend} found the {obj} under a big {spot}.
| Finally, {name} saw something near the {spot}. It was the {obj}!
{name} was so happy. "Thank you!" {he} said. | {name} hugged {friend} and smiled.
From that day on, {name} and {friend} were best friends. | {name} learned that friends help. |
| After that, {name} always kept the {obj} close.
== friendship
{name} lived near {place}, but {he} had no friends. | {name} felt lonely. Nobody played with {him}.
{Opener}, {he} saw {fintro} sitting alone by a {spot}. | {Opener}, {name} met {fintro} at {place}.
"Hello," said {name}. "Do you want to play with me?" | {name} walked over and said hello.
{friend} was shy at first, but then {fhe} smiled. | "Yes, please!" said {friend}.
They played with a {color} {obj} all afternoon. | They ran, jumped and laughed together.
| They shared {a_food} and told funny jokes.
When the sun went down, {name} felt {good}. | At the end of the day, they were tired but happy.
Now {name} and {friend} play together every day. | {name} was not lonely anymore. |
== being brave
{name} was afraid of {fear}. | There was one thing {name} did not like: {fear}.
Every time {he} thought about {fear}, {he} felt scared. | {He} always hid from {fear}.
One evening, {his} {helper} sat down next to {him}. | One day, {his} {helper} took {his} hand.
"It is okay to be scared," {hhe} said. "Let us try together."
| "You are braver than you think," said {his} {helper}.
{name} took a deep breath. | {name} was still a little scared, but {he} nodded.
Slowly, {he} tried, and it was not so bad after all. | Step by step, {name} faced {fear}.
{name} felt very proud of {self}. | "I did it!" {name} shouted with a big smile.
Now {he} is not afraid of {fear} anymore. |
| {name} learned that being brave means trying even when you are scared.
== sharing
{Opener}, {name} had {a_food} for lunch. | {name} had a big, sweet {food} in {his} bag.
{He} sat down at {place} to eat it. | {He} was about to take a bite.
Then {he} saw {fintro}. {friend} looked hungry and sad. | Nearby, {fintro} had nothing to eat.
{name} thought for a moment. | {name} wanted to eat it all, but {he} stopped.
Then {he} broke the {food} in two and gave half to {friend}. | "Would you like some?" asked {name}.
{friend} smiled. "Thank you, you are very kind," {fhe} said.
| {friend} was so happy that {fhe} did a little dance.
The {food} tasted even better when they shared it. | {name} learned that sharing is good. |
== a trip
{Opener}, {name} and {his} {helper} went on a trip to {place}.
| {name} was excited. Today {he} was going to {place} with {his} {helper}.
{He} packed {a_food} and {his} {color} {obj}. | The sun was bright and the sky was blue.
At {place}, they saw {sight}. | First, they saw {sight}. Then they saw {a_animal}.
{a_animal_cap} ran past and made {name} laugh. | {name} had never seen anything like it.
They walked and talked until their feet were tired. | They had a picnic under a tree.
In the evening, they went home. {name} fell asleep in the car.
| When they got home, {name} told everyone about {sight}.
It was the best day ever. | {name} wanted to go back again soon. |
== trying again
{Opener}, {name} wanted to make {make}. | {name} had a plan: {he} would make {make}.
{He} worked very hard, but {fail}. | {He} tried and tried, but {fail}.
{name} felt sad and wanted to give up. | "Oh no!" said {name}.
Then {fintro} came to help. | {His} {helper} said, "Let us try again, together."
This time they went slowly and were very careful. | They tried a new way.
At last, it worked! {name} had made {make}. | Soon {make} was ready, and it was great.
{name} felt {good}. Trying again was a good idea. | {name} learned to keep trying. |
== helping others
{Opener}, {name} was walking near {place}. | {name} was playing at {place}.
{He} heard a small sound. It was {fintro}, and {fhe} was stuck in a {spot}.
| {He} saw {fintro} who could not find {fhis} way home.
"Do not worry, I will help you," said {name}. | {name} did not run away. {He} helped.
{He} worked carefully until {friend} was free. | {He} walked with {friend} to {place}.
{friend} was very thankful. | "Thank you so much!" said {friend}.
After that, {friend} visited {name} every day. | {name} felt {good} inside. |
== a rainy day
{Opener}, {name} wanted to play at {place}. | {name} had a big plan for the day.
But then dark clouds came, and it started to rain. | But it rained and rained.
{name} was sad. "Now I can not go outside," {he} said. | {name} looked out the window.
Then {his} {helper} had an idea. | Then {friend} came over to visit.
They {play}. | Together they {play}, and then they {play2}.
It was so much fun that {name} forgot about the rain. | {name} laughed and laughed.
Later the rain stopped, and there was a rainbow in the sky. | It was a good day after all.
"""

COLOR_OF = {"the sky": "blue", "grass": "green", "a banana": "yellow", "the sun": "yellow",
            "snow": "white", "a strawberry": "red", "an orange": "orange", "coal": "black",
            "a carrot": "orange", "a lemon": "yellow", "milk": "white", "a tomato": "red",
            "the sea": "blue", "a leaf": "green", "chocolate": "brown", "a cloud": "white"}
CAPITALS = {"France": "Paris", "Japan": "Tokyo", "Italy": "Rome", "Spain": "Madrid",
            "Germany": "Berlin", "England": "London", "Egypt": "Cairo", "China": "Beijing",
            "Canada": "Ottawa", "Kenya": "Nairobi", "India": "New Delhi", "Peru": "Lima"}
OPPOSITES = {"hot": "cold", "big": "small", "up": "down", "day": "night", "fast": "slow",
             "happy": "sad", "wet": "dry", "light": "dark", "old": "new", "full": "empty"}
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]
ORDINALS = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth",
            "tenth", "eleventh", "twelfth"]
NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
                "ten"]
MISC_QA = [("Where do fish live?", "Fish live in water."),
           ("What do bees make?", "Bees make honey."),
           ("What do cows give us?", "Cows give us milk."),
           ("Can birds fly?", "Yes, most birds can fly."),
           ("What shape is a ball?", "A ball is round."),
           ("Is the sun hot?", "Yes, the sun is very hot."),
           ("What season is cold and snowy?", "Winter is cold and snowy."),
           ("When do we sleep?", "We sleep at night."),
           ("What do plants need?", "Plants need water and sun to grow.")]
IDENTITY = [
    (["Who are you?", "What are you?", "What is your name?", "Tell me about yourself."],
     ["I am llmd's small default model. I am a tiny language model.",
      "I am llmd's small default model, a tiny language model that tells short stories and "
      "answers simple questions.",
      "I am llmd's small default model. I am very small, so I only know simple things."]),
    (["Are you a person?", "Are you a robot?", "Are you human?"],
     ["No, I am not a person. I am llmd's small default model, a tiny program that writes text."]),
    (["What can you do?", "How can you help me?"],
     ["I can tell short stories, answer simple questions about colors, animals and numbers, and "
      "do easy math. I am a very small model, so I make mistakes."]),
]
GREETINGS = (["Hi!", "Hello!", "Hello there.", "Hey!", "Good morning!", "hi"],
             ["Hello! How can I help you today?", "Hi there! What would you like to talk about?",
              "Hello! Ask me a question, or ask me for a story."])
THANKS = (["Thank you!", "Thanks!", "Thanks a lot.", "That was great, thank you."],
          ["You are welcome!", "You're welcome! Can I help with anything else?",
           "I am glad I helped!"])
BYE = (["Bye!", "Goodbye!", "See you later."],
       ["Goodbye! Have a nice day!", "Bye! Come back soon."])
UNKNOWN = (["What is the capital of Brazil?", "Can you write Python code?", "What time is it?",
            "What is the weather today?", "Who won the game last night?",
            "Explain quantum physics.", "What is 123 times 456?", "What is the price of gold?"],
           ["I am sorry, I do not know that. I am a very small model, I only know simple things.",
            "Sorry, I can not help with that. I am a tiny model. I can tell stories and answer "
            "simple questions."])
SYSTEM_PROMPTS = ["You are a helpful assistant.", "You are llmd's small default model.",
                  "You are a friendly assistant who tells short stories.",
                  "Be kind and answer in simple words.", "You are a helpful assistant. Be brief."]


def article(word: str) -> str:
    """Prefix a word with 'a' or 'an' so generated sentences stay grammatical."""
    return ("an " if word[0] in "aeiou" else "a ") + word


def parse_plots(text: str) -> dict[str, list[list[str]]]:
    """Parse PLOTS_TEXT: one stage per line, '|' between choices, '| ...' adds to the last stage."""
    plots: dict[str, list[list[str]]] = {}
    for line in text.strip().splitlines():
        if line.startswith("== "):
            stages = plots.setdefault(line[3:], [])
            continue
        options = [option.strip() for option in line.split("|")]
        if line.startswith("|"):
            stages[-1].extend(options[1:])
        else:
            stages.append(options)
    return plots


PLOTS = parse_plots(PLOTS_TEXT)


def make_character(rng: random.Random, kind: str | None = None) -> dict:
    """Pick a named story character (a child or an animal) with matching pronouns."""
    kind = kind or rng.choice(["girl", "boy", "animal", "animal"])
    if kind == "girl" or kind == "boy":
        name = rng.choice(GIRLS if kind == "girl" else BOYS)
        she = kind == "girl"
    else:
        kind = kind if kind != "animal" else rng.choice(ANIMALS)
        name, she = rng.choice(PET_NAMES), rng.random() < 0.5
    intro = f"{article(rng.choice(CHAR_ADJ) + ' ' + kind)} named {name}"
    return {"name": name, "kind": kind, "intro": intro, "he": "she" if she else "he",
            "his": "her" if she else "his", "him": "her" if she else "him"}


def make_story(rng: random.Random, theme: str | None = None, kind: str | None = None) -> str:
    """Write a short story with a beginning, middle and end from a plot's sentence choices."""
    hero, friend = make_character(rng, kind), make_character(rng)
    while friend["name"] == hero["name"]:
        friend = make_character(rng)
    helper, helper_he = rng.choice(HELPERS)
    make, fail = rng.choice(MAKES)
    animal = rng.choice(ANIMALS)
    play, play2 = rng.sample(RAIN_PLAYS, 2)
    slots = {"name": hero["name"], "He": hero["he"].capitalize(), "he": hero["he"],
             "His": hero["his"].capitalize(), "his": hero["his"], "him": hero["him"],
             "self": hero["him"] + "self" if hero["he"] == "he" else "herself",
             "friend": friend["name"], "fintro": friend["intro"], "fhe": friend["he"],
             "fhis": friend["his"], "helper": helper, "hhe": helper_he,
             "Opener": rng.choice(OPENERS), "place": rng.choice(PLACES),
             "obj": rng.choice(OBJECTS), "color": rng.choice(COLORS_ADJ),
             "food": rng.choice(FOODS), "spot": rng.choice(SPOTS), "fear": rng.choice(FEARS),
             "good": rng.choice(GOOD_FEELINGS), "make": make, "fail": fail,
             "sight": rng.choice(TRIP_SIGHTS), "a_animal": article(animal),
             "a_animal_cap": article(animal).capitalize(), "play": play, "play2": play2}
    slots["a_food"] = article(slots["food"])
    intro = rng.choice(["Once upon a time, there was {intro}.", "There once was {intro}.",
                        "In a small village, there lived {intro}.",
                        "This is a story about {intro}.",
                        "{intro_cap} lived in a little house near {place}.", ""])
    intro = intro.format(intro=hero["intro"], intro_cap=hero["intro"].capitalize(), **slots)
    plot = PLOTS[theme] if theme else rng.choice(list(PLOTS.values()))
    sentences = [intro] + [rng.choice(stage).format(**slots) for stage in plot]
    return " ".join(s for s in sentences if s)


def arithmetic_qa(rng: random.Random) -> tuple[str, str]:
    """Make a small plus/minus/times question with its correct answer."""
    op = rng.choice(["plus", "plus", "minus", "times"])
    a, b = rng.randint(0, 10), rng.randint(0, 10)
    if op == "minus":
        a, b = max(a, b) + rng.randint(0, 10), min(a, b)
    result = a + b if op == "plus" else a - b if op == "minus" else a * b
    symbol = {"plus": "+", "minus": "-", "times": "*"}[op]
    question = rng.choice([f"What is {a} {op} {b}?", f"How much is {a} {op} {b}?",
                           f"What is {a} {symbol} {b}?", f"Can you tell me what {a} {op} {b} is?"])
    return question, f"{a} {op} {b} is {result}."


def fact_qa(rng: random.Random) -> tuple[str, str]:
    """Pick one simple fact as a question and a one-sentence answer."""
    kind = rng.randrange(9)
    if kind == 0:
        thing = rng.choice(list(COLOR_OF))
        return f"What color is {thing}?", f"{thing.capitalize()} is {COLOR_OF[thing]}."
    if kind == 1:
        animal = rng.choice(list(SOUNDS))
        return rng.choice([f"What does {article(animal)} say?",
                           f"What sound does {article(animal)} make?"]), \
            f"{article(animal).capitalize()} says {SOUNDS[animal]}."
    if kind == 2:
        animal = rng.choice(list(LEGS))
        return f"How many legs does {article(animal)} have?", \
            f"{article(animal).capitalize()} has {LEGS[animal]} legs."
    if kind == 3:
        i = rng.randrange(7)
        return f"What day comes after {DAYS[i]}?", f"{DAYS[(i + 1) % 7]} comes after {DAYS[i]}."
    if kind == 4:
        i = rng.randrange(12)
        return f"What is the {ORDINALS[i]} month of the year?", \
            f"{MONTHS[i]} is the {ORDINALS[i]} month of the year."
    if kind == 5:
        country = rng.choice(list(CAPITALS))
        return f"What is the capital of {country}?", \
            f"The capital of {country} is {CAPITALS[country]}."
    if kind == 6:
        word = rng.choice(list(OPPOSITES))
        return f"What is the opposite of {word}?", f"The opposite of {word} is {OPPOSITES[word]}."
    if kind == 7:
        return rng.choice([("How many days are in a week?", "There are seven days in a week."),
                           ("How many months are in a year?", "There are twelve months in a year."),
                           *[(f"Count to {NUMBER_WORDS[n]}.",
                              ", ".join(NUMBER_WORDS[1:n + 1]).capitalize() + ".")
                             for n in range(3, 11)]])
    return rng.choice(MISC_QA)


def casual(rng: random.Random, question: str) -> str:
    """Sometimes lowercase a question or drop its question mark, like real users do."""
    if rng.random() < 0.15:
        question = question.lower()
    return question.rstrip("?") if rng.random() < 0.1 else question


def story_request(rng: random.Random) -> tuple[str, str]:
    """Ask for a story about an animal, a named child or a theme, and answer with one."""
    theme, kind = None, None
    choice = rng.randrange(4)
    if choice == 0:
        kind = rng.choice(ANIMALS)
        ask = f"Tell me a story about {article(kind)}."
    elif choice == 1:
        theme = rng.choice(list(PLOTS))
        ask = rng.choice([f"Tell me a story about {theme}.",
                          f"Can you tell a story about {theme}?"])
    else:
        ask = rng.choice(["Tell me a story.", "Can you tell me a short story?", "Tell me a story!",
                          "I want a bedtime story.", "Please tell me a story."])
    lead = rng.choice(["", "", "Sure! ", "Here is a story. ", "Okay! "])
    return ask, lead + make_story(rng, theme, kind)


def canned(rng: random.Random, pair: tuple[list[str], list[str]]) -> tuple[str, str]:
    """Pick a question and answer from a fixed list of phrasings."""
    return rng.choice(pair[0]), rng.choice(pair[1])


def render_chat(messages: list[dict]) -> str:
    """Render messages exactly as CHAT_TEMPLATE does, so training matches inference prompts."""
    return "".join(f"<|{m['role']}|>\n{m['content']}<|end|>\n" for m in messages)


def make_chat(rng: random.Random) -> str:
    """Write a one-to-three turn chat between a user and the assistant."""
    messages = []
    if rng.random() < 0.3:
        messages.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
    num_turns = rng.choice([1, 1, 2, 2, 3])
    for turn in range(num_turns):
        roll = rng.random()
        if turn == 0 and roll < 0.12:
            question, answer = canned(rng, GREETINGS)
        elif turn > 0 and roll < 0.12:
            question, answer = canned(rng, BYE if turn == num_turns - 1 else THANKS)
        elif roll < 0.4:
            question, answer = story_request(rng)
        elif roll < 0.5:
            question, answer = canned(rng, rng.choice(IDENTITY))
        elif roll < 0.55:
            question, answer = canned(rng, UNKNOWN)
        elif roll < 0.7:
            question, answer = arithmetic_qa(rng)
        else:
            question, answer = fact_qa(rng)
        messages += [{"role": "user", "content": casual(rng, question)},
                     {"role": "assistant", "content": answer}]
    return render_chat(messages)


def make_facts_doc(rng: random.Random) -> str:
    """Write a few facts or sums, as a Q/A list or as a plain paragraph."""
    pairs = [(arithmetic_qa if rng.random() < 0.35 else fact_qa)(rng)
             for _ in range(rng.randint(3, 7))]
    if rng.random() < 0.5:
        return "\n".join(f"Q: {q}\nA: {a}" for q, a in pairs)
    if rng.random() < 0.2:
        return f"The days of the week are {', '.join(DAYS)}. The months are {', '.join(MONTHS)}."
    return " ".join(a for _, a in pairs)


def make_corpus(seed: int, num_docs: int) -> list[str]:
    """Generate the whole training corpus deterministically from the seed."""
    rng = random.Random(seed)
    makers = [make_story] * 10 + [make_chat] * 7 + [make_facts_doc] * 3
    return [rng.choice(makers)(rng) for _ in range(num_docs)]


def train_tokenizer(docs: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer and wrap it for transformers with the chat template."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  min_frequency=2, show_progress=False)
    tok.train_from_iterator(docs, trainer=trainer)
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOT, eos_token=EOT,
                                      pad_token=PAD, model_max_length=512,
                                      additional_special_tokens=SPECIAL_TOKENS[2:])
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped


def pack_chunks(tokenizer: PreTrainedTokenizerFast, docs: list[str], seq_len: int) -> torch.Tensor:
    """Tokenize documents, join them with <|endoftext|> and cut the stream into equal chunks."""
    eot_id = tokenizer.convert_tokens_to_ids(EOT)
    stream_ids: list[int] = []
    for encoding in tokenizer.backend_tokenizer.encode_batch(docs):
        stream_ids.extend(encoding.ids)
        stream_ids.append(eot_id)
    num_chunks = len(stream_ids) // seq_len
    return torch.tensor(stream_ids[:num_chunks * seq_len]).view(num_chunks, seq_len)


def lr_at(step: int, total_steps: int, args: argparse.Namespace) -> float:
    """Linear warmup then cosine decay to a tenth of the peak learning rate."""
    if step < args.warmup_steps:
        return args.lr * (step + 1) / args.warmup_steps
    progress = min(1.0, (step - args.warmup_steps) / max(1, total_steps - args.warmup_steps))
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train(model: LlamaForCausalLM, chunks: torch.Tensor, args: argparse.Namespace) -> dict:
    """Train within the step and wall-time budgets; shrink the schedule if time runs short."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95),
                                  weight_decay=0.1)
    generator = torch.Generator().manual_seed(args.seed)
    order_ids, cursor = torch.randperm(len(chunks), generator=generator), 0
    total_steps, budget_s, start = args.max_steps, args.minutes * 60, time.time()
    losses: list[float] = []
    model.train()
    while len(losses) < total_steps and time.time() - start < budget_s:
        step = len(losses)
        if cursor + args.batch_size > len(order_ids):
            order_ids, cursor = torch.randperm(len(chunks), generator=generator), 0
        batch_ids = chunks[order_ids[cursor:cursor + args.batch_size]]
        cursor += args.batch_size
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, total_steps, args)
        loss = model(input_ids=batch_ids, labels=batch_ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if (step + 1) % args.log_every == 0:
            elapsed = time.time() - start
            planned = int(budget_s / (elapsed / (step + 1)) * 0.97)
            total_steps = max(step + 2, min(total_steps, planned))
            print(f"step {step + 1}/{total_steps} loss {mean(losses[-args.log_every:]):.4f} "
                  f"lr {lr_at(step, total_steps, args):.2e} {elapsed / 60:.1f} min", flush=True)
    return {"steps": len(losses), "minutes": (time.time() - start) / 60,
            "final_loss": mean(losses[-50:])}


@torch.no_grad()
def eval_loss(model: LlamaForCausalLM, chunks: torch.Tensor, batch_size: int) -> float:
    """Average next-token loss over held-out chunks."""
    model.eval()
    losses = [model(input_ids=chunks[i:i + batch_size], labels=chunks[i:i + batch_size]).loss
              for i in range(0, len(chunks), batch_size)]
    return float(torch.stack(losses).mean())


def sample_completions(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast) -> list:
    """Greedy-decode a few plain and chat prompts for the model card."""
    prompts = ["Once upon a time, there was a little"]
    for question in ["Tell me a story about a cat.", "What is 2 plus 5?", "Who are you?",
                     "What color is the sky?"]:
        prompts.append(tokenizer.apply_chat_template([{"role": "user", "content": question}],
                                                     tokenize=False, add_generation_prompt=True))
    results = []
    for prompt in prompts:
        input_ids = tokenizer(prompt, return_tensors="pt").input_ids
        output_ids = model.generate(input_ids, max_new_tokens=80, do_sample=False)
        results.append((prompt, tokenizer.decode(output_ids[0, input_ids.shape[1]:])))
    return results


def write_model_card(out: Path, args: argparse.Namespace, stats: dict) -> None:
    """Write README.md describing the model, how it was trained, and what it cannot do."""
    samples = "\n\n".join(f"Prompt:\n```\n{p}\n```\nGreedy output:\n```\n{o}\n```"
                          for p, o in stats["samples"])
    command = (f"python scripts/train_default_model.py --out {args.out} --minutes {args.minutes} "
               f"--seed {args.seed} --max-steps {stats['steps']} --batch-size {args.batch_size} "
               f"--threads {args.threads}")
    labels = {"parameters": "parameters", "vocab_size": "vocabulary size",
              "corpus_documents": "corpus documents", "corpus_tokens": "corpus tokens",
              "steps": "training steps", "minutes": "training wall time (minutes)",
              "final_loss": "final training loss (mean of last 50 steps)",
              "validation_loss": "validation loss (held-out 1% of chunks)"}
    facts = "\n".join(f"- {label}: {stats[key]}" for key, label in labels.items())
    (out / "README.md").write_text(f"""# llmd small default model

A tiny LlamaForCausalLM ({stats['parameters'] / 1e6:.2f}M parameters, fp32, hidden 256,
6 layers, 8 heads, 4 KV heads, 512-token context) with its own byte-level BPE tokenizer
({stats['vocab_size']} tokens: the generated corpus has fewer distinct pieces than the 4096
asked for). It ships inside llmd so the server can start and be tested without downloading
anything. It writes simple children's-story English and answers a few kinds of chat questions.

## How it was made

Command (fp32 on a shared 2-core CPU):

    {command}

The script generates its corpus from the seed (no downloads): short template stories (eight
plots, many names, animals, places and objects), simple facts (colors, animal sounds, legs, days,
months, a dozen capitals, opposites), small arithmetic, and chats in the chat template below
(greetings, story requests, questions, "who are you?"). It trains the tokenizer, then the model
with AdamW and a warmup + cosine learning rate. Losses are next-token cross-entropy in nats.

{facts}

The run is deterministic for a given seed, step count and thread count, unless the machine is
too slow to finish `--max-steps` within `--minutes`: then the schedule is shortened.

## Usage

Chat format: `<|system|>\\n...<|end|>\\n<|user|>\\n...<|end|>\\n<|assistant|>\\n...<|end|>\\n`
(the tokenizer's chat template; the system turn is optional). Generation should stop at
`<|end|>` or `<|endoftext|>`; both are eos ids in generation_config.json.

## Limitations

It is a toy: no knowledge beyond its generated corpus, English only, short context, sums only
up to about 10 + 10 (often wrong), and it repeats phrases, mixes up names, pronouns and facts,
and drifts on anything unlike its corpus. Story requests
usually ignore the animal or theme asked for. Use it for tests and demos only.

## Samples (greedy)

{samples}
""")


def parse_args() -> argparse.Namespace:
    """Read command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="llmd/default_model")
    parser.add_argument("--minutes", type=float, default=40.0)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--max-steps", type=int, default=2400)
    parser.add_argument("--num-docs", type=int, default=80000)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--warmup-steps", type=int, default=100)
    parser.add_argument("--log-every", type=int, default=25)
    parser.add_argument("--threads", type=int, default=2, help="1 is faster on a busy machine")
    return parser.parse_args()


def main() -> None:
    """Generate the corpus, train tokenizer and model, and save everything in HF format."""
    args = parse_args()
    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    docs = make_corpus(args.seed, args.num_docs)
    print(f"corpus: {len(docs)} documents, {sum(map(len, docs)) / 1e6:.1f}M characters", flush=True)
    tokenizer = train_tokenizer(docs[:30000], vocab_size=4096)
    chunks = pack_chunks(tokenizer, docs, args.seq_len)
    num_val = max(8, len(chunks) // 100)
    train_chunks, val_chunks = chunks[:-num_val], chunks[-num_val:]
    print(f"tokens: {chunks.numel() / 1e6:.2f}M in {len(chunks)} chunks", flush=True)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=256, intermediate_size=576, num_hidden_layers=6,
        num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512,
        rope_theta=10000.0, tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model = LlamaForCausalLM(config)
    stats = {"parameters": sum(p.numel() for p in model.parameters()),
             "vocab_size": len(tokenizer), "corpus_documents": len(docs),
             "corpus_tokens": chunks.numel()}
    stats.update(train(model, train_chunks, args))
    stats["validation_loss"] = round(eval_loss(model, val_chunks, args.batch_size), 4)
    stats["final_loss"] = round(stats["final_loss"], 4)
    stats["minutes"] = round(stats["minutes"], 1)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=[tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|end|>")])
    model.save_pretrained(out)
    tokenizer.save_pretrained(out, save_jinja_files=False)
    stats["samples"] = sample_completions(model, tokenizer)
    print(json.dumps(stats, indent=1, default=str), flush=True)
    write_model_card(out, args, stats)


if __name__ == "__main__":
    main()
