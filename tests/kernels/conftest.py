"""Kernel tests: interpreter on CPU-only machines, real kernels on CUDA; skipped sans triton."""

from __future__ import annotations

import pytest

from tests.kernels.triton_env import (
    HAS_TRITON,
    device_params,
    enable_interpreter_without_cuda,
    skip_unless_runnable,
)

enable_interpreter_without_cuda()  # before any test module imports llmd.kernels

if not HAS_TRITON:
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(params=device_params())
def device(request) -> str:
    """Device to run one kernel test on; skips where triton cannot run there."""
    skip_unless_runnable(request.param)
    return request.param
