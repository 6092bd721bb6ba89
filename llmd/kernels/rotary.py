"""Rotary position embedding applied in place to q and k, in HF's rotate_half (neox) layout.

Rotating q and k of one token in one program reads its cos/sin row once and touches each
q/k element exactly once, instead of the several temporaries the torch formula allocates.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from llmd.errors import require
from llmd.kernels import checks
from llmd.kernels.launch_configs import tile_num_warps


@triton.jit
def _rotate_heads(
    x_ptr,  # first element of one token's [num_heads, head_dim] row
    stride_head,
    cos,  # [BLOCK_HALF] fp32
    sin,  # [BLOCK_HALF] fp32
    NUM_HEADS: tl.constexpr,
    HALF_DIM: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
):
    """Rotate every head of one token: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)."""
    offs_h = tl.arange(0, BLOCK_H)
    offs_j = tl.arange(0, BLOCK_HALF)
    mask = (offs_h < NUM_HEADS)[:, None] & (offs_j < HALF_DIM)[None, :]
    first_ptrs = x_ptr + offs_h[:, None] * stride_head + offs_j[None, :]  # [BLOCK_H, BLOCK_HALF]
    x1 = tl.load(first_ptrs, mask=mask, other=0.0)
    x2 = tl.load(first_ptrs + HALF_DIM, mask=mask, other=0.0)
    x1_f32 = x1.to(tl.float32)
    x2_f32 = x2.to(tl.float32)
    out1 = x1_f32 * cos[None, :] - x2_f32 * sin[None, :]
    out2 = x2_f32 * cos[None, :] + x1_f32 * sin[None, :]
    tl.store(first_ptrs, out1.to(x1.dtype), mask=mask)
    tl.store(first_ptrs + HALF_DIM, out2.to(x1.dtype), mask=mask)


@triton.jit
def _rotary_kernel(
    query_ptr,  # [num_tokens, num_heads, head_dim]
    key_ptr,  # [num_tokens, num_kv_heads, head_dim]
    cos_ptr,  # [max_positions, >= head_dim / 2]
    sin_ptr,  # [max_positions, >= head_dim / 2]
    positions_ptr,  # [num_tokens]
    stride_q_token,
    stride_q_head,
    stride_k_token,
    stride_k_head,
    stride_cos_pos,
    stride_sin_pos,
    NUM_HEADS: tl.constexpr,
    NUM_KV_HEADS: tl.constexpr,
    HALF_DIM: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_KV_H: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
):
    """One program: rotate all query and key heads of one token by its position's angles."""
    token = tl.program_id(0).to(tl.int64)
    position = tl.load(positions_ptr + token).to(tl.int64)
    offs_j = tl.arange(0, BLOCK_HALF)
    is_pair = offs_j < HALF_DIM
    cos = tl.load(cos_ptr + position * stride_cos_pos + offs_j, mask=is_pair, other=0.0)
    sin = tl.load(sin_ptr + position * stride_sin_pos + offs_j, mask=is_pair, other=0.0)
    cos = cos.to(tl.float32)
    sin = sin.to(tl.float32)
    _rotate_heads(
        query_ptr + token * stride_q_token, stride_q_head, cos, sin,
        NUM_HEADS, HALF_DIM, BLOCK_H, BLOCK_HALF,
    )  # fmt: skip
    _rotate_heads(
        key_ptr + token * stride_k_token, stride_k_head, cos, sin,
        NUM_KV_HEADS, HALF_DIM, BLOCK_KV_H, BLOCK_HALF,
    )  # fmt: skip


