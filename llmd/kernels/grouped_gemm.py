"""Grouped GEMM over rows sorted by expert: every touched expert's rows times its weight.

An MoE layer's tokens, grouped by expert, form one ragged batch; one launch multiplies
each expert's run of rows by that expert's [N, K] matrix, with no host round trip: the
tile map (which expert, which rows) is built on the device from the per-expert counts, for
a grid sized by its bound (cdiv(rows, BLOCK_M) + experts), and tiles past the real count
do nothing. CUDA-graph safe, and what lets a decode step read only the experts it uses.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from llmd.errors import require
from llmd.kernels.checks import (
    FLOAT_DTYPES,
    check_devices,
    check_dtype,
    check_last_dim_contiguous,
    check_shape,
    check_tensors,
    must_dot_in_fp32,
)
from llmd.kernels.launch_configs import INTERPRETER_ARCH, arch_of


@dataclass(frozen=True)
class GroupedGemmConfig:
    """Launch shape: rows, columns and K of a tile, warps, pipeline stages."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int


GROUPED_GEMM_CONFIGS = {
    INTERPRETER_ARCH: GroupedGemmConfig(16, 32, 32, 1, 1),
    80: GroupedGemmConfig(64, 128, 32, 4, 3),
    86: GroupedGemmConfig(64, 64, 32, 4, 3),
    89: GroupedGemmConfig(64, 64, 32, 4, 3),
    90: GroupedGemmConfig(64, 128, 64, 4, 4),
}
"""Per architecture (launch_configs.arch_of), for 16-bit rows. Not tuned on hardware yet:
conventional tiles, each compiled by scripts/compile_kernels.py within its arch's shared
memory and without spills."""
FP32_CONFIG = GroupedGemmConfig(64, 64, 32, 4, 3)
"""fp32 rows on every GPU: 3xTF32 products need more registers (64 x 128 tiles spilled
on sm_80 and sm_90)."""


def grouped_gemm_config(arch: int, dtype: torch.dtype) -> GroupedGemmConfig:
    """The launch shape for `arch` and the rows' dtype."""
    if dtype == torch.float32 and arch != INTERPRETER_ARCH:
        return FP32_CONFIG
    return GROUPED_GEMM_CONFIGS[arch]


@triton.jit
def _grouped_gemm_kernel(
    out_ptr,  # [num_rows, N]
    rows_ptr,  # [num_rows, K], rows sorted by expert
    weight_ptr,  # [num_experts, N, K]
    tile_expert_ptr,  # [max_tiles] int32: a tile's expert, NUM_EXPERTS when unused
    tile_row_ptr,  # [max_tiles] int32: a tile's first row
    expert_end_ptr,  # [num_experts] int32: one past each expert's last row
    stride_row,
    stride_we,
    stride_wn,
    stride_out,
    N,
    K,
    NUM_EXPERTS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
):
    """One program: BLOCK_M rows of one expert times BLOCK_N of its output columns."""
    tile = tl.program_id(0)
    expert = tl.load(tile_expert_ptr + tile)
    is_used = expert < NUM_EXPERTS
    expert = tl.where(is_used, expert, 0).to(tl.int64)
    first_row = tl.load(tile_row_ptr + tile)
    end_row = tl.where(is_used, tl.load(expert_end_ptr + expert), 0)
    row_offs = first_row + tl.arange(0, BLOCK_M)
    row_mask = row_offs < end_row
    col_offs = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = col_offs < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    row_ptrs = rows_ptr + row_offs.to(tl.int64)[:, None] * stride_row
    weight_ptrs = weight_ptr + expert * stride_we + col_offs.to(tl.int64)[None, :] * stride_wn
    for k_start in range(0, K, BLOCK_K):
        k_offs = k_start + tl.arange(0, BLOCK_K)
        k_mask = k_offs < K
        a = tl.load(row_ptrs + k_offs[None, :], mask=row_mask[:, None] & k_mask[None, :], other=0.0)
        b = tl.load(  # [BLOCK_K, BLOCK_N]: the weight read transposed
            weight_ptrs + k_offs[:, None], mask=k_mask[:, None] & col_mask[None, :], other=0.0
        )
        if DOT_IN_FP32:  # fp32 accuracy (3xTF32), and bf16 under the interpreter
            acc += tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="tf32x3")
        else:
            acc += tl.dot(a, b)
    out_ptrs = out_ptr + row_offs.to(tl.int64)[:, None] * stride_out + col_offs[None, :]
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=row_mask[:, None] & col_mask[None, :])


