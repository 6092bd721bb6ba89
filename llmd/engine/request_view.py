"""A request as the stats see it: one row of the request table, or its whole timeline.

Copied from a live `Request` on the engine's thread into frozen data, so the row can be
packed on another thread while the request moves on; pure standard library.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmd.engine.request import Request
from llmd.engine.wait_tracker import WaitTracker
from llmd.wait_breakdown import WaitBreakdown

MAX_TIMELINE_POINTS = 256
"""Most events and token times in a timeline (the newest are kept)."""


@dataclass(frozen=True)
class RequestRow:
    """One row of the request table (the keys of docs/protocol.md's `requests`)."""

    request_id: str
    label: str | None
    state: str
    waiting_on: str | None
    wait_s: float
    finish_reason: str | None
    priority: int
    num_prompt_tokens: int
    num_generated_tokens: int
    max_tokens: int
    num_computed_tokens: int
    num_cached_tokens: int
    num_blocks: int
    num_preemptions: int
    prefill_progress: float
    decode_progress: float
    age_s: float
    ttft_s: float | None

    def to_dict(self) -> dict[str, Any]:
        """The row's wire form."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class RequestTimeline:
    """A request's lifecycle in seconds since its arrival, and why it waited."""

    request_id: str
    label: str | None
    state: str
    waiting_on: str | None
    waits: WaitBreakdown
    age_s: float
    first_scheduled_s: float | None
    first_token_s: float | None
    finished_s: float | None
    events: tuple[tuple[float, str, int], ...]
    """(seconds, kind, tokens) of the newest MAX_TIMELINE_POINTS events."""
    token_times_s: tuple[float, ...]
    num_tokens_total: int

    def to_dict(self) -> dict[str, Any]:
        """The timeline's wire form."""
        return {
            **self.__dict__,
            "waits": self.waits.to_dict(),
            "events": [list(event) for event in self.events],
            "token_times_s": list(self.token_times_s),
        }


def request_row(request: Request, now: float, tracker: WaitTracker) -> RequestRow:
    """The row of `request` as of `now`."""
    times = request.times
    max_tokens = request.sampling_params.max_tokens
    num_prompt = request.num_prompt_tokens
    prefill_progress = min(1.0, request.num_computed_tokens / num_prompt) if num_prompt else 1.0
    return RequestRow(
        request_id=request.request_id,
        label=request.label,
        state=request.status.value,
        waiting_on=tracker.current_reason(request),
        wait_s=tracker.total_wait_s(request, now),
        finish_reason=None if request.finish_reason is None else request.finish_reason.value,
        priority=request.priority,
        num_prompt_tokens=num_prompt,
        num_generated_tokens=request.num_output_tokens,
        max_tokens=max_tokens,
        num_computed_tokens=request.num_computed_tokens,
        num_cached_tokens=request.num_cached_tokens,
        num_blocks=len(request.block_ids),
        num_preemptions=request.num_preemptions,
        prefill_progress=prefill_progress,
        decode_progress=request.num_output_tokens / max_tokens,
        age_s=(times.finished or now) - times.arrival,
        ttft_s=None if times.first_token is None else times.first_token - times.arrival,
    )


def request_timeline(request: Request, now: float, tracker: WaitTracker) -> RequestTimeline:
    """The timeline of `request` as of `now`."""
    times = request.times
    arrival = times.arrival

    def since(moment: float | None) -> float | None:
        return None if moment is None else moment - arrival

    return RequestTimeline(
        request_id=request.request_id,
        label=request.label,
        state=request.status.value,
        waiting_on=tracker.current_reason(request),
        waits=tracker.breakdown(request, now),
        age_s=(times.finished or now) - arrival,
        first_scheduled_s=since(times.first_scheduled),
        first_token_s=since(times.first_token),
        finished_s=since(times.finished),
        events=tuple(
            (moment - arrival, kind, num_tokens)
            for moment, kind, num_tokens in request.events[-MAX_TIMELINE_POINTS:]
        ),
        token_times_s=tuple(t - arrival for t in times.token_times[-MAX_TIMELINE_POINTS:]),
        num_tokens_total=len(times.token_times),
    )
