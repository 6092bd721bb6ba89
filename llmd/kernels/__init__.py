"""Triton kernels (paged attention, KV store, norms, rotary, activation) with torch references.

Importing this package never imports triton, so CPU-only installs without triton can still
import llmd; each kernel module imports triton itself and is loaded only by code that uses it.
"""

from __future__ import annotations

import functools
import importlib.util
import os

_TRUE_WORDS = ("1", "true", "on", "yes", "y")


@functools.cache
def is_triton_available() -> bool:
    """True when the triton package can be imported (running it needs CUDA or the interpreter)."""
    return importlib.util.find_spec("triton") is not None


def is_interpreter_enabled() -> bool:
    """True when TRITON_INTERPRET is set, so kernels run on CPU tensors in triton's interpreter.

    Triton reads the variable when a kernel module is imported, so it must be set before that.
    """
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in _TRUE_WORDS
