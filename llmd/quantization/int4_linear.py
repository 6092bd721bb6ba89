"""`Int4Linear`: a 4-bit weight-only linear on torch's CPU int4 kernel (W4A16, AWQ, GPTQ).

`aten._weight_int4pack_mm_for_cpu` reads half a byte per weight and computes
y = x ((q - 8) * scale + zero)^T per group of 32-256 columns, in the activations' dtype
(float32 or bfloat16); every int4 checkpoint is repacked into that form once, at load.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from llmd.quantization.grouped_weight import GroupedIntWeight, sequential_group_ids

KERNEL_GROUP_SIZES = (256, 128, 64, 32)
"""Group sizes the CPU kernel takes, largest (fewest scales) first."""
ROW_MULTIPLE = 16
"""The kernel's packing wants output rows in multiples of this; others are padded."""


def kernel_group_size(weight: GroupedIntWeight) -> int | None:
    """The kernel group size that tiles `weight`'s groups exactly, or None when none does."""
    in_features = weight.values.shape[1]
    for size in KERNEL_GROUP_SIZES:
        if weight.group_size % size == 0 and in_features % size == 0:
            return size
    return None


def can_run_int4(weight: GroupedIntWeight, device: torch.device) -> bool:
    """Whether `weight` can run on the CPU int4 kernel (4 bits, a tiling group, on CPU)."""
    if device.type != "cpu" or weight.num_bits != 4 or kernel_group_size(weight) is None:
        return False
    if not hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"):
        return False
    if weight.group_ids is None:
        return True
    counts = torch.bincount(weight.group_ids.to(torch.int64))
    return bool((counts == weight.group_size).all())


class Int4Linear(nn.Module):
    """y = x W^T + b with W as packed int4 codes, a scale and a zero per group of columns."""

    def __init__(
        self, weight: GroupedIntWeight, bias: torch.Tensor | None, dtype: torch.dtype
    ) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.dtype = dtype
        self.group_size = kernel_group_size(weight) or 0
        values, scales, zero_points = weight.values, weight.scales, weight.zero_points
        column_order = None
        if weight.group_ids is not None and not sequential_group_ids(
            weight.group_ids, weight.group_size
        ):
            # Act-order: sort the columns by group, and the input's columns the same way.
            column_order = torch.argsort(weight.group_ids.to(torch.int64), stable=True)
            values = values[:, column_order]
        self.register_buffer("column_order", column_order, persistent=False)
        repeats = weight.group_size // self.group_size
        scales = scales.float().repeat_interleave(repeats, dim=1)  # [N, K / group]
        zeros = torch.zeros_like(scales)
        if zero_points is not None:
            zeros = -zero_points.float().repeat_interleave(repeats, dim=1) * scales
        num_padded = -self.out_features % ROW_MULTIPLE
        codes = (values.to(torch.int32) + 8).contiguous()  # [N, K] in 0..15
        if num_padded:
            codes = F.pad(codes, (0, 0, 0, num_padded), value=8)
            scales = F.pad(scales, (0, 0, 0, num_padded))
            zeros = F.pad(zeros, (0, 0, 0, num_padded))
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
        scales_and_zeros = torch.stack([scales.t(), zeros.t()], dim=-1)  # [K/group, N, 2]
        self.register_buffer("packed_weight", packed, persistent=False)
        self.register_buffer(
            "scales_and_zeros", scales_and_zeros.to(dtype).contiguous(), persistent=False
        )
        self.register_buffer("bias", None if bias is None else bias.to(dtype), persistent=False)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., in_features] -> [..., out_features]."""
        rows = hidden.reshape(-1, self.in_features)  # [M, K]
        if self.column_order is not None:
            rows = rows.index_select(1, self.column_order)
        out = torch.ops.aten._weight_int4pack_mm_for_cpu(
            rows.contiguous(), self.packed_weight, self.group_size, self.scales_and_zeros
        )
        out = out[:, : self.out_features]  # [M, N]
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*hidden.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        order = ", act-order" if self.column_order is not None else ""
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"int4 group={self.group_size}{order}"
        )


def int4_reference(
    hidden: torch.Tensor, weight: GroupedIntWeight, bias: torch.Tensor | None
) -> torch.Tensor:
    """The float32 answer `Int4Linear` must meet: F.linear on the dequantized weight."""
    bias_f = None if bias is None else bias.float()
    return F.linear(hidden.float(), weight.dequantize(), bias_f)
