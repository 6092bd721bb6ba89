"""Resolution of the device and dtype settings into torch objects.

Kept apart from the runner so that `auto` means the same everywhere (engine, benchmarks,
status output).
"""

from __future__ import annotations

import torch

from llmd.errors import InvalidParameterError

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(name: str) -> torch.device:
    """auto means CUDA when a GPU is visible, else CPU; asking for absent CUDA is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise InvalidParameterError("CUDA was requested but no GPU is visible", "device")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """auto means bfloat16 on CUDA and float32 on CPU (where half types are slow)."""
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
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
