"""MoE expert weights repacked once into oneDNN's blocked GEMM layout on the CPU.

Each expert's projections become `PackedLinear`s (the same bucketed, warmed-up GEMMs as
the dense layers), so an expert's few gathered rows run at the packed GEMM's small-M rate
instead of paying torch's repack of the weight on every call.
"""

from __future__ import annotations

import torch
from torch import nn

from llmd.layers.fused_moe import FusedMoE
from llmd.layers.packed_linear import PackedLinear, can_pack


class PackedExpertGemm(nn.Module):
    """Every expert's gate/up and down projection as oneDNN-packed weights."""

    def __init__(self, gate_up_proj: torch.Tensor, down_proj: torch.Tensor) -> None:
        super().__init__()
        self.gate_up_linears = nn.ModuleList(PackedLinear(w, None) for w in gate_up_proj)
        self.down_linears = nn.ModuleList(PackedLinear(w, None) for w in down_proj)

    def gate_up(self, expert_id: int, rows: torch.Tensor) -> torch.Tensor:
        """[n, hidden_size] -> [n, 2 * intermediate_size]."""
        return self.gate_up_linears[expert_id](rows)

    def down(self, expert_id: int, rows: torch.Tensor) -> torch.Tensor:
        """[n, intermediate_size] -> [n, hidden_size]."""
        return self.down_linears[expert_id](rows)


def pack_expert_weights(model: nn.Module) -> int:
    """Pack the experts of every CPU `FusedMoE` of `model` that still has plain stacked
    weights and no C++ grouped linear to run them (dropping those); return how many layers
    were packed (0 where packing is unavailable for the dtype). `warm_up_packed_linears`
    then finds the packed shapes."""
    layers = [
        module
        for module in model.modules()
        if isinstance(module, FusedMoE)
        and module.expert_gemm is None
        and not module.uses_cpu_grouped_linear
        and module.gate_up_proj is not None
        and module.gate_up_proj.device.type == "cpu"
    ]
    if not layers or not can_pack(layers[0].gate_up_proj.dtype):  # type: ignore[union-attr]
        return 0
    with torch.no_grad():
        for layer in layers:
            assert layer.gate_up_proj is not None and layer.down_proj is not None
            layer.expert_gemm = PackedExpertGemm(layer.gate_up_proj, layer.down_proj)
            layer.gate_up_proj = None
            layer.down_proj = None
    return len(layers)
