"""Charges every step's wait of every waiting request to one reason, in O(1) per step.

In a step, every waiting request but the queue's head is held by one shared reason: the
limit that stopped admissions (`max_num_seqs`, `token_budget`, `kv_blocks` when a running
request was preempted), else `queue` (behind the head, or not there when the step was
planned). So the tracker keeps one running clock per reason that each request reads when
its wait begins and ends, and only the head, when a reason of its own stopped it (no
blocks for its chunk, or a whole prompt over the budget without chunked prefill), gets a
correction. No step walks the waiting queue, however long it is. Pure standard library.

A running prefill is never skipped by the scheduler (running requests are served first,
and only the last request admitted in a step gets a partial chunk), so the only wait
between two chunks of a prompt is after a preemption, charged to `preempted`.
"""

from __future__ import annotations

from llmd.engine.request import Request, RequestStatus
from llmd.engine.wait_ledger import WaitSpell, zero_seconds, zero_steps
from llmd.wait_breakdown import PREEMPTED, QUEUE, TOKEN_BUDGET, WaitBreakdown


class WaitTracker:
    """The scheduler's side of wait accounting: the shared per-reason clock and the held head."""

    def __init__(self) -> None:
        self._clock_seconds = zero_seconds()
        self._clock_steps = zero_steps()
        self._reason = QUEUE
        """The shared reason of the waiting requests since the last step was planned."""
        self._since: float | None = None
        """When the shared reason began: the last step planned, or the first arrival."""
        self._head: Request | None = None
        self._head_reason: str | None = None
        """The head's own reason since the last step, when one stopped it."""
        self._last_budget_taker: str | None = None
        """The request with the largest prefill chunk of the last step whose token budget
        held a waiting request back."""

    # ---------------------------------------------------------------- waits

    def on_added(self, request: Request, now: float) -> None:
        """A new request waits from its arrival; until the scheduler saw it, that is `queue`."""
        if self._since is None:
            self._since = now
        spell = self._open(request, request.times.arrival, is_preempted=False, now=now)
        spell.own_seconds[QUEUE] += max(0.0, now - request.times.arrival)

    def on_preempted(self, request: Request, now: float) -> None:
        """A preempted request waits again, all of it `preempted`, until re-admitted."""
        self._open(request, now, is_preempted=True, now=now)

    def on_admitted(self, request: Request, now: float) -> None:
        """The request got its first chunk of this spell: its wait ends now."""
        self._close(request, now)

    def on_finished(self, request: Request, now: float) -> None:
        """A request ended from outside the step (abort, error): an open wait ends now."""
        if request is self._head and self._since is not None:
            self._correct_head(max(0.0, now - self._since), num_steps=0)
            self._head = self._head_reason = None
        self._close(request, now)

    # ---------------------------------------------------------------- steps

    def begin_step(self, now: float) -> None:
        """Charge the time since the last step to the reasons that step left in force."""
        if self._since is not None:
            elapsed = max(0.0, now - self._since)
            self._clock_seconds[self._reason] += elapsed
            self._clock_steps[self._reason] += 1
            self._correct_head(elapsed, num_steps=1)
        self._since = now
        self._head = self._head_reason = None

    def end_step(
        self,
        head: Request | None,
        head_reason: str | None,
        shared_reason: str,
        largest_prefill_id: str | None,
    ) -> None:
        """The plan is made: `shared_reason` holds the waiting requests until the next
        step, and `head_reason` (when one stopped it) the queue's `head`."""
        self._reason = shared_reason
        if head is not None and head_reason is not None:
            self._head, self._head_reason = head, head_reason
        if head is not None and TOKEN_BUDGET in (shared_reason, head_reason):
            self._last_budget_taker = largest_prefill_id

    # ---------------------------------------------------------------- reading

    def current_reason(self, request: Request) -> str | None:
        """What holds a waiting request back now (None once it runs or finished)."""
        if request.status is RequestStatus.PREEMPTED:
            return PREEMPTED
        if request.status is RequestStatus.WAITING:
            return self._head_reason if request is self._head else self._reason
        return None

    def breakdown(self, request: Request, now: float) -> WaitBreakdown:
        """The request's breakdown as of `now`, an open wait included (reads, never writes)."""
        if request.waits.spell is None:
            return request.waits.breakdown(request)
        return request.waits.breakdown(request, *self._open_totals(request, now))

    def total_wait_s(self, request: Request, now: float) -> float:
        """Every second the request has waited as of `now` (cheap: no chunk listing)."""
        closed = sum(request.waits.wait_s.values())
        if request.waits.spell is None:
            return closed
        return closed + sum(self._open_totals(request, now)[0].values())

    # ---------------------------------------------------------------- internals

    def _open_totals(self, request: Request, now: float) -> tuple[dict, dict]:
        """Seconds and steps per reason of the request's open spell, were it to end now."""
        spell = request.waits.spell
        assert spell is not None
        seconds, steps = spell.totals(self._clock_at(now), self._clock_steps, now)
        if request is self._head and self._head_reason is not None and not spell.is_preempted:
            elapsed = max(0.0, now - (self._since or now))
            seconds[self._head_reason] += elapsed
            seconds[self._reason] = max(0.0, seconds[self._reason] - elapsed)
        return seconds, steps

    def _clock_at(self, now: float) -> dict[str, float]:
        """The shared clock, the step in progress included up to `now`."""
        seconds = dict(self._clock_seconds)
        if self._since is not None:
            seconds[self._reason] += max(0.0, now - self._since)
        return seconds

    def _open(
        self, request: Request, started_at: float, is_preempted: bool, now: float
    ) -> WaitSpell:
        spell = WaitSpell(started_at, is_preempted, self._clock_at(now), dict(self._clock_steps))
        request.waits.spell = spell
        return spell

    def _close(self, request: Request, now: float) -> None:
        waits = request.waits
        spell = waits.spell
        if spell is None:
            return
        seconds, steps = spell.totals(self._clock_at(now), self._clock_steps, now)
        waits.add(seconds, steps)
        if steps.get(TOKEN_BUDGET, 0) > 0:
            waits.token_budget_taken_by = self._last_budget_taker
        waits.spell = None

    def _correct_head(self, elapsed: float, num_steps: int) -> None:
        """Move the head's share of the shared reason to its own reason."""
        head, reason = self._head, self._head_reason
        if head is None or reason is None or head.waits.spell is None:
            return
        spell = head.waits.spell
        spell.own_seconds[reason] += elapsed
        spell.own_seconds[self._reason] -= elapsed
        spell.own_steps[reason] += num_steps
        spell.own_steps[self._reason] -= num_steps