def rotary_embedding(
    positions: torch.Tensor,  # [num_tokens] int64/int32, each < max_positions
    query: torch.Tensor,  # [num_tokens, num_heads, head_dim], rotated in place
    key: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim], rotated in place
    cos_cache: torch.Tensor,  # [max_positions, head_dim // 2] or [max_positions, head_dim]
    sin_cache: torch.Tensor,  # same shape as cos_cache
) -> None:
    """Rotate q and k in place with HF's rotate_half layout, computing in fp32.

    A full-width cache must be HF's `cat(freqs, freqs)` layout (halves equal): only its first
    half is read. q and k may be strided views (e.g. of a fused qkv output) with a contiguous
    last dim. Positions are not range-checked, since that would need a host sync.
    """
    rows = {"query": query, "key": key, "cos_cache": cos_cache, "sin_cache": sin_cache}
    tensors = {"positions": positions} | rows
    checks.check_tensors(tensors)
    checks.check_dtype(query, "query", checks.FLOAT_DTYPES)
    checks.check_shape(query, "query", (None, None, None))
    num_tokens, num_heads, head_dim = query.shape
    require(head_dim % 2 == 0, "query", f"head_dim must be even, got {head_dim}")
    checks.check_shape(key, "key", (num_tokens, None, head_dim))
    checks.check_same_dtype(key, "key", query.dtype)
    checks.check_dtype(positions, "positions", checks.INDEX_DTYPES)
    checks.check_shape(positions, "positions", (num_tokens,))
    checks.check_contiguous(positions, "positions")
    checks.check_dtype(cos_cache, "cos_cache", checks.FLOAT_DTYPES)
    checks.check_shape(cos_cache, "cos_cache", (None, None))
    require(
        cos_cache.shape[1] in (head_dim // 2, head_dim),
        "cos_cache",
        f"last dim must be head_dim / 2 ({head_dim // 2}) or head_dim ({head_dim}),"
        f" got {cos_cache.shape[1]}",
    )
    checks.check_shape(sin_cache, "sin_cache", tuple(cos_cache.shape))
    checks.check_same_dtype(sin_cache, "sin_cache", cos_cache.dtype)
    checks.check_last_dims_contiguous(rows)
    checks.check_devices(tensors)
    if num_tokens == 0:
        return
    num_kv_heads = key.shape[1]
    half_dim = head_dim // 2
    block_h = checks.next_power_of_2(num_heads)
    block_half = checks.next_power_of_2(half_dim)
    _rotary_kernel[(num_tokens,)](
        query,
        key,
        cos_cache,
        sin_cache,
        positions,
        query.stride(0),
        query.stride(1),
        key.stride(0),
        key.stride(1),
        cos_cache.stride(0),
        sin_cache.stride(0),
        NUM_HEADS=num_heads,
        NUM_KV_HEADS=num_kv_heads,
        HALF_DIM=half_dim,
        BLOCK_H=block_h,
        BLOCK_KV_H=checks.next_power_of_2(num_kv_heads),
        BLOCK_HALF=block_half,
        num_warps=tile_num_warps(block_h * block_half),
    )


def rotary_embedding_reference(
    positions: torch.Tensor,  # [num_tokens]
    query: torch.Tensor,  # [num_tokens, num_heads, head_dim]
    key: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    cos_cache: torch.Tensor,  # [max_positions, head_dim // 2] or [max_positions, head_dim]
    sin_cache: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:  # new (query, key); the inputs are not modified
    """HF's `x * cos + rotate_half(x) * sin` in fp32, rounded once to the input dtype."""
    head_dim = query.shape[-1]
    cos = cos_cache[positions.long()].float()  # [num_tokens, head_dim // 2 or head_dim]
    sin = sin_cache[positions.long()].float()
    if cos.shape[-1] != head_dim:
        cos = torch.cat([cos, cos], dim=-1)
        sin = torch.cat([sin, sin], dim=-1)
    cos = cos[:, None, :]  # [num_tokens, 1, head_dim]
    sin = sin[:, None, :]

    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat([-x2, x1], dim=-1)

    new_query = query.float() * cos + rotate_half(query.float()) * sin
    new_key = key.float() * cos + rotate_half(key.float()) * sin
    return new_query.to(query.dtype), new_key.to(key.dtype)
