"""Paged decode attention: one query token per sequence attending over its paged KV cache.

Decode is bound by reading K/V, so each program serves every query head of one KV head
(GQA group) and loads each K/V tile once; for long contexts with few sequences a split-K
variant spreads one sequence over several programs and a second kernel merges the parts.
"""

from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

from llmd.errors import require
from llmd.kernels.checks import (
    KV_CACHE_FP8_DTYPE,
    check_paged_attention_inputs,
    next_power_of_2,
)
from llmd.kernels.launch_configs import arch_of, decode_config
from llmd.kernels.paged_launch import (
    LOG2_E,
    attention_constants,
    attention_strides,
    cache_scales,
)
from llmd.kernels.paged_reference import context_kv

MAX_NUM_SPLITS = 128
SPLIT_MIN_SEQ_LEN = 1024
"""Contexts shorter than this (bound) never use split-K: one program reads them fast enough."""
SPLIT_MIN_TOKENS = 256
"""Each split covers at least this many tokens: of the longest possible context when the
split count is chosen, and of each sequence's actual context inside the kernel."""
SPLIT_PROGRAMS_PER_SM = 8
"""Split until about this many programs per SM are in flight, to keep HBM busy (4 left
b=1 x 32k-token decodes at 19% of copy bandwidth on an H200)."""


@triton.jit
def _num_active_splits(seq_len, SPLIT_TOKENS: tl.constexpr, NUM_SPLITS: tl.constexpr):
    """Splits a context of `seq_len` tokens uses: one per SPLIT_TOKENS, 1 to NUM_SPLITS.

    The attention kernel and the reduce must agree on it: the reduce reads only these.
    """
    return tl.minimum(tl.maximum(tl.cdiv(seq_len, SPLIT_TOKENS), 1), NUM_SPLITS)


