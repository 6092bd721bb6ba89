"""`TritonInt4Linear`: a 4-bit weight-only linear on the Triton W4A16 GEMM (CUDA; AWQ, GPTQ,
compressed-tensors `pack-quantized`).

Dequantizing a W4A16 checkpoint at load gives back the 4x memory and bandwidth that are the
point of it on a GPU; this layer keeps the codes packed (half a byte a weight) and lets
`llmd/kernels/w4a16_gemm.py` unpack them in registers. Written and tested under triton's
CPU interpreter only: it has never run on a GPU.
"""

from __future__ import annotations

import torch
from torch import nn

from llmd.kernels import is_triton_available
from llmd.quantization.grouped_weight import GroupedIntWeight, sorted_by_group

GROUP_MULTIPLE = 16
"""The kernel's K tile divides the group size, and tl.dot needs at least 16."""
ONE_GROUP_MULTIPLE = 128
"""A one-scale-per-row weight runs as one group of K rounded up to this (long K tiles)."""


def fits_w4a16_kernel(weight: GroupedIntWeight) -> bool:
    """Whether the kernel takes `weight`: 4 bits, groups a multiple of 16 columns (or one per
    row), act-order only with equal-sized groups (columns sorted by group once)."""
    in_features = weight.values.shape[1]
    if weight.num_bits != 4:
        return False
    if weight.group_size < in_features and weight.group_size % GROUP_MULTIPLE:
        return False
    if weight.group_ids is None:
        return True
    counts = torch.bincount(weight.group_ids.to(torch.int64))
    return bool((counts == weight.group_size).all()) or weight.group_size >= in_features


def can_run_triton_int4(weight: GroupedIntWeight, device: torch.device) -> bool:
    """Whether `weight` runs on the Triton W4A16 GEMM: on CUDA, with triton installed."""
    return device.type == "cuda" and is_triton_available() and fits_w4a16_kernel(weight)


def kernel_group_size(weight: GroupedIntWeight) -> int:
    """The group size the kernel is launched with (one group per row: K rounded up)."""
    in_features = weight.values.shape[1]
    if weight.group_size >= in_features:
        return -(-in_features // ONE_GROUP_MULTIPLE) * ONE_GROUP_MULTIPLE
    return weight.group_size


class TritonInt4Linear(nn.Module):
    """y = x W^T + b with W as [K/8, N] int32 packed codes, float32 scales and zero points
    [K/G, N] (zero points only when some are not zero)."""

    def __init__(
        self, weight: GroupedIntWeight, bias: torch.Tensor | None, dtype: torch.dtype
    ) -> None:
        super().__init__()
        from llmd.kernels.w4a16_gemm import SYMMETRIC_ZERO, pack_int4_along_k

        self.out_features, self.in_features = weight.shape
        self.dtype = dtype
        self.group_size = kernel_group_size(weight)
        scales, zero_points = weight.scales, weight.zero_points
        values, column_order = sorted_by_group(weight)
        self.register_buffer("column_order", column_order, persistent=False)
        codes = values.to(torch.int32) + SYMMETRIC_ZERO  # [N, K] unsigned, 0..15
        self.register_buffer("packed_weight", pack_int4_along_k(codes), persistent=False)
        self.register_buffer("scales", scales.float().t().contiguous(), persistent=False)
        zeros = None
        if zero_points is not None and bool(zero_points.any()):  # GPTQ stores zeros of 0 too
            zeros = (zero_points.float() + SYMMETRIC_ZERO).t().contiguous()  # [G, N]
        self.register_buffer("zeros", zeros, persistent=False)
        self.register_buffer("bias", None if bias is None else bias.to(dtype), persistent=False)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., in_features] -> [..., out_features]."""
        from llmd.kernels.w4a16_gemm import w4a16_gemm

        rows = hidden.reshape(-1, self.in_features)  # [M, K]
        if self.column_order is not None:
            rows = rows.index_select(1, self.column_order)
        if rows.stride(-1) != 1:
            rows = rows.contiguous()
        out = w4a16_gemm(
            rows, self.packed_weight, self.scales, self.zeros, self.group_size, self.bias
        )  # [M, N]
        return out.reshape(*hidden.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        order = ", act-order" if self.column_order is not None else ""
        zeros = ", zero points" if self.zeros is not None else ""
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"triton int4 group={self.group_size}{zeros}{order}"
        )
