"""Gated MLP activations (act(gate) * up) over a fused gate/up projection output.

Loading gate_proj and up_proj into one matrix halves the MLP's input matmuls; this module
splits the fused output again and applies the checkpoint's `hidden_act`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from llmd.errors import UnsupportedModelError

_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "silu": F.silu,
    "swish": F.silu,
    "gelu": F.gelu,
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
}


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
        self.act = _ACTIVATIONS[hidden_act]

    def forward(self, gate_up: torch.Tensor) -> torch.Tensor:
        """Return the gated activation; [num_tokens, 2 * d] -> [num_tokens, d]."""
        gate, up = gate_up.chunk(2, dim=-1)  # [num_tokens, d] each
        return self.act(gate) * up
