"""The routing load of an MoE model's experts, as a stats snapshot carries it.

Imbalance is what slows an MoE decode (a step waits for its busiest expert, and a
cold expert's weights are read for few tokens), so the snapshot carries the tokens each
expert of each MoE layer has received since start, and a summary readers can show.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmd.protocol.wire_data import WireData


@dataclass(frozen=True)
class MoeSection(WireData):
    """Tokens routed to each (MoE layer, expert) since start (or the warm-up's end)."""

    expert_tokens: tuple[tuple[int, ...], ...] = ()
    """One row per MoE layer, one count per routed expert."""

    @property
    def tokens_per_expert(self) -> tuple[int, ...]:
        """Each expert's tokens summed over the MoE layers."""
        return tuple(sum(column) for column in zip(*self.expert_tokens, strict=True))

    @property
    def max_imbalance(self) -> float | None:
        """The largest (busiest expert / mean expert) over the layers; 1.0 is balanced,
        None before any token was routed."""
        ratios = [max(row) * len(row) / sum(row) for row in self.expert_tokens if row and sum(row)]
        return max(ratios) if ratios else None
