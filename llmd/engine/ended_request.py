"""A finished request's final state, copied on the engine's thread into frozen data.

The daemon's text thread builds a request's last message from it while the engine moves
on: a live `Request` can still change after it finished (an async step's last update, the
tokens kept after a stop string), so the live object never crosses threads. Pure standard
library.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmd.engine.request import FinishReason, Request
from llmd.wait_breakdown import WaitBreakdown


@dataclass(frozen=True)
class EndedTimes:
    """The request's monotonic timestamps, as `RequestTimes` held them when it ended."""

    arrival: float
    first_scheduled: float | None
    first_token: float | None
    token_times: tuple[float, ...]
    finished: float | None


@dataclass(frozen=True)
class EndedRequest:
    """How a request ended, its token counts, timestamps and wait breakdown."""

    request_id: str
    finish_reason: FinishReason | None
    stop_reason: int | str | None
    error_message: str | None
    num_prompt_tokens: int
    num_output_tokens: int
    num_cached_tokens: int
    num_preemptions: int
    times: EndedTimes
    waits: WaitBreakdown

    @classmethod
    def of(cls, request: Request) -> EndedRequest:
        """Copy `request` now (on the thread that owns it)."""
        times = request.times
        return cls(
            request_id=request.request_id,
            finish_reason=request.finish_reason,
            stop_reason=request.stop_reason,
            error_message=request.error_message,
            num_prompt_tokens=request.num_prompt_tokens,
            num_output_tokens=request.num_output_tokens,
            num_cached_tokens=request.num_cached_tokens,
            num_preemptions=request.num_preemptions,
            times=EndedTimes(
                times.arrival,
                times.first_scheduled,
                times.first_token,
                tuple(times.token_times),
                times.finished,
            ),
            waits=request.waits.breakdown(request),
        )
