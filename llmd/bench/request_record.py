"""What the benchmark measured about one request, client-side, in seconds since the run began.

Kept raw (every token arrival time) so the JSON output can be re-analysed and the
summaries are derived from one place.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field, fields
from typing import Any

OK = "ok"
FAILED = "failed"
ABORTED = "aborted"


@dataclass
class RequestRecord:
    """One benchmark request: when it was sent, when each output arrived, how it ended."""

    index: int
    """Position in the dataset (sessions' turns are numbered in the order they are sent)."""
    scheduled_s: float
    """When the arrival process wanted it sent."""
    session: int = 0
    """Which session of the dataset (single-turn datasets: one request each)."""
    turn: int = 0
    """Which turn of its session, from 0."""
    sent_s: float = 0.0
    first_token_s: float | None = None
    finished_s: float | None = None
    token_arrival_s: list[float] = field(default_factory=list)
    """Arrival time of each streamed delta that carried tokens."""
    num_prompt_tokens: int = 0
    num_output_tokens: int = 0
    num_cached_tokens: int = 0
    status: str = OK
    """ok, failed (an error reply or a lost connection) or aborted (finish reason abort)."""
    finish_reason: str | None = None
    error: str | None = None
    server_timings: dict[str, float | None] = field(default_factory=dict)
    """The daemon's own per-request timings (queue, prefill, ttft, decode, tpot, e2e)."""
    server_waits: dict[str, Any] | None = None
    """The server's wait breakdown when it returns one (llmd: docs/protocol.md, "Wait
    breakdown"): seconds and steps per wait reason, prefill chunks, prefix hits."""

    def note_output(self, arrived_s: float) -> None:
        """Record one streamed delta that carried output, arriving at `arrived_s`."""
        if self.first_token_s is None:
            self.first_token_s = arrived_s
        self.token_arrival_s.append(arrived_s)

    def end(self, finished_s: float, finish_reason: str) -> None:
        """Record how the request ended: aborted unless it stopped or reached its length."""
        self.finished_s = finished_s
        self.finish_reason = finish_reason
        if finish_reason not in ("stop", "length"):
            self.status = ABORTED

    def fail(self, error: str, finished_s: float | None = None) -> None:
        """Mark the request failed with `error`, and when it ended if it did."""
        self.status = FAILED
        self.error = error
        if finished_s is not None:
            self.finished_s = finished_s

    @property
    def is_ok(self) -> bool:
        """True when the request completed (stop or length)."""
        return self.status == OK

    @property
    def ttft(self) -> float | None:
        """Seconds from send to the first output token."""
        return None if self.first_token_s is None else self.first_token_s - self.sent_s

    @property
    def e2e(self) -> float | None:
        """Seconds from send to the last message."""
        return None if self.finished_s is None else self.finished_s - self.sent_s

    @property
    def tpot(self) -> float | None:
        """Mean seconds per output token after the first (None with fewer than 2 tokens)."""
        if self.num_output_tokens < 2 or self.ttft is None or self.e2e is None:
            return None
        return (self.e2e - self.ttft) / (self.num_output_tokens - 1)

    @property
    def itl(self) -> list[float]:
        """Gaps between consecutive streamed deltas."""
        times = self.token_arrival_s
        return [later - earlier for earlier, later in itertools.pairwise(times)]

    def to_json(self) -> dict[str, Any]:
        """Every raw field plus the derived latencies."""
        return {**asdict(self), "ttft": self.ttft, "tpot": self.tpot, "e2e": self.e2e}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RequestRecord:
        """Rebuild a record from its `to_json` form (derived latencies are recomputed)."""
        names = {item.name for item in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in names})
