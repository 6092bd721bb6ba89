"""Finds the daemon's tokenizer on this machine so ShareGPT prompts become exact token ids.

Output lengths of a ShareGPT run are the reference replies' token counts; those need the
serving model's tokenizer, which the `tokenizers` library reads without transformers.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

DEFAULT_MODEL_NAME = "llmd-default"


def find_encoder(model: str | None) -> Callable[[str], list[int]] | None:
    """text -> ids for a model directory (or "llmd-default"), or None if none is found."""
    if not model:
        return None
    if model == DEFAULT_MODEL_NAME:
        path = Path(__file__).resolve().parent.parent / "default_model"
    else:
        path = Path(model).expanduser()
    tokenizer_file = path / "tokenizer.json" if path.is_dir() else path
    if tokenizer_file.name != "tokenizer.json" or not tokenizer_file.is_file():
        return None
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    return lambda text: tokenizer.encode(text, add_special_tokens=False).ids
