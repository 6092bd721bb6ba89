"""RMSNorm with an optional fused residual add.

Every supported architecture normalizes twice per layer right after a residual add, so
fusing the add into the norm call keeps the decoder loop short and matches HF's order.
"""

from __future__ import annotations

import torch
from torch import nn


class RMSNorm(nn.Module):
    """Root-mean-square norm computed in float32, scaled by a learned weight (HF semantics)."""

    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(
        self,
        hidden: torch.Tensor,  # [num_tokens, ..., hidden_size]
        residual: torch.Tensor | None = None,  # [num_tokens, hidden_size]
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Normalize `hidden`; with `residual`, first add it and also return the sum."""
        if residual is not None:
            hidden = hidden + residual
            residual = hidden
        normed = self._normalize(hidden)
        if residual is None:
            return normed
        return normed, residual

    def _normalize(self, hidden: torch.Tensor) -> torch.Tensor:
        if hidden.dtype == torch.float32:
            return torch.nn.functional.rms_norm(hidden, (hidden.shape[-1],), self.weight, self.eps)
        # Low precision: normalize in float32, round, then scale (HF's order of roundings).
        hidden_fp32 = hidden.float()
        variance = hidden_fp32.pow(2).mean(-1, keepdim=True)
        normed = (hidden_fp32 * torch.rsqrt(variance + self.eps)).to(hidden.dtype)
        return self.weight * normed
