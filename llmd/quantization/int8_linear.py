"""`Int8Linear`: an 8-bit weight-only linear on the CPU (W8A16, int W8A8).

It reads one byte per weight: half the bytes of a bf16 weight, a quarter of fp32's, which
is what a memory-bound decode step pays for. Where the runner runs llmd's C++ CPU ops, a
decode-sized batch runs on `llmd_cpu::int8_linear` (each weight read once for all rows) and
a prefill multiplies the weight dequantized to the activations' dtype by the dense path;
elsewhere everything runs on torch's `aten._weight_int8pack_mm`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from llmd.quantization.decode_kernel import CPU_KERNEL_MAX_ROWS, DecodeKernel
from llmd.quantization.grouped_weight import GroupedIntWeight

if TYPE_CHECKING:
    from llmd.layers.kernel_config import KernelConfig


def can_run_int8(weight: GroupedIntWeight, device: torch.device) -> bool:
    """Whether `weight` fits the kernel: 8 bits, symmetric, one scale per row, on CPU."""
    return (
        device.type == "cpu"
        and weight.num_bits == 8
        and weight.zero_points is None
        and weight.scales.shape[1] == 1
        and hasattr(torch.ops.aten, "_weight_int8pack_mm")
    )


def load_int_linear_ops(config: KernelConfig, dtype: torch.dtype) -> Any | None:
    """torch.ops.llmd_cpu when `config` runs the C++ CPU ops and they take `dtype`, else None."""
    from llmd.attention.cpu_extension import CPU_OP_DTYPES, load_cpu_ops

    if not config.use_cpu_ops or dtype not in CPU_OP_DTYPES:
        return None
    return load_cpu_ops()


class Int8Linear(nn.Module):
    """y = x (q * scale)^T + b with int8 codes q [N, K] and one scale per output row."""

    def __init__(
        self, weight: GroupedIntWeight, bias: torch.Tensor | None, dtype: torch.dtype
    ) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.dtype = dtype
        scales = weight.scales.reshape(-1).float().contiguous()  # [N]
        self.register_buffer("codes", weight.values.contiguous(), persistent=False)
        self.register_buffer("scales", scales, persistent=False)
        self.register_buffer("aten_scales", scales.to(dtype), persistent=False)
        self.register_buffer("bias", None if bias is None else bias.to(dtype), persistent=False)
        self.cpu_ops: Any | None = None
        """torch.ops.llmd_cpu once the runner selects the C++ CPU ops, else None."""
        self.decode_kernel: DecodeKernel | None = None
        """The C++ kernel with this layer's operands bound, for decode-sized batches."""

    def use_kernel_config(self, config: KernelConfig) -> None:
        """Run on llmd's C++ int8 kernels when `config` selects the CPU ops (call it after
        the module last moved: the decode kernel holds its tensors)."""
        self.cpu_ops = load_int_linear_ops(config, self.dtype)
        self.decode_kernel = None
        if self.cpu_ops is not None:
            operands = (self.codes, self.scales, self.bias)
            self.decode_kernel = DecodeKernel(self.cpu_ops.int8_linear.default, operands, self)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., in_features] -> [..., out_features]."""
        if self.decode_kernel is not None and self.decode_kernel.takes(hidden):
            return self.decode_kernel(hidden)
        rows = hidden.reshape(-1, self.in_features).contiguous()  # [M, K]
        if self.cpu_ops is not None and rows.dtype == self.dtype:
            out = self.cpu_forward(rows, self.cpu_ops)
        else:
            out = torch.ops.aten._weight_int8pack_mm(rows, self.codes, self.aten_scales)  # [M, N]
            if self.bias is not None:
                out = out + self.bias
        return out.reshape(*hidden.shape[:-1], self.out_features)

    def cpu_forward(self, rows: torch.Tensor, ops: Any) -> torch.Tensor:
        """[M, K] -> [M, N] on llmd's C++ ops: the int8 kernel, or a prefill's dense GEMM."""
        if rows.shape[0] <= CPU_KERNEL_MAX_ROWS:
            out = rows.new_empty(rows.shape[0], self.out_features)  # [M, N]
            ops.int8_linear(out, rows, self.codes, self.scales, self.bias)
            return out
        dense = rows.new_empty(self.out_features, self.in_features)  # [N, K]
        ops.int8_dequantize(dense, self.codes, self.scales)
        return F.linear(rows, dense, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


def int8_reference(
    hidden: torch.Tensor, weight: GroupedIntWeight, bias: torch.Tensor | None
) -> torch.Tensor:
    """The float32 answer `Int8Linear` must meet: F.linear on the dequantized weight."""
    bias_f = None if bias is None else bias.float()
    return F.linear(hidden.float(), weight.dequantize(), bias_f)
