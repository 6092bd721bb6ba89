"""A plan sent to the device, with what applying its samples needs (no torch).

The synchronous step applies it at once and the pipelined step (async scheduling) keeps
one in flight while it schedules the next, so that both apply samples through one path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmd.engine.scheduler_output import SchedulerOutput

if TYPE_CHECKING:
    from llmd.runner.pending_step import PendingStep


@dataclass
class LaunchedStep:
    """A plan whose samples are not applied yet."""

    plan: SchedulerOutput
    kv_context_tokens: int
    """Context tokens whose K/V attention reads in this plan (for `StepStats`)."""
    pending: PendingStep | None = None
    """Its samples on their way to the host; None for a synchronous step."""
    placeholder_ids: set[str] | None = None
    """Requests given a placeholder when its tokens were counted at launch
    (`Scheduler.advance_in_flight`); None while they are still to be counted at apply."""

    @classmethod
    def of(cls, plan: SchedulerOutput) -> LaunchedStep:
        """Record `plan` before its tokens are counted as computed, as its figures need."""
        kv_context_tokens = sum(
            chunk.request.num_computed_tokens + chunk.num_new_tokens for chunk in plan.chunks
        )
        return cls(plan, kv_context_tokens)
