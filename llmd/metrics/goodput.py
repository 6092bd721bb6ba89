"""Goodput: completed requests per second that met the latency SLOs, and their fraction.

Throughput alone rewards a server that finishes many requests too slowly to be useful;
goodput counts only requests whose TTFT and TPOT were within the configured targets.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from llmd.metrics.rate import RateMeter
from llmd.protocol.metrics_sections import GoodputSection


class GoodputTracker:
    """Counts completed requests, and those within `slo_ttft_s` and `slo_tpot_s`, over a window.

    An SLO of None is not enforced; a request with a single output token has no TPOT and
    meets any TPOT target.
    """

    def __init__(
        self,
        slo_ttft_s: float | None = None,
        slo_tpot_s: float | None = None,
        window_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.slo_ttft_s = slo_ttft_s
        self.slo_tpot_s = slo_tpot_s
        self._completed = RateMeter(window_s, clock=clock)
        self._good = RateMeter(window_s, clock=clock)

    def meets_slo(self, ttft: float | None, tpot: float | None) -> bool:
        """True when a request with these latencies is within every enforced SLO."""
        if self.slo_ttft_s is not None and (ttft is None or ttft > self.slo_ttft_s):
            return False
        return self.slo_tpot_s is None or tpot is None or tpot <= self.slo_tpot_s

    def record(self, ttft: float | None, tpot: float | None, now: float | None = None) -> bool:
        """Count one completed request; returns whether it met the SLOs."""
        is_good = self.meets_slo(ttft, tpot)
        self._completed.add(1, now)
        if is_good:
            self._good.add(1, now)
        return is_good

    def summary(self, now: float | None = None) -> GoodputSection:
        """Goodput (requests/s), the fraction meeting the SLOs, and the window's counts."""
        num_completed = int(self._completed.total(now))
        num_good = int(self._good.total(now))
        return GoodputSection(
            slo_ttft_ms=None if self.slo_ttft_s is None else self.slo_ttft_s * 1000,
            slo_tpot_ms=None if self.slo_tpot_s is None else self.slo_tpot_s * 1000,
            requests_per_s=self._good.rate(now),
            fraction=num_good / num_completed if num_completed else None,
            num_good=num_good,
            num_completed=num_completed,
        )
