"""Paged prefill attention for chunked prefill: query chunks attending over their paged KV.

Each chunk is causal within itself and sees its request's whole cached prefix; reading every
K/V (prefix and the chunk's own, stored beforehand) through the block table means one kernel
serves fresh prompts, prefix-cache hits and later chunks alike.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from llmd.errors import require
from llmd.kernels.checks import (
    INDEX_DTYPES,
    KV_CACHE_FP8_DTYPE,
    check_contiguous,
    check_dtype,
    check_paged_attention_inputs,
    check_shape,
    next_power_of_2,
)
from llmd.kernels.launch_configs import arch_of, prefill_config
from llmd.kernels.paged_launch import (
    LOG2_E,
    attention_constants,
    attention_strides,
    cache_scales,
)
from llmd.kernels.paged_reference import context_kv


@triton.jit
def _attend_tile(
    acc,  # [BLOCK_M, BLOCK_D] fp32
    l_i,  # [BLOCK_M] fp32
    m_i,  # [BLOCK_M] fp32, log2 units
    q,  # [BLOCK_M, BLOCK_D]
    q_pos,  # [BLOCK_M] position of each query row in its sequence
    tile_start,
    seq_len,
    table_row,
    k_cache_ptr,
    v_cache_ptr,
    kv_head,
    qk_scale,
    stride_k_block,
    stride_k_token,
    stride_k_head,
    stride_v_block,
    stride_v_token,
    stride_v_head,
    offs_d,
    is_dim,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_MASKED: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
):
    """Fold one tile of BLOCK_N cached tokens into the online-softmax state of a query tile."""
    offs_n = tile_start + tl.arange(0, BLOCK_N)
    if IS_MASKED:
        is_token = offs_n < seq_len
        block_ids = tl.load(table_row + offs_n // BLOCK_SIZE, mask=is_token, other=0)
        k_mask = is_token[None, :] & is_dim[:, None]  # [BLOCK_D, BLOCK_N]
        v_mask = is_token[:, None] & is_dim[None, :]  # [BLOCK_N, BLOCK_D]
    else:
        # Every token of an unmasked tile is real and visible to every row.
        block_ids = tl.load(table_row + offs_n // BLOCK_SIZE)
        k_mask = is_dim[:, None]
        v_mask = is_dim[None, :]
    block_ids = block_ids.to(tl.int64)
    in_block = offs_n % BLOCK_SIZE
    k_offs = block_ids * stride_k_block + in_block * stride_k_token + kv_head * stride_k_head
    k = tl.load(k_cache_ptr + k_offs[None, :] + offs_d[:, None], mask=k_mask, other=0.0)
    k = k.to(q.dtype)  # an fp8 cache's keys, exactly (no-op for a cache in q's dtype)
    if DOT_IN_FP32:
        qk = tl.dot(q.to(tl.float32), k.to(tl.float32), input_precision="tf32x3")
    else:
        qk = tl.dot(q, k)  # [BLOCK_M, BLOCK_N]
    qk = qk * qk_scale
    if IS_MASKED:
        is_visible = (offs_n[None, :] <= q_pos[:, None]) & is_token[None, :]
        qk = tl.where(is_visible, qk, float("-inf"))
    # Every row sees at least one token of the first tile it meets, so m_new stays finite.
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(qk - m_new[:, None])  # [BLOCK_M, BLOCK_N]
    l_i = l_i * alpha + tl.sum(p, 1)
    v_offs = block_ids * stride_v_block + in_block * stride_v_token + kv_head * stride_v_head
    v = tl.load(v_cache_ptr + v_offs[:, None] + offs_d[None, :], mask=v_mask, other=0.0)
    v = v.to(q.dtype)
    if DOT_IN_FP32:
        p_rounded = p.to(q.dtype).to(tl.float32)  # same rounding as the low-precision dot
        pv = tl.dot(p_rounded, v.to(tl.float32), input_precision="tf32x3")
    else:
        pv = tl.dot(p.to(q.dtype), v)  # [BLOCK_M, BLOCK_D]
    acc = acc * alpha[:, None] + pv
    return acc, l_i, m_new


# The block table's row stride is the step's widest table on a gathered batch: not a
# compile-time specialization (a new value would compile a new variant mid-serving).
@triton.jit(do_not_specialize=["stride_table_seq"])
def _prefill_attention_kernel(
    out_ptr,  # [num_tokens, num_heads, head_dim]
    query_ptr,  # [num_tokens, num_heads, head_dim]
    k_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_dim]
    block_tables_ptr,  # [num_seqs, max_blocks_per_seq]
    seq_lens_ptr,  # [num_seqs]
    query_start_loc_ptr,  # [num_seqs + 1]
    qk_scale,  # softmax scale * k_scale * log2(e)
    v_scale,  # what an fp8 cache's values are multiplied by (1.0 for other caches)
    stride_out_token,
    stride_out_head,
    stride_q_token,
    stride_q_head,
    stride_k_block,
    stride_k_token,
    stride_k_head,
    stride_v_block,
    stride_v_token,
    stride_v_head,
    stride_table_seq,
    QUERY_GROUP_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
):
    """One program: BLOCK_Q query tokens x all query heads of one KV head, of one sequence.

    Rows are (token, head-in-group) pairs, BLOCK_G heads per token, so each K/V tile is
    loaded once for the whole GQA group and the dot has BLOCK_Q * BLOCK_G rows.
    """
    q_tile = tl.program_id(0)
    seq_idx = tl.program_id(1)
    kv_head = tl.program_id(2)
    row_start = tl.load(query_start_loc_ptr + seq_idx)
    query_len = tl.load(query_start_loc_ptr + seq_idx + 1) - row_start
    tile_q0 = q_tile * BLOCK_Q
    if tile_q0 >= query_len:
        return
    seq_len = tl.load(seq_lens_ptr + seq_idx)
    context_len = seq_len - query_len  # cached prefix before this chunk

    offs_m = tl.arange(0, BLOCK_Q * BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    is_dim = offs_d < HEAD_DIM
    token_ids = tile_q0 + offs_m // BLOCK_G  # [BLOCK_M] token index within the chunk
    group_ids = offs_m % BLOCK_G
    head_ids = kv_head * QUERY_GROUP_SIZE + group_ids
    is_row = (token_ids < query_len) & (group_ids < QUERY_GROUP_SIZE)
    rows = (row_start + token_ids).to(tl.int64)
    q_ptrs = query_ptr + rows[:, None] * stride_q_token + head_ids[:, None] * stride_q_head
    row_mask = is_row[:, None] & is_dim[None, :]
    q = tl.load(q_ptrs + offs_d[None, :], mask=row_mask, other=0.0)  # [BLOCK_M, BLOCK_D]
    q_pos = context_len + token_ids  # [BLOCK_M]

    m_i = tl.full([BLOCK_Q * BLOCK_G], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_Q * BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_Q * BLOCK_G, BLOCK_D], dtype=tl.float32)
    table_row = block_tables_ptr + seq_idx * stride_table_seq
    # Tokens before the tile's first query are visible to every row: no masks needed.
    full_end = ((context_len + tile_q0) // BLOCK_N) * BLOCK_N
    # The rest up to the tile's last query position needs the causal and length masks.
    masked_end = tl.minimum(seq_len, context_len + tile_q0 + BLOCK_Q)
    for tile_start in range(0, full_end, BLOCK_N):
        acc, l_i, m_i = _attend_tile(
            acc, l_i, m_i, q, q_pos, tile_start, seq_len, table_row, k_cache_ptr, v_cache_ptr,
            kv_head, qk_scale, stride_k_block, stride_k_token, stride_k_head, stride_v_block,
            stride_v_token, stride_v_head, offs_d, is_dim, BLOCK_SIZE, BLOCK_N, False,
            DOT_IN_FP32,
        )  # fmt: skip
    for tile_start in range(full_end, masked_end, BLOCK_N):
        acc, l_i, m_i = _attend_tile(
            acc, l_i, m_i, q, q_pos, tile_start, seq_len, table_row, k_cache_ptr, v_cache_ptr,
            kv_head, qk_scale, stride_k_block, stride_k_token, stride_k_head, stride_v_block,
            stride_v_token, stride_v_head, offs_d, is_dim, BLOCK_SIZE, BLOCK_N, True,
            DOT_IN_FP32,
        )  # fmt: skip

    out = acc * (v_scale / l_i)[:, None]
    out_ptrs = out_ptr + rows[:, None] * stride_out_token + head_ids[:, None] * stride_out_head
    tl.store(out_ptrs + offs_d[None, :], out.to(out_ptr.dtype.element_ty), mask=row_mask)


def _check_inputs(query, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale, out):
    """Raise a typed error for any input that breaks the kernel's contract."""
    check_paged_attention_inputs(
        query, k_cache, v_cache, block_tables, seq_lens, scale, out,
        extra_tensors={"query_start_loc": query_start_loc},
    )  # fmt: skip
    check_dtype(query_start_loc, "query_start_loc", INDEX_DTYPES)
    check_shape(query_start_loc, "query_start_loc", (block_tables.shape[0] + 1,))
    check_contiguous(query_start_loc, "query_start_loc")


