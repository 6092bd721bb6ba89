"""Gated MLP activations (act(gate) * up) over a fused gate/up projection output.

Loading gate_proj and up_proj into one matrix halves the MLP's input matmuls; this module
splits the fused output again and applies the checkpoint's `hidden_act` (SiLU as one
Triton kernel on CUDA, which never materializes SiLU(gate)).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from llmd.errors import UnsupportedModelError
from llmd.layers.kernel_config import KernelConfig

_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "silu": F.silu,
    "swish": F.silu,
    "gelu": F.gelu,
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
}
_TRITON_FUSED_ACTIVATIONS = ("silu", "swish")
"""Activations with a fused Triton kernel; the others keep the torch ops on every device."""


class GatedActivation(nn.Module):
    """act(x[..., :d]) * x[..., d:] for a fused [gate | up] input of width 2d."""

    def __init__(self, hidden_act: str) -> None:
        super().__init__()
        if hidden_act not in _ACTIVATIONS:
            raise UnsupportedModelError(
                f"activation {hidden_act!r} is not supported "
                f"(supported: {', '.join(sorted(_ACTIVATIONS))})",
                "hidden_act",
            )
        self.hidden_act = hidden_act
        self.act = _ACTIVATIONS[hidden_act]
        self.kernel_config = KernelConfig()
        self._triton_silu_mul: Callable | None = None

    def use_kernel_config(self, config: KernelConfig) -> None:
        """Use llmd.kernels.silu_mul for SiLU when `config` selects Triton kernels."""
        self.kernel_config = config
        self._triton_silu_mul = None
        if config.use_triton and self.hidden_act in _TRITON_FUSED_ACTIVATIONS:
            from llmd.kernels.silu_mul import silu_mul

            self._triton_silu_mul = silu_mul

    def forward(self, gate_up: torch.Tensor) -> torch.Tensor:
        """Return the gated activation; [num_tokens, 2 * d] -> [num_tokens, d]."""
        if self._triton_silu_mul is not None:
            return self._triton_silu_mul(gate_up)
        gate, up = gate_up.chunk(2, dim=-1)  # [num_tokens, d] each
        return self.act(gate) * up
