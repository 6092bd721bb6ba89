"""Admission by SLO: a request that could not start within its TTFT target is refused now.

Under sustained overload a queue that takes everything grows until every request misses
its SLO and goodput collapses (issue 20: 0.13 req/s kept at 3/s). With `--admission slo`
the engine thread estimates, as each request arrives, when its prefill would end: the
prefill tokens queued ahead of it plus its own, at the prefill rate the recent steps
achieved (decodes included). A request that would miss `--slo-ttft-ms` is refused at once
with `overloaded` (HTTP 429 with Retry-After) before it is accepted, so the admitted ones
keep their TTFT and goodput stays near capacity.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from llmd.errors import OverloadedError

RATE_DECAY = 0.9
"""Weight of the older steps in the prefill-rate estimate (about the last 10 steps)."""
HEADROOM = 0.9
"""Share of the TTFT target a request's estimated wait may use (the rest: its first decode
step, delivery, and the estimate's error)."""


class QueuedRequest(Protocol):
    """What admission reads of a request in the scheduler's queues."""

    num_prompt_tokens: int
    num_computed_tokens: int


class Admission:
    """Decides, on the engine thread, whether a new request can still start in time."""

    def __init__(self, ttft_target_s: float) -> None:
        self.ttft_target_s = ttft_target_s
        self.num_refused = 0
        self._prefill_tokens = 0.0
        self._prefill_seconds = 0.0

    @property
    def prefill_tokens_per_s(self) -> float | None:
        """Prefill tokens per second of recent steps that ran a prefill (None: none yet)."""
        if self._prefill_seconds <= 0.0:
            return None
        return self._prefill_tokens / self._prefill_seconds

    def observe_step(self, num_prefill_tokens: int, step_s: float) -> None:
        """Fold a finished step into the rate; steps without a prefill say nothing of it."""
        if num_prefill_tokens <= 0 or step_s <= 0.0:
            return
        self._prefill_tokens = RATE_DECAY * self._prefill_tokens + num_prefill_tokens
        self._prefill_seconds = RATE_DECAY * self._prefill_seconds + step_s

    def estimated_wait_s(self, queued: Iterable[QueuedRequest], num_prompt_tokens: int) -> float:
        """Seconds until a new prompt's prefill would end, behind the prefill work queued."""
        rate = self.prefill_tokens_per_s
        if rate is None:
            return 0.0  # nothing measured yet: admit, and learn from the steps
        ahead = sum(max(0, r.num_prompt_tokens - r.num_computed_tokens) for r in queued)
        return (ahead + num_prompt_tokens) / rate

    def check(
        self, queued: Iterable[QueuedRequest], num_prompt_tokens: int, waited_s: float
    ) -> OverloadedError | None:
        """The refusal for a request that has waited `waited_s` already, or None to admit."""
        budget_s = HEADROOM * self.ttft_target_s - waited_s
        wait_s = self.estimated_wait_s(queued, num_prompt_tokens)
        if wait_s <= budget_s:
            return None
        self.num_refused += 1
        return OverloadedError(
            f"the engine would start this request in about {wait_s:.1f} s, past the "
            f"{self.ttft_target_s * 1000:.0f} ms TTFT target (--admission slo); retry later"
        )
