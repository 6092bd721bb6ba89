"""Admission by SLO: a request that could not start within its TTFT target is refused now.

Under sustained overload a queue that takes everything grows until every request misses
its SLO and goodput collapses (issue 20: 0.13 req/s kept at 3/s). With `--admission slo`
the engine thread estimates, as each request arrives, when its prefill would end: the
prefill tokens queued ahead of it plus its own, at the prefill rate the recent steps
achieved (decodes included). A request that would miss `--slo-ttft-ms` is refused at once
with `overloaded` (HTTP 429 with Retry-After) before it is accepted, so the admitted ones
keep their TTFT and goodput stays near capacity. With a TPOT target too, new requests are
also refused while the recent decode steps already take longer than it allows: each one
admitted would lengthen every running request's steps further.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Protocol

from llmd.daemon.serve_options import ServeOptions
from llmd.errors import OverloadedError

logger = logging.getLogger(__name__)

RATE_DECAY = 0.9
"""Weight of the older steps in the prefill-rate estimate (about the last 10 steps)."""
STEP_TIME_DECAY = 0.97
"""Weight of the older steps in the decode step time (about the last 30 steps: a burst of
prefills lengthens a few steps, which a request's TPOT averages over its whole decode)."""
REFUSAL_LOG_INTERVAL_S = 10.0
HEADROOM = 0.9
"""Share of the TTFT target a request's estimated wait may use (the rest: its first decode
step, delivery, and the estimate's error)."""


class QueuedRequest(Protocol):
    """What admission reads of a request in the scheduler's queues."""

    num_prompt_tokens: int
    num_computed_tokens: int


def backlog_tokens(queued: Iterable[QueuedRequest]) -> int:
    """Prompt tokens still to prefill over `queued`."""
    return sum(max(0, r.num_prompt_tokens - r.num_computed_tokens) for r in queued)


class Admission:
    """Decides, on the engine thread, whether a new request can still start in time."""

    def __init__(self, ttft_target_s: float, tpot_target_s: float | None = None) -> None:
        self.ttft_target_s = ttft_target_s
        self.tpot_target_s = tpot_target_s
        self.num_refused = 0
        self.num_refused_by_reason = {"ttft": 0, "tpot": 0}
        self._last_log = 0.0
        self._num_unlogged = 0
        self._prefill_tokens = 0.0
        self._prefill_seconds = 0.0
        self._decode_step_s: float | None = None
        """Decayed mean wall time of recent steps that ran decodes: the running TPOT."""

    @property
    def prefill_tokens_per_s(self) -> float | None:
        """Prefill tokens per second of recent steps that ran a prefill (None: none yet)."""
        if self._prefill_seconds <= 0.0:
            return None
        return self._prefill_tokens / self._prefill_seconds

    @property
    def decode_step_s(self) -> float | None:
        """Recent steps' mean wall time, over those that ran decodes (None: none yet)."""
        return self._decode_step_s

    def observe_step(
        self, num_prefill_tokens: int, step_s: float, num_decode_seqs: int = 0
    ) -> None:
        """Fold a finished step into the prefill rate and, if it decoded, the step time."""
        if step_s <= 0.0:
            return
        if num_decode_seqs > 0:
            previous = step_s if self._decode_step_s is None else self._decode_step_s
            self._decode_step_s = STEP_TIME_DECAY * previous + (1 - STEP_TIME_DECAY) * step_s
        if num_prefill_tokens > 0:
            self._prefill_tokens = RATE_DECAY * self._prefill_tokens + num_prefill_tokens
            self._prefill_seconds = RATE_DECAY * self._prefill_seconds + step_s

    def estimated_wait_s(self, queued: Iterable[QueuedRequest], num_prompt_tokens: int) -> float:
        """Seconds until a new prompt's prefill would end, behind the prefill work queued."""
        return self._wait_behind_s(backlog_tokens(queued), num_prompt_tokens)

    def _wait_behind_s(self, num_backlog_tokens: int, num_prompt_tokens: int) -> float:
        rate = self.prefill_tokens_per_s
        if rate is None:
            return 0.0  # nothing measured yet: admit, and learn from the steps
        return (num_backlog_tokens + num_prompt_tokens) / rate

    def check(
        self,
        queued: Iterable[QueuedRequest],
        num_prompt_tokens: int,
        waited_s: float,
        num_running: int = 0,
    ) -> OverloadedError | None:
        """The refusal for a request that has waited `waited_s` already, or None to admit."""
        return self.check_backlog(backlog_tokens(queued), num_prompt_tokens, waited_s, num_running)

    def check_backlog(
        self,
        num_backlog_tokens: int,
        num_prompt_tokens: int,
        waited_s: float,
        num_running: int = 0,
    ) -> OverloadedError | None:
        """`check`, given the prefill tokens queued ahead (`EngineSnapshot.backlog_tokens`)."""
        step_s = self._decode_step_s
        tpot_s = self.tpot_target_s
        if num_running and tpot_s is not None and step_s is not None and step_s > HEADROOM * tpot_s:
            self._count("tpot")
            return OverloadedError(
                f"decode steps take {step_s * 1000:.0f} ms, past the {tpot_s * 1000:.0f} ms "
                "TPOT target (--admission slo); retry later"
            )
        budget_s = HEADROOM * self.ttft_target_s - waited_s
        wait_s = self._wait_behind_s(num_backlog_tokens, num_prompt_tokens)
        if wait_s <= budget_s:
            return None
        self._count("ttft")
        return OverloadedError(
            f"the engine would start this request in about {wait_s:.1f} s, past the "
            f"{self.ttft_target_s * 1000:.0f} ms TTFT target (--admission slo); retry later"
        )

    def _count(self, reason: str) -> None:
        """Count a refusal; log the counts at most every REFUSAL_LOG_INTERVAL_S."""
        self.num_refused += 1
        self.num_refused_by_reason[reason] += 1
        self._num_unlogged += 1
        now = time.monotonic()
        if now - self._last_log >= REFUSAL_LOG_INTERVAL_S:
            rate = self.prefill_tokens_per_s
            step_s = self._decode_step_s
            logger.warning(
                "admission refused %d request(s) (since start: %d by TTFT, %d by TPOT); "
                "prefill %s tokens/s, decode steps %s ms",
                self._num_unlogged,
                self.num_refused_by_reason["ttft"],
                self.num_refused_by_reason["tpot"],
                "?" if rate is None else f"{rate:.0f}",
                "?" if step_s is None else f"{step_s * 1000:.0f}",
            )
            self._last_log = now
            self._num_unlogged = 0


def admission_for(options: ServeOptions) -> Admission | None:
    """The daemon's admission policy: SLO admission with `--admission slo`, else none."""
    if options.admission != "slo" or options.slo_ttft_ms is None:
        return None
    tpot_s = None if options.slo_tpot_ms is None else options.slo_tpot_ms / 1000
    return Admission(options.slo_ttft_ms / 1000, tpot_s)
