"""Speculative decoding's figures over a window, from the counts of successive snapshots.

The daemon's speculation counts are totals since start, which stop following the workload
after a while; the difference between the newest snapshot and one a window earlier says
what speculation does now, and per decode step what it buys (backoff and opted-out
requests included, which the acceptance length leaves out).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from llmd.protocol.metrics_sections import TotalsSection


@dataclass(frozen=True)
class SpecCounts:
    """The cumulative counts of one snapshot that the windowed figures are made of."""

    time: float
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    decode_seqs: int = 0
    """Requests' decode steps (a verify chunk is one), summed over engine steps."""

    @classmethod
    def of(cls, time: float, totals: TotalsSection) -> SpecCounts:
        """The counts in a snapshot's totals, taken at `time`."""
        return cls(
            time,
            totals.spec_drafts,
            totals.spec_draft_tokens,
            totals.spec_accepted_tokens,
            totals.decode_seqs,
        )

    def follows(self, earlier: SpecCounts) -> bool:
        """True unless a count went down (a restarted daemon starts its totals again)."""
        return (
            self.drafts >= earlier.drafts
            and self.draft_tokens >= earlier.draft_tokens
            and self.accepted_tokens >= earlier.accepted_tokens
            and self.decode_seqs >= earlier.decode_seqs
        )


@dataclass(frozen=True)
class SpecWindow:
    """Speculation between two snapshots; a figure is None when the window has no count to
    divide by (no draft, or no decode step)."""

    span_s: float
    acceptance_rate: float | None
    """Draft tokens accepted / draft tokens verified."""
    mean_acceptance_length: float | None
    """Tokens a verify step emitted: 1 + accepted / drafts."""
    tokens_per_decode_step: float | None
    """Tokens a request's decode step emitted, drafted or not: 1 + accepted / decode steps
    (1.00 without speculation)."""

    @classmethod
    def between(cls, first: SpecCounts, last: SpecCounts) -> SpecWindow:
        """The figures of the counts added from `first` to `last`."""
        drafts = last.drafts - first.drafts
        draft_tokens = last.draft_tokens - first.draft_tokens
        accepted = last.accepted_tokens - first.accepted_tokens
        decode_seqs = last.decode_seqs - first.decode_seqs
        return cls(
            span_s=last.time - first.time,
            acceptance_rate=accepted / draft_tokens if draft_tokens else None,
            mean_acceptance_length=1 + accepted / drafts if drafts else None,
            tokens_per_decode_step=1 + accepted / decode_seqs if decode_seqs else None,
        )


class SpecHistory:
    """The snapshots' counts over the last `window_s` seconds, and one from just before."""

    def __init__(self) -> None:
        self._samples: deque[SpecCounts] = deque()

    def add(self, counts: SpecCounts, window_s: float) -> None:
        """Take a snapshot's counts; drop those a full window old (keeping the window's start)
        and, after a restart, all of the daemon before it."""
        samples = self._samples
        if samples and not counts.follows(samples[-1]):
            samples.clear()
        samples.append(counts)
        while len(samples) > 1 and samples[1].time <= counts.time - window_s:
            samples.popleft()

    def window(self) -> SpecWindow | None:
        """Speculation from the oldest sample kept to the newest (None before two samples)."""
        if len(self._samples) < 2:
            return None
        return SpecWindow.between(self._samples[0], self._samples[-1])