# The block table's row stride is the step's widest table on a gathered batch: not a
# compile-time specialization (a new value would compile a new variant mid-serving).
@triton.jit(do_not_specialize=["stride_table_seq"])
def _decode_attention_kernel(
    out_ptr,  # [num_seqs, num_heads, head_dim]: final output (NUM_SPLITS == 1)
    partial_out_ptr,  # [num_seqs, num_heads, NUM_SPLITS, head_dim] fp32 (NUM_SPLITS > 1)
    partial_max_ptr,  # [num_seqs, num_heads, NUM_SPLITS] fp32: running max (log2 units)
    partial_sum_ptr,  # [num_seqs, num_heads, NUM_SPLITS] fp32: softmax denominator
    query_ptr,  # [num_seqs, num_heads, head_dim]
    k_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_dim]
    block_tables_ptr,  # [num_seqs, max_blocks_per_seq]
    seq_lens_ptr,  # [num_seqs]
    qk_scale,  # softmax scale * k_scale * log2(e)
    v_scale,  # what an fp8 cache's values are multiplied by (1.0 for other caches)
    num_heads,
    stride_out_seq,
    stride_out_head,
    stride_q_seq,
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
    NUM_SPLITS: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
    SPLIT_TOKENS: tl.constexpr,
):
    """One program: one sequence, one KV head (all its query heads), one split of the context."""
    seq_idx = tl.program_id(0)
    kv_head = tl.program_id(1)
    split_idx = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq_idx)
    if NUM_SPLITS == 1:
        num_active = 1
        ctx_start = 0
        ctx_end = seq_len
    else:
        # The launch has NUM_SPLITS splits (fixed for CUDA graphs), but a sequence uses only
        # as many as its own context fills with SPLIT_TOKENS each; the others read and write
        # nothing (their range starts past the context), and the reduce skips them.
        num_active = _num_active_splits(seq_len, SPLIT_TOKENS, NUM_SPLITS)
        split_len = tl.cdiv(tl.cdiv(seq_len, num_active), BLOCK_N) * BLOCK_N
        ctx_start = split_idx * split_len
        ctx_end = tl.minimum(seq_len, ctx_start + split_len)

    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    is_dim = offs_d < HEAD_DIM
    is_live = (offs_g < QUERY_GROUP_SIZE) & (tl.zeros([BLOCK_G], tl.int32) + split_idx < num_active)
    head_ids = kv_head * QUERY_GROUP_SIZE + offs_g
    q_ptrs = (
        query_ptr + seq_idx * stride_q_seq + head_ids[:, None] * stride_q_head + offs_d[None, :]
    )
    q = tl.load(q_ptrs, mask=is_live[:, None] & is_dim[None, :], other=0.0)  # [BLOCK_G, BLOCK_D]

    m_i = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)
    table_row = block_tables_ptr + seq_idx * stride_table_seq
    for tile_start in range(ctx_start, ctx_end, BLOCK_N):
        offs_n = tile_start + tl.arange(0, BLOCK_N)
        is_token = offs_n < ctx_end
        # Masked lanes never read the table or the cache: padding entries stay untouched.
        block_ids = tl.load(table_row + offs_n // BLOCK_SIZE, mask=is_token, other=0).to(tl.int64)
        in_block = offs_n % BLOCK_SIZE
        k_offs = block_ids * stride_k_block + in_block * stride_k_token + kv_head * stride_k_head
        kv_mask = is_token[None, :] & is_dim[:, None]
        k = tl.load(k_cache_ptr + k_offs[None, :] + offs_d[:, None], mask=kv_mask, other=0.0)
        k = k.to(q.dtype)  # an fp8 cache's keys, exactly (no-op for a cache in q's dtype)
        if DOT_IN_FP32:
            qk = tl.dot(q.to(tl.float32), k.to(tl.float32), input_precision="tf32x3")
        else:
            qk = tl.dot(q, k)  # [BLOCK_G, BLOCK_N]
        qk = tl.where(is_token[None, :], qk * qk_scale, float("-inf"))
        # Every tile holds at least one real token, so m_new is finite for every row.
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(qk - m_new[:, None])  # [BLOCK_G, BLOCK_N]
        l_i = l_i * alpha + tl.sum(p, 1)
        v_offs = block_ids * stride_v_block + in_block * stride_v_token + kv_head * stride_v_head
        v_mask = is_token[:, None] & is_dim[None, :]
        v = tl.load(v_cache_ptr + v_offs[:, None] + offs_d[None, :], mask=v_mask, other=0.0)
        v = v.to(q.dtype)
        if DOT_IN_FP32:
            p_rounded = p.to(q.dtype).to(tl.float32)  # same rounding as the low-precision dot
            pv = tl.dot(p_rounded, v.to(tl.float32), input_precision="tf32x3")
        else:
            pv = tl.dot(p.to(q.dtype), v)  # [BLOCK_G, BLOCK_D]
        acc = acc * alpha[:, None] + pv
        m_i = m_new
    acc = acc * v_scale  # linear: scaling the sum scales every split's part alike

    row_mask = is_live[:, None] & is_dim[None, :]
    if NUM_SPLITS == 1:
        # An empty context (padding sequence) has l_i == 0 and acc == 0: it writes zeros.
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        out_ptrs = out_ptr + seq_idx * stride_out_seq + head_ids[:, None] * stride_out_head
        tl.store(out_ptrs + offs_d[None, :], out.to(out_ptr.dtype.element_ty), mask=row_mask)
    else:
        part_ids = (seq_idx * num_heads + head_ids) * NUM_SPLITS + split_idx  # [BLOCK_G]
        tl.store(partial_max_ptr + part_ids, m_i, mask=is_live)
        tl.store(partial_sum_ptr + part_ids, l_i, mask=is_live)
        part_ptrs = partial_out_ptr + part_ids[:, None] * HEAD_DIM + offs_d[None, :]
        tl.store(part_ptrs, acc, mask=row_mask)


@triton.jit
def _decode_reduce_kernel(
    out_ptr,  # [num_seqs, num_heads, head_dim]
    partial_out_ptr,  # [num_seqs, num_heads, NUM_SPLITS, head_dim] fp32, unnormalised
    partial_max_ptr,  # [num_seqs, num_heads, NUM_SPLITS] fp32
    partial_sum_ptr,  # [num_seqs, num_heads, NUM_SPLITS] fp32
    seq_lens_ptr,  # [num_seqs]
    num_heads,
    stride_out_seq,
    stride_out_head,
    HEAD_DIM: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_D: tl.constexpr,
    SPLIT_TOKENS: tl.constexpr,
):
    """One program: merge the active splits of one (sequence, query head) by softmax weight."""
    seq_idx = tl.program_id(0)
    head = tl.program_id(1)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    seq_len = tl.load(seq_lens_ptr + seq_idx)
    num_active = _num_active_splits(seq_len, SPLIT_TOKENS, NUM_SPLITS)
    is_split = offs_s < num_active
    is_dim = offs_d < HEAD_DIM
    part_ids = (seq_idx * num_heads + head) * NUM_SPLITS + offs_s  # [BLOCK_S]
    split_max = tl.load(partial_max_ptr + part_ids, mask=is_split, other=float("-inf"))
    split_sum = tl.load(partial_sum_ptr + part_ids, mask=is_split, other=0.0)
    global_max = tl.max(split_max, 0)
    global_max = tl.where(global_max == float("-inf"), 0.0, global_max)  # all splits empty
    weights = tl.exp2(split_max - global_max)  # [BLOCK_S]; 0 for empty splits
    part_ptrs = partial_out_ptr + part_ids[:, None] * HEAD_DIM + offs_d[None, :]
    acc = tl.load(part_ptrs, mask=is_split[:, None] & is_dim[None, :], other=0.0)
    numerator = tl.sum(acc * weights[:, None], 0)  # [BLOCK_D]
    denominator = tl.sum(split_sum * weights, 0)
    out = numerator / tl.where(denominator > 0, denominator, 1.0)
    out_ptrs = out_ptr + seq_idx * stride_out_seq + head * stride_out_head + offs_d
    tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=is_dim)