def prefill_attention(
    query: torch.Tensor,  # [num_tokens, num_heads, head_dim]
    k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    block_tables: torch.Tensor,  # [num_seqs, max_blocks_per_seq] int32/int64
    seq_lens: torch.Tensor,  # [num_seqs] context length including the chunk
    query_start_loc: torch.Tensor,  # [num_seqs + 1] row of each chunk's first token
    max_query_len: int,
    scale: float,
    *,
    out: torch.Tensor | None = None,  # [num_tokens, num_heads, head_dim]
    block_m: int | None = None,
    block_n: int | None = None,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> torch.Tensor:  # [num_tokens, num_heads, head_dim]
    """Causal attention of each chunk `query[qsl[i]:qsl[i+1]]` over its first `seq_lens[i]` tokens.

    The chunk's own K/V must already be in the cache. `query_start_loc` may start above 0
    (rows before it, e.g. decodes, are left untouched in `out`), `max_query_len` must be at
    least every chunk's length (it sizes the grid), and each chunk must be no longer than its
    context; these values are not checked, since that would need a host sync.
    `block_m` (rows per program: tokens x heads of a GQA group) and `block_n` (tokens per K/V
    tile) override the tuned tile sizes. An fp8 e4m3 cache holds key / `k_scale` and value /
    `v_scale` (the scales are ignored for other caches).
    """
    _check_inputs(query, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale, out)
    k_scale, v_scale = cache_scales(k_cache, k_scale, v_scale)
    _, num_heads, head_dim = query.shape
    num_kv_heads = k_cache.shape[2]
    num_seqs = block_tables.shape[0]
    require(
        isinstance(max_query_len, int) and max_query_len >= 0,
        "max_query_len",
        f"must be a non-negative int, got {max_query_len!r}",
    )
    if out is None:
        out = torch.empty_like(query)
    if num_seqs == 0 or max_query_len == 0:
        return out
    is_fp8_kv = k_cache.dtype == KV_CACHE_FP8_DTYPE
    config = prefill_config(arch_of(query.device), head_dim, query.dtype, is_fp8_kv)
    num_warps, num_stages = config.num_warps, config.num_stages
    group_size = num_heads // num_kv_heads
    block_g = next_power_of_2(group_size)
    if block_m is None:  # a program holds whole GQA groups: at least one token's heads
        block_m = max(config.block_m, block_g)
    block_n = config.block_n if block_n is None else block_n
    require(
        block_m in (16, 32, 64, 128, 256) and block_m >= block_g,
        "block_m",
        f"must be a power of two in [16, 256] and >= the padded GQA group ({block_g})",
    )
    require(block_n in (16, 32, 64, 128), "block_n", "must be 16, 32, 64 or 128")
    block_q = block_m // block_g
    grid = (triton.cdiv(max_query_len, block_q), num_seqs, num_kv_heads)
    _prefill_attention_kernel[grid](
        out,
        query,
        k_cache,
        v_cache,
        block_tables,
        seq_lens,
        query_start_loc,
        float(scale) * k_scale * LOG2_E,
        v_scale,
        *attention_strides(out, query, k_cache, v_cache, block_tables),
        **attention_constants(query, k_cache),
        BLOCK_G=block_g,
        BLOCK_Q=block_q,
        BLOCK_D=max(16, next_power_of_2(head_dim)),
        BLOCK_N=block_n,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return out


def prefill_attention_reference(
    query: torch.Tensor,  # [num_tokens, num_heads, head_dim]
    k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    block_tables: torch.Tensor,  # [num_seqs, max_blocks_per_seq]
    seq_lens: torch.Tensor,  # [num_seqs]
    query_start_loc: torch.Tensor,  # [num_seqs + 1]
    scale: float,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> torch.Tensor:  # [num_tokens, num_heads, head_dim]; rows outside the chunks are zero
    """Slow, obviously correct chunked causal attention in fp32, one sequence at a time (an
    fp8 cache's K/V multiplied back by their scales)."""
    num_heads = query.shape[1]
    out = torch.zeros_like(query)
    starts = query_start_loc.tolist()
    scales = cache_scales(k_cache, k_scale, v_scale)
    for seq_idx, seq_len in enumerate(seq_lens.tolist()):
        row_start, row_end = starts[seq_idx], starts[seq_idx + 1]
        query_len = row_end - row_start
        if query_len == 0:
            continue
        keys, values = context_kv(
            k_cache, v_cache, block_tables, seq_idx, seq_len, num_heads, scales
        )
        q = query[row_start:row_end].float()  # [query_len, num_heads, head_dim]
        scores = torch.einsum("qhd,thd->hqt", q, keys) * scale
        positions = torch.arange(seq_len, device=query.device)
        query_pos = torch.arange(seq_len - query_len, seq_len, device=query.device)
        is_future = positions[None, :] > query_pos[:, None]  # [query_len, seq_len]
        scores = scores.masked_fill(is_future, float("-inf"))
        probs = scores.softmax(dim=-1)  # [num_heads, query_len, seq_len]
        out[row_start:row_end] = torch.einsum("hqt,thd->qhd", probs, values).to(query.dtype)
    return out
