"""Which implementation the layers run: plain torch ops, llmd's Triton kernels or C++ ops.

Model code is the same for every backend: the runner decides once, after building the
model, and hands the choice to each layer instance, so no global or class state changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
from torch import nn

from llmd.attention.backend import AttentionBackend
from llmd.errors import InvalidParameterError
from llmd.kernels import is_triton_available


@dataclass(frozen=True)
class KernelConfig:
    """The layers' kernel choice; the default (plain torch) runs on any device."""

    use_triton: bool = False
    """Fused Triton kernels for RMSNorm (with residual add), rotary and SiLU-and-mul."""
    use_cpu_ops: bool = False
    """Fused C++ ops (llmd/layers/csrc) on the CPU for float32 and bfloat16 RMSNorm (with
    residual add), rotary and SiLU-and-mul (bf16 rounded where torch's ops round); other
    dtypes, mixed-dtype operands and shapes the ops do not take keep the torch ops."""

    @classmethod
    def for_backend(cls, backend: AttentionBackend, device: torch.device) -> KernelConfig:
        """The layer kernels `backend` pairs with, where they run: Triton kernels on CUDA,
        C++ ops on the CPU (whose backend exists only where the extension was built)."""
        return cls(
            use_triton=backend.pairs_with_triton_layers and device.type == "cuda",
            use_cpu_ops=backend.pairs_with_cpu_layer_ops and device.type == "cpu",
        )


@runtime_checkable
class KernelConfigurable(Protocol):
    """A layer that can switch between torch ops and Triton kernels."""

    def use_kernel_config(self, config: KernelConfig) -> None:
        """Run this layer's math with the kernels `config` selects from now on."""


def configure_kernels(model: nn.Module, config: KernelConfig) -> int:
    """Hand `config` to every layer of `model` that can switch kernels; return how many.

    Raises if Triton kernels are requested but triton is not installed, rather than
    silently running the slower torch path.
    """
    if config.use_triton and not is_triton_available():
        raise InvalidParameterError(
            "Triton layer kernels were requested but triton is not installed "
            "(pip install triton, or use attention_backend=torch)",
            "attention_backend",
        )
    num_configured = 0
    for module in model.modules():
        if isinstance(module, KernelConfigurable):
            module.use_kernel_config(config)
            num_configured += 1
    return num_configured
