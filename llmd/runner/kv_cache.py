"""Allocation and sizing of the paged KV cache tensors.

One tensor per layer for K and one for V, in the attention backend's layout (token-major
`[num_blocks, block_size, num_kv_heads, head_dim]` for torch and Triton, per-head blocks
for the CPU backend), so a block id indexes the same slots in every layer.
"""

from __future__ import annotations

import torch

from llmd.attention.backend import AttentionBackend
from llmd.errors import InvalidParameterError
from llmd.runner.device import dtype_name

GIB = 1024**3


def kv_bytes_per_block(
    num_layers: int, num_kv_heads: int, head_dim: int, block_size: int, dtype: torch.dtype
) -> int:
    """Bytes one block occupies across all layers, K and V together."""
    element_size = torch.empty((), dtype=dtype).element_size()
    return 2 * num_layers * block_size * num_kv_heads * head_dim * element_size


def num_blocks_for_budget(budget_bytes: float, bytes_per_block: int) -> int:
    """How many blocks fit a memory budget; errors if not even one does."""
    num_blocks = int(budget_bytes // bytes_per_block)
    if num_blocks < 1:
        raise InvalidParameterError(
            f"KV cache budget of {budget_bytes / GIB:.3f} GiB holds no block of "
            f"{bytes_per_block} bytes",
            "kv_cache_memory_gib",
        )
    return num_blocks


def allocate_kv_cache(
    num_layers: int,
    num_blocks: int,
    block_size: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: torch.dtype,
    device: torch.device,
    shapes: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Zero-filled (k_cache, v_cache) per layer, in `shapes` (the backend's
    `kv_cache_shapes`) or by default [num_blocks, block_size, kv_heads, dim]."""
    if shapes is None:
        shape = (num_blocks, block_size, num_kv_heads, head_dim)
        shapes = (shape, shape)
    k_shape, v_shape = shapes
    return [
        (
            torch.zeros(k_shape, dtype=dtype, device=device),
            torch.zeros(v_shape, dtype=dtype, device=device),
        )
        for _ in range(num_layers)
    ]


KV_CACHE_DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "fp8": torch.float8_e4m3fn,
    "fp8_e4m3": torch.float8_e4m3fn,
}
"""Config names of the KV element types; `fp8` is e4m3 (vLLM's default fp8 format)."""


def resolve_kv_cache_dtype(
    name: str,
    model_dtype: torch.dtype,
    backend: AttentionBackend,
    device: torch.device | None = None,
) -> torch.dtype:
    """The KV cache's element type: `auto` is the model's; fp8 needs the cpu or triton
    backend, another dtype the cpu one.

    The cpu attention op reads a cache of any dtype (it computes in float32 either way);
    the Triton kernels read an fp8 one (quantizing K/V with the layer's scales) where the
    device can (`check_kv_cache_dtype`, when `device` is given); the torch path stores
    K/V as they are.
    """
    if name == "auto":
        return model_dtype
    if name not in KV_CACHE_DTYPES:
        raise InvalidParameterError(f"unknown KV cache dtype {name!r}", "kv_cache_dtype")
    dtype = KV_CACHE_DTYPES[name]
    is_fp8_read = dtype == torch.float8_e4m3fn and backend.reads_fp8_kv
    if dtype != model_dtype and not (backend.reads_any_kv_dtype or is_fp8_read):
        needs = "cpu or triton" if dtype == torch.float8_e4m3fn else "cpu"
        raise InvalidParameterError(
            f"{name} under {dtype_name(model_dtype)} activations needs the {needs} attention "
            f"backend (the {backend.name} backend keeps K/V in the model's dtype)",
            "kv_cache_dtype",
        )
    if device is not None:
        backend.check_kv_cache_dtype(dtype, device)
    return dtype
