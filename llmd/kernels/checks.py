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
KV_CACHE_FP8_DTYPE = torch.float8_e4m3fn
"""The fp8 cache dtype the paged kernels read besides the query's (K / k_scale, V / v_scale)."""
INDEX_DTYPES = (torch.int32, torch.int64)
"""Dtypes accepted for index tensors (positions, slots, block tables, lengths)."""


def check_tensor(value: object, name: str) -> torch.Tensor:
    """Return `value` if it is a tensor, otherwise raise naming `name`."""
    if not isinstance(value, torch.Tensor):
        raise InvalidParameterError(f"must be a torch.Tensor, got {type(value).__name__}", name)
    return value


def check_tensors(tensors: dict[str, object]) -> None:
    """Raise naming the first value of `tensors` that is not a tensor."""
    for name, value in tensors.items():
        check_tensor(value, name)


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


def check_last_dims_contiguous(tensors: dict[str, torch.Tensor]) -> None:
    """Raise naming the first of `tensors` whose innermost dim is not contiguous."""
    for name, tensor in tensors.items():
        check_last_dim_contiguous(tensor, name)


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


def check_kv_scale(scale: object, name: str) -> None:
    """Raise unless `scale` (an fp8 cache's k_scale or v_scale) is a positive finite float."""
    is_number = isinstance(scale, (int, float)) and not isinstance(scale, bool)
    if not is_number or not 0 < scale < float("inf"):
        raise InvalidParameterError(f"must be a positive finite float, got {scale!r}", name)


MAX_ATTENTION_HEAD_DIM = 256
"""Largest head dimension the attention kernels' tiles are sized for."""


def check_paged_attention_inputs(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    out: torch.Tensor | None,
    extra_tensors: dict[str, torch.Tensor] | None = None,
    num_seqs: int | None = None,
) -> None:
    """The contract shared by the paged decode and prefill kernels: query, paged caches,
    block tables, lengths, scale and output; `extra_tensors` join the same-device check,
    and `num_seqs`, when known, fixes the block tables' rows."""
    tensors = {"query": query, "k_cache": k_cache, "v_cache": v_cache}
    tensors |= {"block_tables": block_tables, "seq_lens": seq_lens, **(extra_tensors or {})}
    check_tensors(tensors)
    check_dtype(query, "query", FLOAT_DTYPES)
    check_shape(query, "query", (None, None, None))
    num_heads, head_dim = query.shape[1], query.shape[2]
    check_shape(k_cache, "k_cache", (None, None, None, head_dim))
    check_dtype(k_cache, "k_cache", (query.dtype, KV_CACHE_FP8_DTYPE))
    check_shape(v_cache, "v_cache", tuple(k_cache.shape))
    check_same_dtype(v_cache, "v_cache", k_cache.dtype)
    num_kv_heads = k_cache.shape[2]
    require(num_kv_heads > 0, "k_cache", "must have at least one KV head")
    require(
        num_heads % num_kv_heads == 0,
        "query",
        f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})",
    )
    require(
        0 < head_dim <= MAX_ATTENTION_HEAD_DIM,
        "query",
        f"head_dim must be in [1, {MAX_ATTENTION_HEAD_DIM}]",
    )
    check_dtype(block_tables, "block_tables", INDEX_DTYPES)
    check_shape(block_tables, "block_tables", (num_seqs, None))
    check_dtype(seq_lens, "seq_lens", INDEX_DTYPES)
    check_shape(seq_lens, "seq_lens", (block_tables.shape[0],))
    check_contiguous(seq_lens, "seq_lens")
    check_last_dims_contiguous(
        {name: tensors[name] for name in ("query", "k_cache", "v_cache", "block_tables")}
    )
    if out is not None:
        check_tensor(out, "out")
        check_shape(out, "out", tuple(query.shape))
        check_same_dtype(out, "out", query.dtype)
        check_last_dim_contiguous(out, "out")
        tensors["out"] = out
    check_devices(tensors)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0:
        raise InvalidParameterError(f"must be a positive float, got {scale!r}", "scale")
