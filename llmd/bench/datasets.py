"""Benchmark workloads: random lengths, shared prefixes, ShareGPT files, multi-turn chats,
and passages to repeat (where speculative decoding's n-gram drafts hit).

Each dataset is a list of sessions of one or more turns, drawn from a seeded generator
so that two runs send the same prompts; single-turn datasets are sessions of one turn.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmd.errors import InvalidParameterError

DATASET_NAMES = ("random", "shared-prefix", "sharegpt", "multi-turn", "repeat")
PASSAGE_WORDS = (
    "the", "river", "north", "stone", "bridge", "market", "opened", "early", "every",
    "morning", "when", "traders", "carried", "bread", "and", "salt", "across", "old",
    "city", "walls", "under", "grey", "sky", "while", "children", "counted", "boats",
    "near", "harbor", "lights", "slowly", "faded", "into", "quiet", "evening", "air",
)  # fmt: skip
"""The vocabulary of the repeat dataset's passages (plain words every tokenizer knows)."""
FIRST_TOKEN_ID = 10
"""Random prompts avoid the lowest ids, where tokenizers keep their special tokens."""


@dataclass(frozen=True)
class Turn:
    """One request of a session: new input (ids or text) and how many tokens to generate."""

    max_tokens: int
    prompt_token_ids: tuple[int, ...] = ()
    prompt: str | None = None
    """Text to send instead of ids (ShareGPT without a local tokenizer)."""


@dataclass(frozen=True)
class Session:
    """A sequence of turns; each turn after the first resends the whole history before it."""

    turns: tuple[Turn, ...]


def _lengths(rng: random.Random, mean: int, range_ratio: float, count: int) -> list[int]:
    """`count` lengths uniform in [mean * (1 - r), mean * (1 + r)], at least 1."""
    low = max(1, round(mean * (1 - range_ratio)))
    high = max(low, round(mean * (1 + range_ratio)))
    return [rng.randint(low, high) for _ in range(count)]


def _random_ids(rng: random.Random, length: int, vocab_size: int) -> tuple[int, ...]:
    return tuple(rng.randrange(FIRST_TOKEN_ID, vocab_size) for _ in range(length))


def _check(name: str, value: float, minimum: float) -> None:
    if value < minimum:
        raise InvalidParameterError(f"{name} must be at least {minimum}, got {value}", name)


def random_sessions(
    num_prompts: int,
    input_len: int,
    output_len: int,
    range_ratio: float,
    vocab_size: int,
    seed: int = 0,
) -> list[Session]:
    """Single-turn prompts of random token ids with uniformly spread lengths."""
    _check("input_len", input_len, 1)
    _check("output_len", output_len, 1)
    if not 0 <= range_ratio < 1:
        raise InvalidParameterError(
            f"range_ratio must be in [0, 1), got {range_ratio}", "range_ratio"
        )
    rng = random.Random(seed)
    input_lens = _lengths(rng, input_len, range_ratio, num_prompts)
    output_lens = _lengths(rng, output_len, range_ratio, num_prompts)
    return [
        Session((Turn(out_len, _random_ids(rng, in_len, vocab_size)),))
        for in_len, out_len in zip(input_lens, output_lens)
    ]


def shared_prefix_sessions(
    num_prompts: int,
    num_groups: int,
    prefix_len: int,
    input_len: int,
    output_len: int,
    vocab_size: int,
    seed: int = 0,
) -> list[Session]:
    """Prompts in `num_groups` groups; each group shares a `prefix_len`-token system prompt.

    Prompts are dealt round-robin to groups, so every group's prefix is reused while its
    blocks may still be cached, which is what a prefix-caching benchmark should exercise.
    """
    _check("num_groups", num_groups, 1)
    _check("prefix_len", prefix_len, 1)
    _check("input_len", input_len, 1)
    rng = random.Random(seed)
    prefixes = [_random_ids(rng, prefix_len, vocab_size) for _ in range(num_groups)]
    return [
        Session(
            (
                Turn(
                    output_len,
                    prefixes[index % num_groups] + _random_ids(rng, input_len, vocab_size),
                ),
            )
        )
        for index in range(num_prompts)
    ]


