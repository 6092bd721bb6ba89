"""RMSNorm with an optional fused residual add, in torch, as one Triton kernel or C++ op.

Every supported architecture normalizes twice per layer right after a residual add, so
fusing the add into the norm call keeps the decoder loop short and matches HF's order; on
CUDA the fused kernel also saves a full read and write of the hidden states, and on the
CPU the C++ op (float32 and bfloat16) replaces six small ATen ops (each of which wakes
the OpenMP team).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from llmd.attention.cpu_extension import CPU_OP_DTYPES
from llmd.layers.kernel_config import KernelConfig


class RMSNorm(nn.Module):
    """Root-mean-square norm computed in float32, scaled by a learned weight (HF semantics)."""

    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps
        self.kernel_config = KernelConfig()
        self._triton_rms_norm: Callable | None = None
        self._triton_fused_add_rms_norm: Callable | None = None
        self._cpu_ops: Any = None
        self._cpu_rms_norm: Callable | None = None
        self._cpu_fused_add_rms_norm: Callable | None = None

    def use_kernel_config(self, config: KernelConfig) -> None:
        """Switch between the torch ops, the Triton kernels (llmd.kernels.rmsnorm) and the
        C++ CPU ops (llmd/layers/csrc)."""
        self.kernel_config = config
        self._triton_rms_norm = self._triton_fused_add_rms_norm = self._cpu_ops = None
        if config.use_triton:
            from llmd.kernels.rmsnorm import fused_add_rms_norm, rms_norm

            self._triton_rms_norm = rms_norm
            self._triton_fused_add_rms_norm = fused_add_rms_norm
        if config.use_cpu_ops:
            from llmd.attention.cpu_extension import load_cpu_ops

            self._cpu_ops = load_cpu_ops()
            # The overloads themselves: a call through the op packet costs ~0.6 us more.
            self._cpu_rms_norm = self._cpu_ops.rms_norm.default
            self._cpu_fused_add_rms_norm = self._cpu_ops.fused_add_rms_norm.default

    def forward(
        self,
        hidden: torch.Tensor,  # [num_tokens, ..., hidden_size]
        residual: torch.Tensor | None = None,  # [num_tokens, hidden_size]
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Normalize `hidden`; with `residual`, first add it and also return the sum.

        With a residual, the C++ CPU path reuses `hidden` and `residual` for its results:
        callers must not read them afterwards (the decoder layers never do).
        """
        if self._triton_rms_norm is not None:
            if residual is None:
                return self._triton_rms_norm(hidden, self.weight, self.eps)
            return self._triton_fused_add_rms_norm(hidden, residual, self.weight, self.eps)
        if self._cpu_ops is not None:
            weight = self.weight
            if _is_cpu_op_rows(hidden, weight) and (
                residual is None or _is_cpu_op_rows(residual, weight)
            ):
                return self._cpu_forward(hidden, residual, weight)
        if residual is not None:
            hidden = hidden + residual
            residual = hidden
        normed = self._normalize(hidden)
        if residual is None:
            return normed
        return normed, residual

    def _cpu_forward(
        self, hidden: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """The C++ op. With `residual` it works in place: the sum overwrites `residual` and
        the normed rows overwrite `hidden` (the decoder passes temporaries it never reads
        again), which saves two [num_tokens, hidden_size] allocations per call."""
        if residual is None:
            normed = torch.empty_like(hidden)  # [num_tokens, hidden_size]
            self._cpu_rms_norm(normed, hidden, weight, self.eps)
            return normed
        self._cpu_fused_add_rms_norm(hidden, residual, weight, self.eps)
        return hidden, residual

    def _normalize(self, hidden: torch.Tensor) -> torch.Tensor:
        if hidden.dtype == torch.float32:
            return torch.nn.functional.rms_norm(hidden, (hidden.shape[-1],), self.weight, self.eps)
        # Low precision: normalize in float32, round, then scale (HF's order of roundings).
        hidden_fp32 = hidden.float()
        variance = hidden_fp32.pow(2).mean(-1, keepdim=True)
        normed = (hidden_fp32 * torch.rsqrt(variance + self.eps)).to(hidden.dtype)
        return self.weight * normed


def _is_cpu_op_rows(hidden: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether the C++ op takes `hidden`: float32 or bfloat16 [rows, hidden] with contiguous
    rows and a weight of the same dtype (a mixed pair keeps torch's type promotion)."""
    return (
        hidden.dtype in CPU_OP_DTYPES
        and weight.dtype == hidden.dtype
        and hidden.dim() == 2
        and hidden.stride(-1) == 1
    )
