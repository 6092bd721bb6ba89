"""Kernel tests: interpreter on CPU-only machines, real kernels on CUDA; skipped sans triton.

Without triton, a module that imports a kernel (and so triton) is reported as skipped,
with the reason, instead of silently left out; the modules that import without it run,
and their tests that need triton skip themselves (the `device` fixture, importorskip).
"""

from __future__ import annotations

import pytest

from tests.kernels.triton_env import (
    HAS_TRITON,
    device_params,
    enable_interpreter_without_cuda,
    skip_unless_runnable,
)

enable_interpreter_without_cuda()  # before any test module imports llmd.kernels

TRITON_MISSING = "triton is not installed"


def _is_triton_missing(error: BaseException | None) -> bool:
    """True when `error` is the ImportError of triton itself (not of something it needs)."""
    return isinstance(error, ImportError) and (error.name or "").partition(".")[0] == "triton"


class _KernelTestModule(pytest.Module):
    """A test module skipped, with the reason, when importing it fails for want of triton."""

    def collect(self):
        try:
            return super().collect()
        except self.CollectError as error:
            if not _is_triton_missing(error.__cause__):
                raise
            reason = f"{TRITON_MISSING}: {self.path.name} imports it, none of its tests ran"
            raise pytest.skip.Exception(reason, allow_module_level=True) from None


def pytest_pycollect_makemodule(module_path, parent):
    """Kernel test modules are collected as _KernelTestModule where triton is missing."""
    if HAS_TRITON:
        return None
    return _KernelTestModule.from_parent(parent, path=module_path)


@pytest.fixture(params=device_params())
def device(request) -> str:
    """Device to run one kernel test on; skips where triton cannot run there."""
    skip_unless_runnable(request.param)
    return request.param
