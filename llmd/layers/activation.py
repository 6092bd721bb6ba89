"""Gated MLP activations (act(gate) * up) over a fused gate/up projection output.

Loading gate_proj and up_proj into one matrix halves the MLP's input matmuls; this module
splits the fused output again and applies the checkpoint's `hidden_act` (SiLU as one
Triton kernel on CUDA or one C++ op on the CPU, which never materialize SiLU(gate)).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from llmd.attention.cpu_extension import CPU_OP_DTYPES
from llmd.errors import UnsupportedModelError
from llmd.layers.kernel_config import KernelConfig

_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "silu": F.silu,
    "swish": F.silu,
    "gelu": F.gelu,
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
}
_TRITON_FUSED_ACTIVATIONS = ("silu", "swish")
"""Activations with a fused Triton kernel or C++ op; the others keep the torch ops."""


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
        self._triton_silu_mul: Callable[[torch.Tensor], torch.Tensor] | None = None
        self._cpu_silu_and_mul: Callable[[torch.Tensor, torch.Tensor], None] | None = None

    def use_kernel_config(self, config: KernelConfig) -> None:
        """Use llmd.kernels.silu_mul for SiLU when `config` selects Triton kernels, the C++
        op (llmd/layers/csrc) when it selects the CPU ops."""
        self.kernel_config = config
        self._triton_silu_mul = self._cpu_silu_and_mul = None
        if self.hidden_act not in _TRITON_FUSED_ACTIVATIONS:
            return
        if config.use_triton:
            from llmd.kernels.silu_mul import silu_mul

            self._triton_silu_mul = silu_mul
        if config.use_cpu_ops:
            from llmd.attention.cpu_extension import load_cpu_ops

            self._cpu_silu_and_mul = load_cpu_ops().silu_and_mul.default  # not the op packet

    def forward(self, gate_up: torch.Tensor) -> torch.Tensor:
        """Return the gated activation; [num_tokens, 2 * d] -> [num_tokens, d]."""
        if self._triton_silu_mul is not None:
            return self._triton_silu_mul(gate_up)
        if self._cpu_silu_and_mul is not None and _is_cpu_op_rows(gate_up):
            out = gate_up.new_empty(gate_up.shape[0], gate_up.shape[1] // 2)  # [num_tokens, d]
            self._cpu_silu_and_mul(out, gate_up)
            return out
        gate, up = gate_up.chunk(2, dim=-1)  # [num_tokens, d] each
        return self.act(gate) * up


def _is_cpu_op_rows(gate_up: torch.Tensor) -> bool:
    """Whether the C++ op takes `gate_up`: [rows, 2 d] with contiguous rows in a dtype where
    it is the faster path."""
    return (
        gate_up.dtype in CPU_OP_DTYPES
        and gate_up.dim() == 2
        and gate_up.stride(-1) == 1
        and gate_up.shape[1] % 2 == 0
    )
