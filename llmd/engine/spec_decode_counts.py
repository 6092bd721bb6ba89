"""Speculative decoding's counters: drafts, draft tokens, accepted tokens, per position.

Named as vLLM names them, so dashboards read llmd's the same way; one step's counts ride on
its `StepStats` to the daemon's metrics, and the engine keeps the totals since start.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SpecDecodeCounts:
    """Drafts verified and tokens accepted, summed over steps (or over one step)."""

    num_drafts: int = 0
    """Verify chunks run: requests that had at least one draft token in a step."""
    num_draft_tokens: int = 0
    """Draft tokens scored."""
    num_accepted_tokens: int = 0
    """Draft tokens that matched the target's own choice (each saves one step)."""
    accepted_per_position: list[int] = field(default_factory=list)
    """Accepted draft tokens by their position in the draft (index 0: the first)."""

    def add_draft(self, num_draft_tokens: int, num_accepted: int) -> None:
        """Count one verified draft of `num_draft_tokens`, of which the first `num_accepted`."""
        self.num_drafts += 1
        self.num_draft_tokens += num_draft_tokens
        self.num_accepted_tokens += num_accepted
        per_position = self.accepted_per_position
        if len(per_position) < num_accepted:
            per_position.extend([0] * (num_accepted - len(per_position)))
        for position in range(num_accepted):
            per_position[position] += 1

    def add(self, other: SpecDecodeCounts) -> None:
        """Add another set of counts (a step's) to these."""
        self.num_drafts += other.num_drafts
        self.num_draft_tokens += other.num_draft_tokens
        self.num_accepted_tokens += other.num_accepted_tokens
        per_position = self.accepted_per_position
        if len(per_position) < len(other.accepted_per_position):
            per_position.extend([0] * (len(other.accepted_per_position) - len(per_position)))
        for position, count in enumerate(other.accepted_per_position):
            per_position[position] += count

    @property
    def mean_acceptance_length(self) -> float | None:
        """Tokens a verify step emits on average: 1 + accepted / drafts (None: no draft)."""
        if not self.num_drafts:
            return None
        return 1 + self.num_accepted_tokens / self.num_drafts
