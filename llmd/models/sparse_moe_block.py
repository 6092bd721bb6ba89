"""The MLP of an MoE decoder layer: router, routed experts, optional shared expert.

Named like the checkpoints (`gate`, `experts`, `shared_expert`, `shared_expert_gate`) so
weights load by name; the experts' math lives in `llmd.layers.fused_moe`.
"""

from __future__ import annotations

import torch
from torch import nn

from llmd.layers.fused_moe import FusedMoE
from llmd.layers.moe_routing import route_top_k
from llmd.layers.routing_stats import RoutingStats
from llmd.models.llama import GatedMLP
from llmd.models.moe_spec import MoeSpec


class SparseMoeBlock(nn.Module):
    """sum of the top-k experts' outputs weighted by the router, plus the gated shared
    expert where the architecture has one."""

    def __init__(
        self,
        spec: MoeSpec,
        hidden_size: int,
        hidden_act: str,
        routing_stats: RoutingStats | None,
        moe_layer_index: int,
    ) -> None:
        super().__init__()
        self.top_k = spec.num_experts_per_token
        self.renormalize = spec.renormalize
        self.gate = nn.Linear(hidden_size, spec.num_experts, bias=False)
        self.experts = FusedMoE(
            spec.num_experts, hidden_size, spec.intermediate_size, hidden_act,
            routing_stats, moe_layer_index,
        )  # fmt: skip
        self.shared_expert: nn.Module | None = None
        self.shared_expert_gate: nn.Linear | None = None
        if spec.shared_intermediate_size > 0:
            self.shared_expert = GatedMLP(
                hidden_size, spec.shared_intermediate_size, hidden_act, bias=False
            )
            self.shared_expert_gate = nn.Linear(hidden_size, 1, bias=False)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[num_tokens, hidden_size] -> [num_tokens, hidden_size]."""
        router_logits = self.gate(hidden)  # [num_tokens, num_experts]
        weights, expert_ids = route_top_k(router_logits, self.top_k, self.renormalize)
        out = self.experts(hidden, weights, expert_ids)
        if self.shared_expert is not None and self.shared_expert_gate is not None:
            shared_weight = torch.sigmoid(self.shared_expert_gate(hidden))  # [num_tokens, 1]
            out = out + shared_weight * self.shared_expert(hidden)
        return out
