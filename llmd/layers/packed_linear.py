"""CPU linear layers whose weights are repacked once into oneDNN's blocked GEMM layout.

torch's default CPU GEMM repacks the whole weight matrix on every call, which at decode's
small batches costs more than the multiply (2-2.5x slower at 4-64 rows on the 2-core
EPYC, docs/ARCHITECTURE.md); packing at load time pays that once.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

logger = logging.getLogger(__name__)

PACKABLE_DTYPES = (torch.float32, torch.bfloat16)
"""Weight dtypes oneDNN's packed linear handles (bf16 only on CPUs that pack it natively)."""

_SELF_CHECK_TOLERANCE = 1e-3
"""Largest relative error against F.linear the packed GEMM may show on a random input."""


class PackedLinear(nn.Module):
    """y = x W^T + b with W held as an opaque oneDNN-packed tensor.

    Built from an `nn.Linear` by `pack_linear_layers`; the plain weight is dropped (unless
    another module shares it, e.g. tied embeddings), so packing costs no extra memory.
    """

    def __init__(self, packed_weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.out_features, self.in_features = packed_weight.shape
        self.register_buffer("packed_weight", packed_weight, persistent=False)
        self.register_buffer("bias", bias, persistent=False)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., in_features] -> [..., out_features]."""
        return _packed_gemm(hidden, self.packed_weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, packed=oneDNN"


def can_pack(dtype: torch.dtype) -> bool:
    """Whether this torch build and CPU can pack `dtype` weights for oneDNN's GEMM."""
    if dtype not in PACKABLE_DTYPES or not torch.backends.mkldnn.is_available():
        return False
    if not hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
        return False
    try:
        _self_check(dtype)
    except RuntimeError as error:  # e.g. bf16 packing needs AVX512 / AVX-NE-CONVERT
        logger.info("oneDNN weight packing unavailable for %s: %s", dtype, error)
        return False
    return True


def pack_linear_layers(model: nn.Module) -> int:
    """Replace every CPU `nn.Linear` of `model` with a `PackedLinear`; return how many.

    Leaves the model unchanged (returning 0) when packing is unavailable for its dtype.
    """
    linears = [
        (parent, name, child)
        for parent in model.modules()
        for name, child in parent.named_children()
        if isinstance(child, nn.Linear) and child.weight.device.type == "cpu"
    ]
    if not linears or not can_pack(linears[0][2].weight.dtype):
        return 0
    with torch.no_grad():
        for parent, name, linear in linears:
            packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach())
            bias = None if linear.bias is None else linear.bias.detach()
            setattr(parent, name, PackedLinear(packed, bias))
    return len(linears)


def _self_check(dtype: torch.dtype) -> None:
    """Raise unless a packed GEMM matches F.linear on a random problem (odd sizes on purpose)."""
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(37, 129, generator=generator).to(dtype)
    hidden = torch.randn(5, 129, generator=generator).to(dtype)
    expected = torch.nn.functional.linear(hidden.float(), weight.float())
    packed = torch.ops.mkldnn._reorder_linear_weight(weight)
    got = _packed_gemm(hidden, packed, None).float()
    error = (got - expected).abs().max().item() / expected.abs().max().item()
    tolerance = _SELF_CHECK_TOLERANCE if dtype == torch.float32 else 1e-2
    if not error <= tolerance:
        raise RuntimeError(f"packed GEMM differs from F.linear by {error:.2e} (relative)")


def _packed_gemm(
    hidden: torch.Tensor, packed_weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """oneDNN's linear on a packed weight: [..., K] x [N, K] packed -> [..., N]."""
    return torch.ops.mkldnn._linear_pointwise(hidden, packed_weight, bias, "none", [], "")
