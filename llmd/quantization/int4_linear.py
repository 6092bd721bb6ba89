"""`Int4Linear`: a 4-bit weight-only linear on the CPU (W4A16, AWQ, GPTQ).

Every int4 checkpoint is packed once, at load, into llmd's layout (two codes a byte, rows in
blocks of 32, float32 scales and zero points per group; `pack_int4`). Where the runner
runs llmd's C++ CPU ops, a decode-sized batch runs on `llmd_cpu::int4_linear` (half a byte
per weight, read once for all rows) and a prefill multiplies the weight dequantized to the
activations' dtype by the dense path; elsewhere `aten._weight_int4pack_mm_for_cpu` runs it,
on its own packing derived from llmd's on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from llmd.quantization.decode_kernel import CPU_KERNEL_MAX_ROWS, DecodeKernel
from llmd.quantization.grouped_weight import GroupedIntWeight, sorted_by_group
from llmd.quantization.int8_linear import load_int_linear_ops

if TYPE_CHECKING:
    from llmd.layers.kernel_config import KernelConfig

KERNEL_GROUP_SIZES = (256, 128, 64, 32)
"""Group sizes torch's CPU kernel takes, largest (fewest scales) first."""
BLOCK_ROWS = 32
"""Output rows per block of llmd's packing (and the padding of the row count)."""


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


