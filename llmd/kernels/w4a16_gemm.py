"""W4A16 GEMM: 16-bit activations times a 4-bit weight packed eight codes to an int32 along K.

A GPU decode step reads every weight once, so a 4-bit weight read as 4 bits (not as a
dequantized bf16 copy) is a quarter of the bytes; the codes are unpacked and scaled in
registers, tile by tile, and multiplied on the tensor cores with fp32 accumulation.
Layout (`pack_int4_along_k` makes it from any checkpoint's codes): packed [K/8, N] int32,
nibble j of word i holding code (unsigned, 0..15) of column 8i + j; scales [ceil(K/G), N]
float32; zero points, when present, [ceil(K/G), N] float32 unsigned codes (8 when
symmetric): w[n, k] = (code - zero[k // G, n]) * scale[k // G, n].
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from llmd.errors import require
from llmd.kernels.checks import (
    FLOAT_DTYPES,
    check_contiguous,
    check_devices,
    check_dtype,
    check_last_dim_contiguous,
    check_same_dtype,
    check_shape,
    check_tensors,
    must_dot_in_fp32,
)
from llmd.kernels.launch_configs import INTERPRETER_ARCH, arch_of

CODES_PER_WORD = 8
"""4-bit codes in one int32 of the packed weight."""
SYMMETRIC_ZERO = 8
"""The unsigned zero point of a symmetric weight (codes stored as signed value + 8)."""
MIN_BLOCK_K = 16
"""Smallest K tile tl.dot takes; a group size must be a multiple of it."""
DECODE_ROWS = 16
"""Up to this many rows (decode batches) get the skinny tiles."""
SPLIT_PROGRAMS_PER_SM = 2
"""Split K when fewer programs than this many per SM would run (a decode of a narrow N)."""
MIN_TILES_PER_SPLIT = 4
"""K tiles each split keeps at least (fewer make the fp32 partials cost more than they save)."""
MAX_NUM_SPLITS = 16


@dataclass(frozen=True)
class W4A16Config:
    """Launch shape: rows, columns and K of a tile, warps, pipeline stages."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int


DECODE_CONFIGS = {
    INTERPRETER_ARCH: W4A16Config(16, 32, 32, 1, 1),
    80: W4A16Config(16, 64, 128, 4, 4),
    86: W4A16Config(16, 64, 128, 4, 3),
    89: W4A16Config(16, 64, 128, 4, 3),
    90: W4A16Config(16, 64, 128, 4, 4),
}
"""M <= DECODE_ROWS, per arch (launch_configs.arch_of): bandwidth-bound, so narrow rows and
long K tiles. Not tuned on hardware (never run on a GPU): conventional tiles, each
compiled by scripts/compile_kernels.py within its arch's shared memory, without spills."""
PREFILL_CONFIGS = {
    INTERPRETER_ARCH: W4A16Config(16, 32, 32, 1, 1),
    80: W4A16Config(64, 128, 64, 8, 3),
    86: W4A16Config(64, 64, 64, 4, 3),
    89: W4A16Config(64, 64, 64, 4, 3),
    90: W4A16Config(64, 128, 64, 8, 4),
}
"""M > DECODE_ROWS (prefill chunks): compute-bound tiles, same caveat."""
FP32_CONFIG = W4A16Config(32, 64, 32, 4, 2)
"""fp32 activations on every GPU: 3xTF32 products need more registers."""


def w4a16_config(arch: int, num_rows: int, dtype: torch.dtype) -> W4A16Config:
    """The launch shape for `arch`, the number of activation rows and their dtype."""
    if dtype == torch.float32 and arch != INTERPRETER_ARCH:
        return FP32_CONFIG
    return (DECODE_CONFIGS if num_rows <= DECODE_ROWS else PREFILL_CONFIGS)[arch]


def k_tile(block_k: int, group_size: int) -> int:
    """The largest K tile <= block_k dividing group_size (one scale row per tile), or 0."""
    while block_k >= MIN_BLOCK_K and group_size % block_k:
        block_k //= 2
    return block_k if block_k >= MIN_BLOCK_K else 0


@functools.cache
def _num_sms(device: torch.device) -> int:
    """Streaming multiprocessors of `device` (1 off CUDA, where only the interpreter runs)."""
    if device.type != "cuda":
        return 1
    return torch.cuda.get_device_properties(device).multi_processor_count


