"""Resolution of the device and dtype settings into torch objects.

Kept apart from the runner so that `auto` means the same everywhere (engine, benchmarks,
status output).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch

from llmd.errors import InvalidParameterError

logger = logging.getLogger(__name__)

NATIVE_BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
"""CPU feature flags (Linux /proc/cpuinfo) with bf16 dot-product instructions."""

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(name: str) -> torch.device:
    """auto means CUDA when a GPU is visible, else CPU; asking for absent CUDA is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise InvalidParameterError("CUDA was requested but no GPU is visible", "device")
    return torch.device(name)


def resolve_async_scheduling(configured: bool | None, device: torch.device) -> bool:
    """Whether steps are pipelined: as configured, else on CUDA only (there the host's step
    work hides behind the device's; a CPU runs both on the same cores)."""
    return device.type == "cuda" if configured is None else configured


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """auto means bfloat16 on CUDA and on CPUs with native bf16 math, else float32.

    Without AVX512_BF16 or AMX, bf16 matmuls are emulated and slower than fp32.
    """
    if name == "auto":
        if device.type == "cuda" or cpu_has_native_bf16():
            return torch.bfloat16
        return torch.float32
    if name not in _DTYPES:
        raise InvalidParameterError(f"unknown dtype {name!r}", "dtype")
    return _DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    """The config spelling of a torch dtype (float32, bfloat16, float16)."""
    return str(dtype).removeprefix("torch.")


def device_name(device: torch.device) -> str:
    """A human name of the device: the GPU's marketing name, or "cpu"."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return device.type


CPU_FLAGS_ENV = "LLMD_CPU_FLAGS"
"""Environment variable whose space-separated flags replace the CPU's in the dtype rule.

It shows (and lets tests check) what `auto` picks on another CPU; compiled code still
targets the real one.
"""


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The CPU's feature flags: $LLMD_CPU_FLAGS if set, else /proc/cpuinfo (or `cpuinfo`)."""
    if cpuinfo is None:
        override = os.environ.get(CPU_FLAGS_ENV)
        if override is not None:
            return frozenset(override.split())
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return frozenset()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[-1].split())
    return frozenset()


def cpu_has_native_bf16(cpuinfo: str | None = None) -> bool:
    """Whether the CPU has AVX512_BF16 or AMX-BF16 (see `cpu_flags`)."""
    flags = cpu_flags(cpuinfo)
    return any(flag in flags for flag in NATIVE_BF16_CPU_FLAGS)


def default_num_threads() -> int:
    """$OMP_NUM_THREADS when set, else the cores this process may run on."""
    from_env = os.environ.get("OMP_NUM_THREADS", "")
    if from_env.isdigit() and int(from_env) > 0:
        return int(from_env)
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def set_num_threads(requested: int | None) -> int:
    """Set torch's intra-op threads once for the forward pass; return the number used."""
    num_threads = requested if requested is not None else default_num_threads()
    if torch.get_num_threads() != num_threads:
        torch.set_num_threads(num_threads)
        logger.info("forward pass on %d CPU threads", num_threads)
    return num_threads
