"""Launch arguments that the paged kernels (KV store, decode, prefill attention) share.

Each paged kernel takes the caches' strides and the same shape constants in the same
order; building them in one place keeps three launchers from spelling the list out again
and drifting apart from each other or from the kernels' parameter order.
"""

from __future__ import annotations

import torch

from llmd.kernels.checks import KV_CACHE_FP8_DTYPE, check_kv_scale, must_dot_in_fp32

LOG2_E = 1.4426950408889634
"""log2(e): the attention kernels use exp2, so the softmax scale is multiplied by it."""


def cache_strides(k_cache: torch.Tensor, v_cache: torch.Tensor) -> tuple[int, ...]:
    """(block, token, head) strides of the key cache, then the same of the value cache."""
    return (*k_cache.stride()[:3], *v_cache.stride()[:3])


def cache_scales(k_cache: torch.Tensor, k_scale: float, v_scale: float) -> tuple[float, float]:
    """(k_scale, v_scale) the kernels apply: the given ones, checked, for an fp8 cache, else
    (1.0, 1.0) since other caches hold K/V themselves."""
    check_kv_scale(k_scale, "k_scale")
    check_kv_scale(v_scale, "v_scale")
    if k_cache.dtype != KV_CACHE_FP8_DTYPE:
        return 1.0, 1.0
    return float(k_scale), float(v_scale)


def attention_strides(
    out: torch.Tensor,  # [rows, num_heads, head_dim]
    query: torch.Tensor,  # [rows, num_heads, head_dim]
    k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    block_tables: torch.Tensor,  # [num_seqs, max_blocks_per_seq]
) -> tuple[int, ...]:
    """The strides a paged attention kernel takes, in its order: out and query (row, head),
    both caches, then one block-table row."""
    return (
        *out.stride()[:2],
        *query.stride()[:2],
        *cache_strides(k_cache, v_cache),
        block_tables.stride(0),
    )


def attention_constants(query: torch.Tensor, k_cache: torch.Tensor) -> dict[str, int | bool]:
    """The constexprs both paged attention kernels take: GQA group size, head_dim, cache
    block size and whether tl.dot must run in fp32 for this dtype."""
    num_heads, head_dim = query.shape[1], query.shape[2]
    return {
        "QUERY_GROUP_SIZE": num_heads // k_cache.shape[2],
        "HEAD_DIM": head_dim,
        "BLOCK_SIZE": k_cache.shape[1],
        "DOT_IN_FP32": must_dot_in_fp32(query.dtype),
    }