def choose_num_splits(num_programs: int, num_k_tiles: int, num_sms: int) -> int:
    """Split-K factor: >1 only when `num_programs` tiles of the output leave SMs idle (a
    decode step's narrow projections), each split keeping MIN_TILES_PER_SPLIT K tiles."""
    target_programs = SPLIT_PROGRAMS_PER_SM * num_sms
    if num_programs >= target_programs:
        return 1
    num_splits = math.ceil(target_programs / max(num_programs, 1))
    return max(1, min(num_splits, num_k_tiles // MIN_TILES_PER_SPLIT, MAX_NUM_SPLITS))


@triton.jit
def _w4a16_gemm_kernel(
    out_ptr,  # [M, N], or [splits, M, N] float32 partials when IS_SPLIT
    x_ptr,  # [M, K]
    packed_ptr,  # [K / 8, N] int32
    scales_ptr,  # [G, N] float32
    zeros_ptr,  # [G, N] float32 unsigned zero points (unused unless HAS_ZEROS)
    bias_ptr,  # [N] (unused unless HAS_BIAS)
    M,
    N,
    K,
    stride_x,
    stride_out,
    k_tiles_per_split,
    GROUP_SIZE: tl.constexpr,
    HAS_ZEROS: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    IS_SPLIT: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
):
    """One program: BLOCK_M rows times BLOCK_N output columns over its split's K tiles."""
    row_offs = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    col_offs = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = row_offs < M
    col_mask = col_offs < N
    word_offs = tl.arange(0, BLOCK_K // 8)
    shifts = (tl.arange(0, 8) * 4).to(tl.int32)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    x_ptrs = x_ptr + row_offs.to(tl.int64)[:, None] * stride_x
    split = tl.program_id(2)
    k_begin = split * k_tiles_per_split * BLOCK_K
    k_end = tl.minimum(k_begin + k_tiles_per_split * BLOCK_K, K)
    for k_start in range(k_begin, k_end, BLOCK_K):
        k_offs = k_start + tl.arange(0, BLOCK_K)
        k_mask = k_offs < K
        a = tl.load(x_ptrs + k_offs[None, :], mask=row_mask[:, None] & k_mask[None, :], other=0.0)
        words_k = k_start // 8 + word_offs  # [BLOCK_K / 8]
        word_ptrs = packed_ptr + words_k.to(tl.int64)[:, None] * N + col_offs[None, :]
        word_mask = (words_k < tl.cdiv(K, 8))[:, None] & col_mask[None, :]
        words = tl.load(word_ptrs, mask=word_mask, other=0)  # [BLOCK_K / 8, BLOCK_N]
        codes = (words[:, None, :] >> shifts[None, :, None]) & 0xF  # [BLOCK_K / 8, 8, BLOCK_N]
        codes = tl.reshape(codes, (BLOCK_K, BLOCK_N))  # row 8i + j: nibble j of word i
        group = k_start // GROUP_SIZE  # BLOCK_K divides GROUP_SIZE: one group per tile
        scale = tl.load(scales_ptr + group * N + col_offs, mask=col_mask, other=0.0)
        if HAS_ZEROS:
            zero = tl.load(zeros_ptr + group * N + col_offs, mask=col_mask, other=0.0)
            w = (codes.to(tl.float32) - zero[None, :]) * scale[None, :]  # [BLOCK_K, BLOCK_N]
        else:
            w = (codes.to(tl.float32) - 8.0) * scale[None, :]
        if DOT_IN_FP32:  # fp32 accuracy (3xTF32), and bf16 under the interpreter
            acc += tl.dot(a.to(tl.float32), w, input_precision="tf32x3")
        else:
            acc += tl.dot(a, w.to(a.dtype))
    if HAS_BIAS:
        acc += tl.load(bias_ptr + col_offs, mask=col_mask, other=0.0).to(tl.float32)[None, :]
    if IS_SPLIT:
        out_ptr += split.to(tl.int64) * M * N  # this split's [M, N] partials
    out_ptrs = out_ptr + row_offs.to(tl.int64)[:, None] * stride_out + col_offs[None, :]
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=row_mask[:, None] & col_mask[None, :])


def w4a16_gemm(
    x: torch.Tensor,  # [M, K] fp16, bf16 or fp32
    packed: torch.Tensor,  # [ceil(K / 8), N] int32
    scales: torch.Tensor,  # [ceil(K / G), N] float32
    zeros: torch.Tensor | None,  # [ceil(K / G), N] float32 unsigned zero points
    group_size: int,
    bias: torch.Tensor | None = None,  # [N], x's dtype
    num_splits: int | None = None,
) -> torch.Tensor:  # [M, N], x's dtype
    """out = x @ dequant(packed, scales, zeros)^T (+ bias), accumulated in fp32.

    K is split (fp32 partials summed after) when too few output tiles would fill the GPU;
    `num_splits` forces the factor (1 = no split), for tests and benchmarks."""
    tensors = {"x": x, "packed": packed, "scales": scales}
    tensors |= {"zeros": zeros} if zeros is not None else {}
    tensors |= {"bias": bias} if bias is not None else {}
    check_tensors(tensors)
    check_dtype(x, "x", FLOAT_DTYPES)
    check_shape(x, "x", (None, None))
    num_rows, depth = x.shape
    check_same_dtype(packed, "packed", torch.int32)
    check_shape(packed, "packed", (-(-depth // CODES_PER_WORD), None))
    num_cols = packed.shape[1]
    require(isinstance(group_size, int) and group_size > 0, "group_size",
            f"must be a positive int, got {group_size!r}")  # fmt: skip
    num_groups = -(-depth // group_size)
    check_same_dtype(scales, "scales", torch.float32)
    check_shape(scales, "scales", (num_groups, num_cols))
    if zeros is not None:
        check_same_dtype(zeros, "zeros", torch.float32)
        check_shape(zeros, "zeros", (num_groups, num_cols))
    if bias is not None:
        check_same_dtype(bias, "bias", x.dtype)
        check_shape(bias, "bias", (num_cols,))
    check_last_dim_contiguous(x, "x")
    for name in ("packed", "scales", "zeros", "bias"):
        if name in tensors:
            check_contiguous(tensors[name], name)
    check_devices(tensors)
    out = torch.empty((num_rows, num_cols), dtype=x.dtype, device=x.device)
    if num_rows == 0 or num_cols == 0:
        return out
    config = w4a16_config(arch_of(x.device), num_rows, x.dtype)
    block_k = k_tile(config.block_k, group_size)
    require(block_k > 0, "group_size", f"must be a multiple of {MIN_BLOCK_K}, got {group_size}")
    grid_m, grid_n = triton.cdiv(num_rows, config.block_m), triton.cdiv(num_cols, config.block_n)
    num_k_tiles = triton.cdiv(depth, block_k)
    if num_splits is None:
        num_splits = choose_num_splits(grid_m * grid_n, num_k_tiles, _num_sms(x.device))
    require(isinstance(num_splits, int) and 1 <= num_splits <= MAX_NUM_SPLITS, "num_splits",
            f"must be an int in [1, {MAX_NUM_SPLITS}], got {num_splits!r}")  # fmt: skip
    k_tiles_per_split = triton.cdiv(num_k_tiles, num_splits)
    num_splits = triton.cdiv(num_k_tiles, k_tiles_per_split)  # no split left without K
    is_split = num_splits > 1
    target = out
    if is_split:
        target = torch.empty((num_splits, num_rows, num_cols), dtype=torch.float32,
                             device=x.device)  # fmt: skip
    _w4a16_gemm_kernel[(grid_m, grid_n, num_splits)](
        target, x, packed, scales, scales if zeros is None else zeros,
        out if bias is None else bias,
        num_rows, num_cols, depth, x.stride(0), num_cols if is_split else out.stride(0),
        k_tiles_per_split,
        GROUP_SIZE=group_size, HAS_ZEROS=zeros is not None,
        HAS_BIAS=bias is not None and not is_split,
        BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=block_k, IS_SPLIT=is_split,
        DOT_IN_FP32=must_dot_in_fp32(x.dtype),
        num_warps=config.num_warps, num_stages=config.num_stages,
    )  # fmt: skip
    if is_split:
        summed = target.sum(dim=0)  # [M, N] float32
        if bias is not None:
            summed += bias
        out.copy_(summed)
    return out


def pack_int4_along_k(codes: torch.Tensor) -> torch.Tensor:
    """[N, K] unsigned codes 0..15 -> [ceil(K / 8), N] int32, nibble j = column 8i + j.

    K is padded with code 0 to a multiple of 8 (those columns meet zero activations)."""
    num_cols, depth = codes.shape
    padded = torch.nn.functional.pad(codes.to(torch.int64), (0, -depth % CODES_PER_WORD))
    fields = padded.t().reshape(-1, CODES_PER_WORD, num_cols)  # [K / 8, 8, N]
    shifts = (torch.arange(CODES_PER_WORD, device=codes.device) * 4).reshape(1, -1, 1)
    words = (fields << shifts).sum(dim=1)  # [K / 8, N], below 2^32
    return torch.where(words >= 1 << 31, words - (1 << 32), words).to(torch.int32).contiguous()


def w4a16_reference(
    x: torch.Tensor,
    packed: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None,
    group_size: int,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Dequantize the packed weight, then matmul, in fp32, rounded once to x's dtype."""
    depth = x.shape[1]
    shifts = torch.arange(CODES_PER_WORD, device=packed.device) * 4
    fields = (packed.to(torch.int64).unsqueeze(1) >> shifts.reshape(1, -1, 1)) & 0xF
    codes = fields.reshape(-1, packed.shape[1])[:depth].float()  # [K, N]
    groups = torch.arange(depth, device=packed.device) // group_size
    zero = zeros[groups] if zeros is not None else torch.full_like(codes, SYMMETRIC_ZERO)
    weight = (codes - zero) * scales[groups]  # [K, N]
    out = x.float() @ weight
    if bias is not None:
        out = out + bias.float()
    return out.to(x.dtype)