def pack_int4(values: torch.Tensor) -> torch.Tensor:
    """[N, K] signed codes (-8..7) -> uint8 [ceil(N / 32), K, 16]: byte j of record k holds
    row 32b + j (low nibble) and row 32b + 16 + j (high nibble) of column k, as code + 8."""
    num_rows, in_features = values.shape
    codes = F.pad(values.to(torch.int16) + 8, (0, 0, 0, -num_rows % BLOCK_ROWS), value=8)
    halves = codes.reshape(-1, 2, BLOCK_ROWS // 2, in_features)  # [blocks, 2, 16, K]
    packed = halves[:, 0] | (halves[:, 1] << 4)  # [blocks, 16, K]
    return packed.transpose(1, 2).to(torch.uint8).contiguous()  # [blocks, K, 16]


def unpack_int4(packed: torch.Tensor, num_rows: int) -> torch.Tensor:
    """`pack_int4`'s inverse: [N, K] int16 signed codes."""
    records = packed.to(torch.int16).transpose(1, 2)  # [blocks, 16, K]
    halves = torch.stack([records & 15, records >> 4], dim=1)  # [blocks, 2, 16, K]
    return (halves.reshape(-1, packed.shape[1]) - 8)[:num_rows]


class Int4Linear(nn.Module):
    """y = x W^T + b with W as packed int4 codes, a scale and a zero point per group of columns."""

    def __init__(
        self, weight: GroupedIntWeight, bias: torch.Tensor | None, dtype: torch.dtype
    ) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.dtype = dtype
        self.group_size = weight.group_size
        scales, zero_points = weight.scales, weight.zero_points
        values, column_order = sorted_by_group(weight)
        self.register_buffer("column_order", column_order, persistent=False)
        num_padded = -self.out_features % BLOCK_ROWS
        self.register_buffer("packed_weight", pack_int4(values), persistent=False)
        padded_scales = F.pad(scales.float(), (0, 0, 0, num_padded))  # [N_pad, G]
        self.register_buffer("scales", padded_scales.t().contiguous(), persistent=False)
        padded_zeros = None
        if zero_points is not None:
            padded_zeros = F.pad(zero_points.float(), (0, 0, 0, num_padded)).t().contiguous()
        self.register_buffer("zero_points", padded_zeros, persistent=False)  # [G, N_pad]
        self.register_buffer("bias", None if bias is None else bias.to(dtype), persistent=False)
        self.cpu_ops: Any | None = None
        """torch.ops.llmd_cpu once the runner selects the C++ CPU ops, else None."""
        self.decode_kernel: DecodeKernel | None = None
        """The C++ kernel with this layer's operands bound, for decode-sized batches."""
        # torch's packed weight and scales-and-zeros: made on first use, or when the runner
        # selects no C++ ops (buffers, so that weight bytes count them).
        self.register_buffer("aten_packed_weight", None, persistent=False)
        self.register_buffer("aten_scales_and_zeros", None, persistent=False)
        self.aten_group_size = 0

    def use_kernel_config(self, config: KernelConfig) -> None:
        """Run on llmd's C++ int4 kernels when `config` selects the CPU ops, else on torch's,
        whose packing then replaces llmd's (one packing is held, never two)."""
        cpu_ops = load_int_linear_ops(config, self.dtype)
        if cpu_ops is not None and self.packed_weight is None:
            raise RuntimeError("this Int4Linear holds only torch's packing now (configured once)")
        self.cpu_ops = cpu_ops
        self.decode_kernel = None
        if cpu_ops is None:
            self.build_aten_operands()
            self.packed_weight = None
        elif self.column_order is None:  # act-order rows are permuted first: the full path
            operands = (
                self.packed_weight, self.scales, self.zero_points, self.group_size, self.bias
            )  # fmt: skip
            self.decode_kernel = DecodeKernel(cpu_ops.int4_linear.default, operands, self)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., in_features] -> [..., out_features]."""
        if self.decode_kernel is not None and self.decode_kernel.takes(hidden):
            return self.decode_kernel(hidden)
        rows = hidden.reshape(-1, self.in_features)  # [M, K]
        if self.column_order is not None:
            rows = rows.index_select(1, self.column_order)
        rows = rows.contiguous()
        if self.cpu_ops is not None and rows.dtype == self.dtype:
            out = self.cpu_forward(rows, self.cpu_ops)
        else:
            out = self.aten_forward(rows)
        return out.reshape(*hidden.shape[:-1], self.out_features)

    def cpu_forward(self, rows: torch.Tensor, ops: Any) -> torch.Tensor:
        """[M, K] -> [M, N] on llmd's C++ ops: the int4 kernel, or a prefill's dense GEMM."""
        if rows.shape[0] <= CPU_KERNEL_MAX_ROWS:
            out = rows.new_empty(rows.shape[0], self.out_features)  # [M, N]
            ops.int4_linear(
                out, rows, self.packed_weight, self.scales, self.zero_points, self.group_size,
                self.bias,
            )  # fmt: skip
            return out
        dense_t = rows.new_empty(self.in_features, self.scales.shape[1])  # [K, N_pad]
        ops.int4_dequantize(
            dense_t, self.packed_weight, self.scales, self.zero_points, self.group_size
        )
        out = torch.matmul(rows, dense_t[:, : self.out_features])  # [M, N]
        return out if self.bias is None else out + self.bias

    def aten_forward(self, rows: torch.Tensor) -> torch.Tensor:
        """[M, K] -> [M, N] on torch's int4 kernel."""
        self.build_aten_operands()
        out = torch.ops.aten._weight_int4pack_mm_for_cpu(
            rows, self.aten_packed_weight, self.aten_group_size, self.aten_scales_and_zeros
        )
        out = out[:, : self.out_features]  # [M, N]
        return out if self.bias is None else out + self.bias

    def build_aten_operands(self) -> None:
        """Make torch's packing from llmd's once (it stays; llmd's may then be dropped)."""
        if self.aten_packed_weight is None:
            packed, self.aten_group_size, scales_and_zeros = self.make_aten_operands()
            self.aten_packed_weight, self.aten_scales_and_zeros = packed, scales_and_zeros

    def make_aten_operands(self) -> tuple[torch.Tensor, int, torch.Tensor]:
        """torch's form of the weight: w = (q - 8) * scale + zero per kernel group of 32-256."""
        kernel_group = next(
            size
            for size in KERNEL_GROUP_SIZES
            if self.group_size % size == 0 and self.in_features % size == 0
        )
        num_rows = self.packed_weight.shape[0] * BLOCK_ROWS
        codes = unpack_int4(self.packed_weight, num_rows).to(torch.int32) + 8  # [N_pad, K]
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
        repeats = self.group_size // kernel_group
        scales = self.scales.repeat_interleave(repeats, dim=0)  # [K / group, N_pad]
        zeros = torch.zeros_like(scales)
        if self.zero_points is not None:
            zeros = -self.zero_points.repeat_interleave(repeats, dim=0) * scales
        scales_and_zeros = torch.stack([scales, zeros], dim=-1)  # [K / group, N_pad, 2]
        return packed, kernel_group, scales_and_zeros.to(self.dtype).contiguous()

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