def repeat_sessions(
    num_prompts: int, input_len: int, output_len: int, seed: int = 0
) -> list[Session]:
    """Text prompts asking to repeat a seeded passage of `input_len` words word for word.

    A model that follows the instruction copies its prompt, so prompt-lookup (n-gram)
    drafts are mostly accepted: the workload where speculative decoding should pay.
    """
    _check("input_len", input_len, 1)
    _check("output_len", output_len, 1)
    rng = random.Random(seed)
    sessions = []
    for _ in range(num_prompts):
        passage = " ".join(rng.choice(PASSAGE_WORDS) for _ in range(input_len))
        prompt = f"Repeat the following passage word for word.\n\n{passage}\n\nRepeated:"
        sessions.append(Session((Turn(output_len, prompt=prompt),)))
    return sessions


def multi_turn_sessions(
    num_sessions: int,
    num_turns: int,
    input_len: int,
    output_len: int,
    vocab_size: int,
    seed: int = 0,
) -> list[Session]:
    """Chat sessions of `num_turns` user turns of random ids; replies are the model's own."""
    _check("num_turns", num_turns, 1)
    rng = random.Random(seed)
    return [
        Session(
            tuple(
                Turn(output_len, _random_ids(rng, input_len, vocab_size)) for _ in range(num_turns)
            )
        )
        for _ in range(num_sessions)
    ]


def _conversations(path: Path) -> list[list[dict[str, Any]]]:
    """Conversations of a ShareGPT JSON array or JSONL file."""
    try:
        text = path.read_text()
    except OSError as error:
        raise InvalidParameterError(
            f"cannot read dataset {path}: {error}", "dataset_path"
        ) from None
    try:
        if text.lstrip().startswith("["):
            items = json.loads(text)
        else:
            items = [json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as error:
        raise InvalidParameterError(
            f"{path} is not JSON or JSONL: {error}", "dataset_path"
        ) from None
    conversations = []
    for item in items:
        turns = item.get("conversations") if isinstance(item, dict) else None
        if isinstance(turns, list):
            conversations.append(turns)
    return conversations


def sharegpt_sessions(
    path: str | Path,
    num_prompts: int,
    seed: int = 0,
    encode=None,
    max_output_len: int | None = None,
) -> list[Session]:
    """First human turn and the reply's length from ShareGPT conversations, shuffled by seed.

    `encode` (text -> ids) makes prompts exact token ids and output lengths exact; without
    it prompts go as text and the output length is estimated as 1.3 tokens per word.
    """
    conversations = _conversations(Path(path))
    rng = random.Random(seed)
    rng.shuffle(conversations)
    sessions = []
    for turns in conversations:
        if len(sessions) == num_prompts:
            break
        if len(turns) < 2 or not all(isinstance(t, dict) for t in turns[:2]):
            continue
        prompt, reply = str(turns[0].get("value", "")), str(turns[1].get("value", ""))
        if not prompt.strip() or not reply.strip():
            continue
        if encode is not None:
            output_len = len(encode(reply))
            turn = Turn(max(1, output_len), prompt_token_ids=tuple(encode(prompt)))
        else:
            output_len = round(1.3 * len(reply.split()))
            turn = Turn(max(1, output_len), prompt=prompt)
        if max_output_len is not None:
            turn = Turn(min(turn.max_tokens, max_output_len), turn.prompt_token_ids, turn.prompt)
        if turn.prompt_token_ids or turn.prompt:
            sessions.append(Session((turn,)))
    if not sessions:
        raise InvalidParameterError(f"{path} holds no usable ShareGPT conversation", "dataset_path")
    return sessions
