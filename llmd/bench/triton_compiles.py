"""Counting Triton kernel compilations inside a timed run.

A kernel variant first met in a timed window costs a compile (up to about a second on a
GPU) that a serving daemon pays once; counting them tells that cost apart from
steady-state speed, so a benchmark figure can be trusted or rerun.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


def _runtime_knobs() -> Any | None:
    """Triton's runtime knobs when it has the post-compile hook (Triton 3.4+), else None."""
    try:
        import triton
    except ImportError:
        return None
    runtime = getattr(getattr(triton, "knobs", None), "runtime", None)
    return runtime if hasattr(runtime, "jit_post_compile_hook") else None


@contextlib.contextmanager
def counting_triton_compiles() -> Iterator[list[str] | None]:
    """Yield a list that collects the kernel of every Triton compile inside the block.

    A compile includes loading a variant from Triton's disk cache (first use in this
    process). Yields None, installing nothing, when Triton or its hook is missing; a hook
    already installed is chained, and restored on exit.
    """
    runtime = _runtime_knobs()
    if runtime is None:
        yield None
        return
    compiled: list[str] = []
    previous = runtime.jit_post_compile_hook

    def hook(*args: Any, **kwargs: Any) -> Any:
        compiled.append(str(kwargs.get("repr", "?")).split("[", 1)[0])
        return previous(*args, **kwargs) if previous is not None else None

    runtime.jit_post_compile_hook = hook
    try:
        yield compiled
    finally:
        runtime.jit_post_compile_hook = previous
