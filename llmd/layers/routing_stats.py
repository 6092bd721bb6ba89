"""Per-expert routing load and the experts a step touched, for a model's MoE layers.

A decode step reads only the experts its tokens were routed to, so honest bandwidth
figures need that count per step, and imbalance shows in the tokens each expert got.
"""

from __future__ import annotations

import torch

from llmd.protocol.moe_section import MoeSection


class RoutingStats:
    """Shared by every MoE layer of one model: tokens per (MoE layer, expert) since start,
    accumulated on the device, and the (layer, expert) pairs the current step touched."""

    def __init__(self, num_moe_layers: int, num_experts: int) -> None:
        self.num_moe_layers = num_moe_layers
        self.num_experts = num_experts
        self.expert_tokens: torch.Tensor | None = None
        """[num_moe_layers, num_experts] int64 on the model's device, made on first use."""
        self.num_touched_in_step: int | torch.Tensor = 0
        """(MoE layer, expert) pairs that got at least one token since `take_step_touched`:
        a host int, or a device scalar where the counts never left the device (Triton)."""

    def record(
        self, moe_layer_index: int, counts: torch.Tensor, num_touched: int | torch.Tensor
    ) -> None:
        """Add one layer's per-expert token counts ([num_experts] int64) of a forward pass
        and how many experts they touched."""
        if self.expert_tokens is None or self.expert_tokens.device != counts.device:
            self.expert_tokens = torch.zeros(
                self.num_moe_layers, self.num_experts, dtype=torch.int64, device=counts.device
            )
        self.expert_tokens[moe_layer_index] += counts
        self.num_touched_in_step += num_touched

    def take_step_touched(self) -> int | torch.Tensor:
        """The (layer, expert) pairs touched since the last call (an int, or a device scalar
        to copy with the step's samples), and start counting anew."""
        num_touched, self.num_touched_in_step = self.num_touched_in_step, 0
        return num_touched

    def expert_load(self) -> list[list[int]]:
        """Tokens routed to each expert of each MoE layer since start (or the last reset)."""
        if self.expert_tokens is None:
            return [[0] * self.num_experts for _ in range(self.num_moe_layers)]
        return self.expert_tokens.tolist()

    def section(self) -> MoeSection:
        """The load as a stats snapshot carries it (one small device-to-host copy)."""
        return MoeSection(tuple(tuple(row) for row in self.expert_load()))

    def reset(self) -> None:
        """Forget the load so far (after warm-up)."""
        self.expert_tokens = None
        self.num_touched_in_step = 0
