"""Where kernel tests can run: CUDA when present, else CPU through triton's interpreter.

Triton chooses interpreter or compiler when its modules are imported, so the variable must
be set before that; on CUDA machines it is left alone and the kernels are compiled.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest
import torch

HAS_TRITON = importlib.util.find_spec("triton") is not None


def enable_interpreter_without_cuda() -> None:
    """Set TRITON_INTERPRET=1 (unless set) on machines without CUDA, before triton is used.

    When something (e.g. transformers, through torch._dynamo) already imported triton in
    compiled mode, triton's Python modules and llmd's kernel modules are imported afresh so
    that their @triton.jit functions are built for the interpreter.
    """
    if torch.cuda.is_available() or not HAS_TRITON:
        return
    os.environ.setdefault("TRITON_INTERPRET", "1")
    from llmd.kernels import is_interpreter_enabled

    if not is_interpreter_enabled() or "triton" not in sys.modules:
        return
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    if isinstance(tl.zeros, InterpretedFunction):
        return
    for name in list(sys.modules):
        is_triton_python = name.partition(".")[0] == "triton" and not name.startswith("triton._C")
        is_llmd_kernel = name.startswith("llmd.kernels.") or name == "llmd.attention.triton_backend"
        if is_triton_python or is_llmd_kernel:
            del sys.modules[name]  # the compiled libtriton extension stays: it cannot reload
    importlib.import_module("triton")


def device_params() -> list:
    """pytest params for the `device` fixture: cpu (interpreter) and cuda (compiled)."""
    return [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.cuda)]


def skip_unless_runnable(device: str) -> None:
    """Skip the calling test when triton kernels cannot run on `device` in this process."""
    if not HAS_TRITON:
        pytest.skip("triton is not installed")
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    from llmd.kernels import is_interpreter_enabled

    interpreting = is_interpreter_enabled()
    if device == "cuda":
        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA device")
        if interpreting:
            pytest.skip("TRITON_INTERPRET=1 is set: CUDA kernels would run in the interpreter")
    elif not interpreting or not isinstance(tl.zeros, InterpretedFunction):
        pytest.skip("CPU kernels need TRITON_INTERPRET=1 set before triton is imported")
