"""Input checks shared by the kernel launchers, raising typed errors before any launch.

A Triton kernel trusts its pointers and strides blindly, so each launcher states its contract
with these checks; they read only shapes, dtypes, strides and devices, never tensor values,
so they cost no host-device synchronisation and are safe inside CUDA-graph capture.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from llmd.errors import InvalidParameterError, require
from llmd.kernels import is_interpreter_enabled

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
"""Activation and KV-cache dtypes every kernel accepts."""
INDEX_DTYPES = (torch.int32, torch.int64)
"""Dtypes accepted for index tensors (positions, slots, block tables, lengths)."""


def check_tensor(value: object, name: str) -> torch.Tensor:
    """Return `value` if it is a tensor, otherwise raise naming `name`."""
    if not isinstance(value, torch.Tensor):
        raise InvalidParameterError(f"must be a torch.Tensor, got {type(value).__name__}", name)
    return value


def check_dtype(tensor: torch.Tensor, name: str, dtypes: Sequence[torch.dtype]) -> None:
    """Raise unless `tensor.dtype` is one of `dtypes`."""
    allowed = ", ".join(str(dtype).removeprefix("torch.") for dtype in dtypes)
    require(tensor.dtype in dtypes, name, f"dtype must be one of {allowed}, got {tensor.dtype}")


def check_same_dtype(tensor: torch.Tensor, name: str, expected: torch.dtype) -> None:
    """Raise unless `tensor.dtype` equals `expected` (the kernels never convert silently)."""
    require(tensor.dtype == expected, name, f"dtype must be {expected}, got {tensor.dtype}")


def check_shape(tensor: torch.Tensor, name: str, shape: Sequence[int | None]) -> None:
    """Raise unless `tensor` has `len(shape)` dims and each non-None size matches."""
    require(
        tensor.dim() == len(shape),
        name,
        f"must have {len(shape)} dims, got shape {tuple(tensor.shape)}",
    )
    for size, expected in zip(tensor.shape, shape):
        if expected is not None and size != expected:
            wanted = tuple("*" if s is None else s for s in shape)
            raise InvalidParameterError(f"shape must be {wanted}, got {tuple(tensor.shape)}", name)


def check_last_dim_contiguous(tensor: torch.Tensor, name: str) -> None:
    """Raise unless the innermost dim has stride 1 (kernels vectorise along it)."""
    require(
        tensor.dim() == 0 or tensor.shape[-1] <= 1 or tensor.stride(-1) == 1,
        name,
        f"last dim must be contiguous (stride 1), got strides {tensor.stride()}",
    )


def check_contiguous(tensor: torch.Tensor, name: str) -> None:
    """Raise unless `tensor` is contiguous in memory."""
    require(
        tensor.is_contiguous(),
        name,
        f"must be contiguous, got shape {tuple(tensor.shape)} strides {tensor.stride()}",
    )


def check_devices(tensors: dict[str, torch.Tensor]) -> torch.device:
    """Raise unless all tensors share one device that triton can run on; return it.

    CUDA tensors always qualify; CPU tensors only when TRITON_INTERPRET is set.
    """
    devices = {name: tensor.device for name, tensor in tensors.items()}
    first_name, device = next(iter(devices.items()))
    for name, other in devices.items():
        require(
            other == device,
            name,
            f"must be on the same device as {first_name} ({device}), got {other}",
        )
    if device.type != "cuda" and not is_interpreter_enabled():
        raise InvalidParameterError(
            f"triton kernels need CUDA tensors (or TRITON_INTERPRET=1 on CPU), got {device}",
            first_name,
        )
    return device


def next_power_of_2(value: int) -> int:
    """Smallest power of two >= value (and >= 1); triton block shapes must be powers of two."""
    return 1 << max(int(value) - 1, 0).bit_length()


def must_dot_in_fp32(dtype: torch.dtype) -> bool:
    """True when tl.dot operands of `dtype` must be fp32 with 3xTF32 precision.

    fp32 inputs need it to keep fp32 accuracy on tensor cores (plain TF32 would not); bf16
    needs it only under the interpreter, whose tl.dot multiplies bf16's raw uint16 storage.
    On GPUs bf16 and fp16 go to the tensor cores directly.
    """
    if dtype == torch.float32:
        return True
    return dtype == torch.bfloat16 and is_interpreter_enabled()
