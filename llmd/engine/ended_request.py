"""A finished request's final state, copied on the engine's thread into frozen data.

The daemon's text thread builds a request's last message from it while the engine moves
on: a live `Request` can still change after it finished (an async step's last update, the
tokens kept after a stop string), so the live object never crosses threads. Pure standard
library.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TypeVar

from llmd.engine.request import FinishReason, Request, RequestTimes
from llmd.wait_breakdown import WaitBreakdown

EndedT = TypeVar("EndedT", "EndedTimes", "EndedRequest")


@dataclass(frozen=True)
class EndedTimes:
    """The request's monotonic timestamps, as `RequestTimes` held them when it ended."""

    arrival: float
    first_scheduled: float | None
    first_token: float | None
    token_times: tuple[float, ...]
    finished: float | None

    @classmethod
    def of(cls, times: RequestTimes) -> EndedTimes:
        """Copy `times` now (the token times into a tuple)."""
        return _copy(cls, times, token_times=tuple(times.token_times))


@dataclass(frozen=True)
class EndedRequest:
    """How a request ended, its token counts, timestamps and wait breakdown.

    Every field but `times` and `waits` is the `Request` attribute of the same name.
    """

    request_id: str
    finish_reason: FinishReason | None
    stop_reason: int | str | None
    error_message: str | None
    num_prompt_tokens: int
    num_output_tokens: int
    num_cached_tokens: int
    num_preemptions: int
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    times: EndedTimes
    waits: WaitBreakdown

    @classmethod
    def of(cls, request: Request) -> EndedRequest:
        """Copy `request` now (on the thread that owns it)."""
        return _copy(
            cls, request, times=EndedTimes.of(request.times), waits=request.waits.breakdown(request)
        )


def _copy(cls: type[EndedT], source: object, **converted: object) -> EndedT:
    """The dataclass `cls` with each field `source`'s attribute of the same name, except the
    `converted` ones, given as they must be stored (frozen copies of mutable values)."""
    copied = {
        field.name: getattr(source, field.name)
        for field in fields(cls)  # type: ignore[arg-type]
        if field.name not in converted
    }
    return cls(**copied, **converted)
