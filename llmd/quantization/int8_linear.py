"""`Int8Linear`: an 8-bit weight-only linear on torch's CPU int8 kernel (W8A16, int W8A8).

`aten._weight_int8pack_mm` reads one byte per weight and scales each output column by its
row's scale, in the activations' dtype (float32 or bfloat16): half the bytes of a bf16
weight, a quarter of fp32's, which is what a memory-bound decode step pays for.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from llmd.quantization.grouped_weight import GroupedIntWeight


def can_run_int8(weight: GroupedIntWeight, device: torch.device) -> bool:
    """Whether `weight` fits the kernel: 8 bits, symmetric, one scale per row, on CPU."""
    return (
        device.type == "cpu"
        and weight.num_bits == 8
        and weight.zero_points is None
        and weight.scales.shape[1] == 1
        and hasattr(torch.ops.aten, "_weight_int8pack_mm")
    )


class Int8Linear(nn.Module):
    """y = x (q * scale)^T + b with int8 codes q [N, K] and one scale per output row."""

    def __init__(
        self, weight: GroupedIntWeight, bias: torch.Tensor | None, dtype: torch.dtype
    ) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.dtype = dtype
        self.register_buffer("codes", weight.values.contiguous(), persistent=False)
        self.register_buffer(
            "scales", weight.scales.reshape(-1).to(dtype).contiguous(), persistent=False
        )
        self.register_buffer("bias", None if bias is None else bias.to(dtype), persistent=False)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., in_features] -> [..., out_features]."""
        rows = hidden.reshape(-1, self.in_features).contiguous()  # [M, K]
        out = torch.ops.aten._weight_int8pack_mm(rows, self.codes, self.scales)  # [M, N]
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*hidden.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


def int8_reference(
    hidden: torch.Tensor, weight: GroupedIntWeight, bias: torch.Tensor | None
) -> torch.Tensor:
    """The float32 answer `Int8Linear` must meet: F.linear on the dequantized weight."""
    bias_f = None if bias is None else bias.float()
    return F.linear(hidden.float(), weight.dequantize(), bias_f)
