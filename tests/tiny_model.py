"""A complete tiny model directory (random weights plus a real trained tokenizer).

Engine, daemon and TUI tests need text in and text out, so the checkpoint's vocabulary is
sized to the tokenizer's and the special ids agree.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

from tests.checkpoints import make_tiny_checkpoint
from tests.tokenizers_factory import make_tiny_tokenizer


def make_tiny_model(
    path: str | pathlib.Path, arch: str = "llama", **overrides: Any
) -> pathlib.Path:
    """Write tokenizer files and a matching random checkpoint of `arch` into `path`."""
    from transformers import AutoTokenizer

    path = pathlib.Path(path)
    make_tiny_tokenizer(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    ids = {
        "vocab_size": len(tokenizer),
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    make_tiny_checkpoint(arch, path, **{**ids, **overrides})
    generation = {"eos_token_id": tokenizer.eos_token_id, "bos_token_id": tokenizer.bos_token_id}
    (path / "generation_config.json").write_text(json.dumps(generation))
    return path
