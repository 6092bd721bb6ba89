"""One request's wait accounting: seconds and steps per reason, and the wait still open.

Kept on the engine's Request and written only by the scheduler's WaitTracker, so the
breakdown a finished request reports is plain closed sums; pure standard library.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llmd.wait_breakdown import MAX_CHUNK_SIZES, PREEMPTED, WAIT_REASONS, WaitBreakdown

if TYPE_CHECKING:
    from llmd.engine.request import Request


def zero_seconds() -> dict[str, float]:
    """0.0 seconds for every reason."""
    return dict.fromkeys(WAIT_REASONS, 0.0)


def zero_steps() -> dict[str, int]:
    """0 steps for every reason."""
    return dict.fromkeys(WAIT_REASONS, 0)


@dataclass
class WaitSpell:
    """One stretch of waiting for admission: from arrival (or a preemption) to admission."""

    started_at: float
    is_preempted: bool
    clock_seconds: dict[str, float]
    """The tracker's shared per-reason clock when the spell began."""
    clock_steps: dict[str, int]
    own_seconds: dict[str, float] = field(default_factory=zero_seconds)
    """Corrections to the shared clock: time the request was held by a reason of its own
    (as the queue's head), moved from the shared reason, and time before the scheduler saw it."""
    own_steps: dict[str, int] = field(default_factory=zero_steps)

    def totals(
        self, clock_seconds: dict[str, float], clock_steps: dict[str, int], now: float
    ) -> tuple[dict[str, float], dict[str, int]]:
        """Seconds and steps per reason of this spell, were it to end at `now`."""
        if self.is_preempted:
            num_steps = sum(clock_steps.values()) - sum(self.clock_steps.values())
            return {PREEMPTED: max(0.0, now - self.started_at)}, {PREEMPTED: num_steps}
        seconds = {
            reason: max(
                0.0,
                clock_seconds[reason] - self.clock_seconds[reason] + self.own_seconds[reason],
            )
            for reason in WAIT_REASONS
        }
        steps = {
            reason: max(0, clock_steps[reason] - self.clock_steps[reason] + self.own_steps[reason])
            for reason in WAIT_REASONS
        }
        return seconds, steps


class WaitLedger:
    """Closed wait sums of one request and its open spell."""

    def __init__(self) -> None:
        self.wait_s = zero_seconds()
        self.num_wait_steps = zero_steps()
        self.spell: WaitSpell | None = None
        """The wait in progress (waiting or preempted), None while running or finished."""
        self.token_budget_taken_by: str | None = None

    def add(self, seconds: dict[str, float], steps: dict[str, int]) -> None:
        """Fold a closed spell's sums into the totals."""
        for reason, value in seconds.items():
            self.wait_s[reason] += value
        for reason, count in steps.items():
            self.num_wait_steps[reason] += count

    def breakdown(
        self,
        request: Request,
        open_seconds: dict[str, float] | None = None,
        open_steps: dict[str, int] | None = None,
    ) -> WaitBreakdown:
        """The breakdown so far: the closed sums plus an open spell's, if given."""
        wait_s, num_steps = dict(self.wait_s), dict(self.num_wait_steps)
        for reason, value in (open_seconds or {}).items():
            wait_s[reason] += value
        for reason, count in (open_steps or {}).items():
            num_steps[reason] += count
        chunk_sizes = [size for _, kind, size in request.events if kind == "prefill"]
        return WaitBreakdown(
            wait_s=wait_s,
            num_wait_steps=num_steps,
            token_budget_taken_by=self.token_budget_taken_by,
            num_prefill_chunks=request.num_prefill_chunks,
            prefill_chunk_sizes=tuple(chunk_sizes[:MAX_CHUNK_SIZES]),
            num_prefill_tokens=sum(chunk_sizes),
            num_cached_tokens=request.num_cached_tokens,
            num_preemptions=request.num_preemptions,
        )
