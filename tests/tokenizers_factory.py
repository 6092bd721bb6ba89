"""Builds tiny real tokenizers in temporary directories for tests.

Tests need tokenizers that behave like production ones (byte-level BPE with multi-byte UTF-8
characters split across tokens, special tokens, a chat template) without any download.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

BOS_TOKEN = "<|startoftext|>"
EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<|pad|>"
SPECIAL_TOKENS = (BOS_TOKEN, EOS_TOKEN, PAD_TOKEN)

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ message['role'] }}: {{ message['content'] }}"
    "{% if message['role'] == 'assistant' %}{{ eos_token }}{% endif %}"
    "{{ '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)

_ENGLISH = """\
The quick brown fox jumps over the lazy dog. A serving engine batches many requests
together so that the accelerator stays busy. Each request has a prompt and a number of
generated tokens. The scheduler decides which requests run in each step, and the cache
keeps the keys and values of tokens that were already computed. When memory runs out, a
request is preempted and its blocks are freed; later it is recomputed from its tokens.
Hello world! How are you today? I am fine, thank you. What is the capital of France?
The capital of France is Paris. One, two, three, four, five, six, seven, eight, nine, ten.
Once upon a time there was a small model that learned to write short stories about cats,
dogs, trees, rivers and the sea. It liked numbers like 12, 345 and 6789 too.
"""

_NON_ASCII = "héllo wörld 日本語 🙂 café naïve Ωmega — “quotes” ∑ 中文 ✓"


def _corpus() -> list[str]:
    lines = [line for line in _ENGLISH.splitlines() if line]
    return lines * 20 + [_NON_ASCII]


def _train_byte_level(vocab_size: int) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer)
    return tokenizer


def _train_metaspace(vocab_size: int) -> Tokenizer:
    """A Llama-2-style tokenizer: Metaspace pre-tokenizer and byte-fallback tokens."""
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    trainer = trainers.BpeTrainer(
        vocab_size=max(vocab_size - 256, len(SPECIAL_TOKENS) + 64),
        special_tokens=list(SPECIAL_TOKENS),
        limit_alphabet=60,
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer)
    # Byte tokens are ordinary vocabulary entries (not special), as in Llama-2's tokenizer.
    data = json.loads(tokenizer.to_str())
    vocab = data["model"]["vocab"]
    for value in range(256):
        vocab.setdefault(f"<0x{value:02X}>", len(vocab))
    data["model"]["byte_fallback"] = True
    tokenizer = Tokenizer.from_str(json.dumps(data))
    tokenizer.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(content=" ", left=1, right=0),
        ]
    )
    return tokenizer


def _save(tokenizer: Tokenizer, path: Path, add_bos: bool) -> Path:
    if add_bos:
        bos_id = tokenizer.token_to_id(BOS_TOKEN)
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{BOS_TOKEN} $A",
            pair=f"{BOS_TOKEN} $A {BOS_TOKEN} $B",
            special_tokens=[(BOS_TOKEN, bos_id)],
        )
    path.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(path / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS_TOKEN,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "add_bos_token": add_bos,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 2048,
        "chat_template": CHAT_TEMPLATE,
    }
    (path / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    special = {"bos_token": BOS_TOKEN, "eos_token": EOS_TOKEN, "pad_token": PAD_TOKEN}
    (path / "special_tokens_map.json").write_text(json.dumps(special, indent=2))
    return path


def make_tiny_tokenizer(path: str | Path, vocab_size: int = 400, add_bos: bool = True) -> Path:
    """Train a byte-level BPE tokenizer (GPT-2/Llama-3 style) and save it as a HF dir at `path`."""
    return _save(_train_byte_level(vocab_size), Path(path), add_bos)


def make_tiny_metaspace_tokenizer(
    path: str | Path, vocab_size: int = 400, add_bos: bool = True
) -> Path:
    """Train a Metaspace + byte-fallback BPE tokenizer (Llama-2 style) and save it at `path`."""
    return _save(_train_metaspace(vocab_size), Path(path), add_bos)
