"""Write a step's new keys and values into their paged KV-cache slots.

Attention kernels read every K/V through the block table, so the step's own tokens must be
in the cache first; slot -1 marks a padding token (e.g. CUDA-graph batch padding) to skip.
An fp8 e4m3 cache holds key / k_scale and value / v_scale, rounded in the kernel's own bit
arithmetic (nearest even, saturating at +-448, NaN kept) so the interpreter, whose fp8
conversion rounds otherwise, stores the same bytes as a GPU and as the CPU op.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from llmd.errors import require
from llmd.kernels import checks
from llmd.kernels.launch_configs import tile_num_warps
from llmd.kernels.paged_launch import cache_strides


@triton.jit
def _fp8_e4m3_bits(x, scale):
    """The e4m3 byte of x / scale: nearest even, saturating at +-448, NaN as 0x7F."""
    scaled = x.to(tl.float32) / scale
    scaled = tl.where(scaled > 448.0, 448.0, tl.where(scaled < -448.0, -448.0, scaled))
    bits = scaled.to(tl.uint32, bitcast=True)
    sign = (bits >> 24) & 0x80
    magnitude = bits & 0x7FFFFFFF
    # Normals (>= 2^-6): drop 20 mantissa bits with round-half-even, then rebias 127 -> 7.
    normal = ((magnitude + 0x7FFFF + ((magnitude >> 20) & 1)) >> 20) - (120 << 3)
    # Subnormals (steps of 2^-9): adding 2^14, whose fp32 ulp is 2^-9, rounds half even.
    tiny = (tl.abs(scaled) + 16384.0).to(tl.uint32, bitcast=True) - 0x46800000
    code = tl.where(magnitude < 0x3C800000, tiny, normal)
    code = tl.where(magnitude > 0x7F800000, 0x7F, code)  # NaN
    return (sign | code).to(tl.uint8)


@triton.jit
def _kv_store_kernel(
    key_ptr,  # [num_tokens, num_kv_heads, head_dim]
    value_ptr,  # [num_tokens, num_kv_heads, head_dim]
    k_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_dim]
    slot_mapping_ptr,  # [num_tokens]
    stride_key_token,
    stride_key_head,
    stride_value_token,
    stride_value_head,
    stride_k_block,
    stride_k_token,
    stride_k_head,
    stride_v_block,
    stride_v_token,
    stride_v_head,
    k_scale,
    v_scale,
    NUM_KV_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,
    IS_FP8: tl.constexpr,
):
    """One program: copy every KV head of one token into its cache slot (skip slot < 0).

    With IS_FP8 the caches are uint8 views of the e4m3 caches and get the quantized bytes.
    """
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping_ptr + token).to(tl.int64)
    if slot < 0:
        return
    block_id = slot // BLOCK_SIZE
    in_block = slot % BLOCK_SIZE
    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (offs_h < NUM_KV_HEADS)[:, None] & (offs_d < HEAD_DIM)[None, :]
    key_ptrs = key_ptr + token * stride_key_token + offs_h[:, None] * stride_key_head
    key = tl.load(key_ptrs + offs_d[None, :], mask=mask)  # [BLOCK_H, BLOCK_D]
    value_ptrs = value_ptr + token * stride_value_token + offs_h[:, None] * stride_value_head
    value = tl.load(value_ptrs + offs_d[None, :], mask=mask)  # [BLOCK_H, BLOCK_D]
    if IS_FP8:
        key = _fp8_e4m3_bits(key, k_scale)
        value = _fp8_e4m3_bits(value, v_scale)
    k_dst = k_cache_ptr + block_id * stride_k_block + in_block * stride_k_token
    tl.store(k_dst + offs_h[:, None] * stride_k_head + offs_d[None, :], key, mask=mask)
    v_dst = v_cache_ptr + block_id * stride_v_block + in_block * stride_v_token
    tl.store(v_dst + offs_h[:, None] * stride_v_head + offs_d[None, :], value, mask=mask)


def kv_store(
    key: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    value: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim], written in place
    v_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim], written in place
    slot_mapping: torch.Tensor,  # [num_tokens] int64/int32: block_id * block_size + offset
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> None:
    """Copy token t's key/value to slot `slot_mapping[t]` of the caches; slot -1 skips it.

    Caches hold the key's dtype, or fp8 e4m3: then key / k_scale and value / v_scale are
    stored (the scales are ignored for other caches). Slots must be < num_blocks *
    block_size and distinct (except -1); that is not checked, since it would need a host
    sync.
    """
    rows = {"key": key, "value": value, "k_cache": k_cache, "v_cache": v_cache}
    tensors = rows | {"slot_mapping": slot_mapping}
    checks.check_tensors(tensors)
    checks.check_dtype(key, "key", checks.FLOAT_DTYPES)
    checks.check_shape(key, "key", (None, None, None))
    num_tokens, num_kv_heads, head_dim = key.shape
    checks.check_shape(value, "value", tuple(key.shape))
    checks.check_same_dtype(value, "value", key.dtype)
    checks.check_shape(k_cache, "k_cache", (None, None, num_kv_heads, head_dim))
    checks.check_shape(v_cache, "v_cache", tuple(k_cache.shape))
    checks.check_dtype(k_cache, "k_cache", (key.dtype, checks.KV_CACHE_FP8_DTYPE))
    checks.check_same_dtype(v_cache, "v_cache", k_cache.dtype)
    checks.check_kv_scale(k_scale, "k_scale")
    checks.check_kv_scale(v_scale, "v_scale")
    checks.check_dtype(slot_mapping, "slot_mapping", checks.INDEX_DTYPES)
    checks.check_shape(slot_mapping, "slot_mapping", (num_tokens,))
    checks.check_contiguous(slot_mapping, "slot_mapping")
    checks.check_last_dims_contiguous(rows)
    checks.check_devices(tensors)
    require(k_cache.shape[1] > 0, "k_cache", "block_size must be positive")
    if num_tokens == 0:
        return
    block_h = checks.next_power_of_2(num_kv_heads)
    block_d = checks.next_power_of_2(head_dim)
    is_fp8 = k_cache.dtype == checks.KV_CACHE_FP8_DTYPE
    k_dst, v_dst = (
        (k_cache.view(torch.uint8), v_cache.view(torch.uint8)) if is_fp8 else (k_cache, v_cache)
    )
    _kv_store_kernel[(num_tokens,)](
        key,
        value,
        k_dst,
        v_dst,
        slot_mapping,
        key.stride(0),
        key.stride(1),
        value.stride(0),
        value.stride(1),
        *cache_strides(k_cache, v_cache),
        float(k_scale),
        float(v_scale),
        NUM_KV_HEADS=num_kv_heads,
        HEAD_DIM=head_dim,
        BLOCK_SIZE=k_cache.shape[1],
        BLOCK_H=block_h,
        BLOCK_D=block_d,
        IS_FP8=is_fp8,
        num_warps=tile_num_warps(block_h * block_d),
    )


def kv_store_reference(
    key: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    value: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim], written in place
    v_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim], written in place
    slot_mapping: torch.Tensor,  # [num_tokens]
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> None:
    """Slow, obviously correct store: one token at a time, skipping slot -1; an fp8 cache
    gets torch's e4m3 rounding of key / k_scale and value / v_scale, saturated at 448."""
    block_size = k_cache.shape[1]
    if k_cache.dtype == checks.KV_CACHE_FP8_DTYPE:
        key = (key.float() / k_scale).clamp(-448, 448).to(checks.KV_CACHE_FP8_DTYPE)
        value = (value.float() / v_scale).clamp(-448, 448).to(checks.KV_CACHE_FP8_DTYPE)
    for token, slot in enumerate(slot_mapping.tolist()):
        if slot < 0:
            continue
        k_cache[slot // block_size, slot % block_size] = key[token]
        v_cache[slot // block_size, slot % block_size] = value[token]
