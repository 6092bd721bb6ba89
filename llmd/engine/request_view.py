"""A request as the stats see it: one row of the request table, or its whole timeline.

Copied from a live `Request` on the engine's thread into the protocol's frozen rows, so
the row can be packed on another thread while the request moves on.
"""

from __future__ import annotations

from typing import TypedDict

from llmd.engine.request import Request
from llmd.engine.wait_tracker import WaitTracker
from llmd.protocol.engine_sections import RequestRow, RequestTimeline

MAX_TIMELINE_POINTS = 256
"""Most events and token times in a timeline (the newest are kept)."""


class RequestHeading(TypedDict):
    """The fields a row and a timeline both open with: the request, its state, its wait."""

    request_id: str
    label: str | None
    state: str
    waiting_on: str | None


def request_heading(request: Request, tracker: WaitTracker) -> RequestHeading:
    """The heading of `request` now: who it is, where it is, what holds it back."""
    return RequestHeading(
        request_id=request.request_id,
        label=request.label,
        state=request.status.value,
        waiting_on=tracker.current_reason(request),
    )


def request_row(request: Request, now: float, tracker: WaitTracker) -> RequestRow:
    """The row of `request` as of `now`."""
    times = request.times
    max_tokens = request.sampling_params.max_tokens
    num_prompt = request.num_prompt_tokens
    prefill_progress = min(1.0, request.num_computed_tokens / num_prompt) if num_prompt else 1.0
    return RequestRow(
        **request_heading(request, tracker),
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
        **request_heading(request, tracker),
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
