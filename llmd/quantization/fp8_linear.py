"""`Fp8Weight` and `Fp8Linear`: FP8 W8A8 on `torch._scaled_mm` (CUDA sm_89+; unverified on a GPU).

The weight stays e4m3 with one scale per output row (per-tensor scales are rows of equal
scales); each call quantizes the activations per token to e4m3 and multiplies on the fp8
tensor cores. Only CUDA devices of compute capability 8.9 or newer choose it; on CPU, and
for block scales, llmd dequantizes the weight at load (`linear_builder.py`). torch also
runs `_scaled_mm` on CPU, which is how the tests check the arithmetic here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

FP8_MAX = 448.0
"""Largest finite float8_e4m3fn."""
MIN_CAPABILITY = (8, 9)
"""Ada and Hopper have fp8 tensor cores."""
ALIGNMENT = 16
"""`_scaled_mm` wants both weight dims in multiples of this."""


@dataclass(frozen=True)
class Fp8Weight:
    """w = codes * scales[:, None] (row scales), or dense when the scales are blocks."""

    codes: torch.Tensor
    """[N, K] float8_e4m3fn."""
    row_scales: torch.Tensor | None
    """[N] float32; None for block scales (they only dequantize)."""
    dense: torch.Tensor
    """[N, K] float32: the weight the codes stand for."""


def can_run_fp8(weights: list[Fp8Weight], device: torch.device) -> bool:
    """Whether the shards can share one `Fp8Linear` on `device` (CUDA sm_89+ only)."""
    if device.type != "cuda" or any(weight.row_scales is None for weight in weights):
        return False
    out_features = sum(weight.codes.shape[0] for weight in weights)
    in_features = weights[0].codes.shape[1]
    if out_features % ALIGNMENT or in_features % ALIGNMENT:
        return False
    return torch.cuda.get_device_capability(device) >= MIN_CAPABILITY


class Fp8Linear(nn.Module):
    """y = (x quantized per token) (codes^T) * scales + b, through `torch._scaled_mm`."""

    def __init__(self, weights: list[Fp8Weight], bias: torch.Tensor | None, dtype: torch.dtype):
        super().__init__()
        codes = torch.cat([weight.codes for weight in weights])  # [N, K]
        scales = torch.cat(
            [weight.row_scales for weight in weights if weight.row_scales is not None]
        )
        self.out_features, self.in_features = codes.shape
        self.dtype = dtype
        # [K, N] column-major: the layout `_scaled_mm` wants for its second operand.
        self.register_buffer("codes_t", codes.t(), persistent=False)
        self.register_buffer(
            "scale_b", scales.float().reshape(1, -1).contiguous(), persistent=False
        )
        self.register_buffer("bias", None if bias is None else bias.to(dtype), persistent=False)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., in_features] -> [..., out_features] in the model's dtype."""
        rows = hidden.reshape(-1, self.in_features)  # [M, K]
        scale_a = rows.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-12) / FP8_MAX
        codes_a = (rows.float() / scale_a).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        # Row-wise scales on CUDA produce bfloat16 only; CPU produces the model's dtype.
        out_dtype = torch.bfloat16 if rows.is_cuda else self.dtype
        out = torch.ops.aten._scaled_mm(
            codes_a, self.codes_t, scale_a, self.scale_b, out_dtype=out_dtype
        ).to(self.dtype)  # [M, N]
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*hidden.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, fp8 w8a8"


def fp8_reference(
    hidden: torch.Tensor, weights: list[Fp8Weight], bias: torch.Tensor | None
) -> torch.Tensor:
    """The float32 answer `Fp8Linear` must meet: per-token fp8 activations, dense weight."""
    rows = hidden.float()
    scale = rows.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / FP8_MAX
    activations = (rows / scale).to(torch.float8_e4m3fn).float() * scale
    weight = torch.cat([w.dense for w in weights])
    return torch.nn.functional.linear(activations, weight, None if bias is None else bias.float())