def expert_tiles(
    counts: torch.Tensor, block_m: int, num_rows: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(tile expert, tile first row, expert end row) from per-expert row counts, on the
    device: ceil(count / block_m) tiles per expert, `cdiv(num_rows, block_m) + experts`
    tiles in all, the unused ones naming expert `len(counts)`."""
    num_experts = counts.numel()
    ends = torch.cumsum(counts, 0)  # [E]
    starts = ends - counts
    tiles_per_expert = (counts + block_m - 1) // block_m
    tile_ends = torch.cumsum(tiles_per_expert, 0)  # [E]
    max_tiles = triton.cdiv(num_rows, block_m) + num_experts
    tile_ids = torch.arange(max_tiles, device=counts.device)
    tile_expert = torch.searchsorted(tile_ends, tile_ids, right=True)  # E past the last
    expert = tile_expert.clamp(max=num_experts - 1)
    tile_in_expert = tile_ids - (tile_ends - tiles_per_expert)[expert]
    tile_row = starts[expert] + tile_in_expert * block_m
    return tile_expert.to(torch.int32), tile_row.to(torch.int32), ends.to(torch.int32)


def grouped_gemm(
    rows: torch.Tensor,  # [num_rows, K], sorted by expert
    weight: torch.Tensor,  # [num_experts, N, K]
    counts: torch.Tensor,  # [num_experts] rows of each expert, in order
) -> torch.Tensor:  # [num_rows, N]
    """out[r] = weight[expert of r] @ rows[r], the rows of expert e being the e-th run."""
    check_tensors({"rows": rows, "weight": weight, "counts": counts})
    check_dtype(rows, "rows", FLOAT_DTYPES)
    require(weight.dtype == rows.dtype, "weight", f"dtype must be {rows.dtype}")
    check_shape(rows, "rows", (None, None))
    num_experts, num_cols, depth = weight.shape if weight.dim() == 3 else (0, 0, -1)
    require(weight.dim() == 3 and depth == rows.shape[1], "weight",
            f"must be [experts, N, {rows.shape[1]}], got {tuple(weight.shape)}")  # fmt: skip
    check_shape(counts, "counts", (num_experts,))
    require(not counts.is_floating_point(), "counts", "must be an integer tensor")
    check_last_dim_contiguous(rows, "rows")
    check_last_dim_contiguous(weight, "weight")
    check_devices({"rows": rows, "weight": weight, "counts": counts})
    num_rows = rows.shape[0]
    out = torch.empty((num_rows, num_cols), dtype=rows.dtype, device=rows.device)
    if num_rows == 0 or num_cols == 0:
        return out
    config = grouped_gemm_config(arch_of(rows.device), rows.dtype)
    tile_expert, tile_row, expert_end = expert_tiles(counts, config.block_m, num_rows)
    grid = (tile_expert.numel(), triton.cdiv(num_cols, config.block_n))
    _grouped_gemm_kernel[grid](
        out, rows, weight, tile_expert, tile_row, expert_end,
        rows.stride(0), weight.stride(0), weight.stride(1), out.stride(0),
        num_cols, depth,
        NUM_EXPERTS=num_experts, BLOCK_M=config.block_m, BLOCK_N=config.block_n,
        BLOCK_K=config.block_k, DOT_IN_FP32=must_dot_in_fp32(rows.dtype),
        num_warps=config.num_warps, num_stages=config.num_stages,
    )  # fmt: skip
    return out


def grouped_gemm_reference(
    rows: torch.Tensor, weight: torch.Tensor, counts: torch.Tensor
) -> torch.Tensor:
    """Expert by expert in fp32, rounded once to the rows' dtype (tests only)."""
    out = torch.empty(rows.shape[0], weight.shape[1], dtype=torch.float32, device=rows.device)
    start = 0
    for expert_id, count in enumerate(counts.tolist()):
        out[start : start + count] = (
            rows[start : start + count].float() @ weight[expert_id].float().T
        )
        start += count
    return out.to(rows.dtype)