@functools.cache
def _num_sms(device: torch.device) -> int:
    """Streaming multiprocessors of `device` (1 off CUDA, where only the interpreter runs)."""
    if device.type != "cuda":
        return 1
    return torch.cuda.get_device_properties(device).multi_processor_count


def choose_num_splits(num_seqs: int, num_kv_heads: int, max_seq_len: int, num_sms: int) -> int:
    """Split-K factor: >1 only when contexts can be long and too few programs fill the GPU.

    It depends only on its integer arguments, so for CUDA graphs it is fixed per batch bucket.
    """
    if max_seq_len < SPLIT_MIN_SEQ_LEN:
        return 1
    num_programs = max(num_seqs * num_kv_heads, 1)
    target_programs = SPLIT_PROGRAMS_PER_SM * num_sms
    if num_programs >= target_programs:
        return 1
    num_splits = math.ceil(target_programs / num_programs)
    return max(1, min(num_splits, max_seq_len // SPLIT_MIN_TOKENS, MAX_NUM_SPLITS))


def _check_inputs(query, k_cache, v_cache, block_tables, seq_lens, scale, out) -> None:
    """Raise a typed error for any input that breaks the kernel's contract."""
    check_paged_attention_inputs(
        query, k_cache, v_cache, block_tables, seq_lens, scale, out, num_seqs=query.shape[0]
    )


def decode_attention(
    query: torch.Tensor,  # [num_seqs, num_heads, head_dim]
    k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    block_tables: torch.Tensor,  # [num_seqs, max_blocks_per_seq] int32/int64
    seq_lens: torch.Tensor,  # [num_seqs] int32/int64, each <= max_blocks_per_seq * block_size
    scale: float,
    *,
    out: torch.Tensor | None = None,  # [num_seqs, num_heads, head_dim]
    max_seq_len: int | None = None,
    num_splits: int | None = None,
    block_n: int | None = None,
    split_tokens: int = SPLIT_MIN_TOKENS,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> torch.Tensor:  # [num_seqs, num_heads, head_dim]
    """Attend each sequence's single query over its first `seq_lens[i]` cached tokens.

    The caches hold the query's dtype, or fp8 e4m3 holding key / `k_scale` and value /
    `v_scale` (the scales are ignored for other caches).

    `max_seq_len` is an upper bound on `seq_lens` used only to choose the split-K factor
    (default `max_blocks_per_seq * block_size`, which keeps the launch fixed for CUDA graphs);
    `num_splits` forces the factor (1 = no split) and `block_n` the token tile, for tests and
    tuning. With splits, each sequence uses only ceil(seq_len / `split_tokens`) of them (at
    least one), so the launch stays fixed while the work follows the actual context; the
    idle splits return at once. A sequence with `seq_lens[i] == 0` gets zeros. Nothing here
    reads tensor values on the host.
    """
    _check_inputs(query, k_cache, v_cache, block_tables, seq_lens, scale, out)
    k_scale, v_scale = cache_scales(k_cache, k_scale, v_scale)
    num_seqs, num_heads, head_dim = query.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    if out is None:
        out = torch.empty_like(query)
    if num_seqs == 0:
        return out
    max_len_bound = block_tables.shape[1] * block_size
    if max_seq_len is None:
        max_seq_len = max_len_bound
    require(
        isinstance(max_seq_len, int) and 0 <= max_seq_len <= max_len_bound,
        "max_seq_len",
        f"must be an int in [0, {max_len_bound}] (block_tables width * block_size)",
    )
    if num_splits is None:
        num_splits = choose_num_splits(num_seqs, num_kv_heads, max_seq_len, _num_sms(query.device))
    require(
        isinstance(num_splits, int) and 1 <= num_splits <= MAX_NUM_SPLITS,
        "num_splits",
        f"must be an int in [1, {MAX_NUM_SPLITS}]",
    )
    require(
        isinstance(split_tokens, int) and split_tokens > 0,
        "split_tokens",
        f"must be a positive int, got {split_tokens!r}",
    )
    block_d = max(16, next_power_of_2(head_dim))
    is_fp8_kv = k_cache.dtype == KV_CACHE_FP8_DTYPE
    config = decode_config(arch_of(query.device), head_dim, query.dtype, is_fp8_kv)
    if block_n is None:
        block_n = config.block_n
    require(
        block_n in (16, 32, 64, 128),
        "block_n",
        "must be 16, 32, 64 or 128",
    )
    group_size = num_heads // num_kv_heads
    block_g = max(16, next_power_of_2(group_size))  # tl.dot needs at least 16 rows

    if num_splits == 1:
        partial_out = partial_max = partial_sum = out  # unused by the kernel
    else:
        partial_out = torch.empty(
            (num_seqs, num_heads, num_splits, head_dim), dtype=torch.float32, device=query.device
        )
        partial_max = torch.empty(
            (num_seqs, num_heads, num_splits), dtype=torch.float32, device=query.device
        )
        partial_sum = torch.empty_like(partial_max)

    _decode_attention_kernel[(num_seqs, num_kv_heads, num_splits)](
        out,
        partial_out,
        partial_max,
        partial_sum,
        query,
        k_cache,
        v_cache,
        block_tables,
        seq_lens,
        float(scale) * k_scale * LOG2_E,
        v_scale,
        num_heads,
        *attention_strides(out, query, k_cache, v_cache, block_tables),
        **attention_constants(query, k_cache),
        NUM_SPLITS=num_splits,
        BLOCK_G=block_g,
        BLOCK_D=block_d,
        BLOCK_N=block_n,
        SPLIT_TOKENS=split_tokens,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    if num_splits > 1:
        _decode_reduce_kernel[(num_seqs, num_heads)](
            out,
            partial_out,
            partial_max,
            partial_sum,
            seq_lens,
            num_heads,
            out.stride(0),
            out.stride(1),
            HEAD_DIM=head_dim,
            NUM_SPLITS=num_splits,
            BLOCK_S=next_power_of_2(num_splits),
            BLOCK_D=block_d,
            SPLIT_TOKENS=split_tokens,
            num_warps=4 if block_d >= 128 else 2,
        )
    return out


def decode_attention_reference(
    query: torch.Tensor,  # [num_seqs, num_heads, head_dim]
    k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    block_tables: torch.Tensor,  # [num_seqs, max_blocks_per_seq]
    seq_lens: torch.Tensor,  # [num_seqs]
    scale: float,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> torch.Tensor:  # [num_seqs, num_heads, head_dim]
    """Slow, obviously correct decode attention in fp32, one sequence at a time (an fp8
    cache's K/V multiplied back by their scales)."""
    num_heads = query.shape[1]
    out = torch.zeros_like(query)
    scales = cache_scales(k_cache, k_scale, v_scale)
    for seq_idx, seq_len in enumerate(seq_lens.tolist()):
        if seq_len == 0:
            continue
        keys, values = context_kv(
            k_cache, v_cache, block_tables, seq_idx, seq_len, num_heads, scales
        )
        scores = torch.einsum("hd,thd->ht", query[seq_idx].float(), keys) * scale
        probs = scores.softmax(dim=-1)  # [num_heads, seq_len]
        out[seq_idx] = torch.einsum("ht,thd->hd", probs, values).to(query.dtype)
    return out
