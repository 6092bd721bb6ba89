"""Ending requests with an error: every request of a failed plan, or one request alone.

The engine's one failure path (a step that raised, a stalled queue head) goes through these,
so a failed request always ends the same way: finished as `error`, with the exception named
in its message, and one update for whoever serves it.
"""

from __future__ import annotations

from llmd.engine.request import FinishReason
from llmd.engine.scheduler import Scheduler
from llmd.engine.scheduler_output import SchedulerOutput
from llmd.engine.step_result import RequestUpdate


def fail_request(scheduler: Scheduler, request_id: str, error: Exception) -> RequestUpdate | None:
    """End one request with `error`; None when it had already finished."""
    request = scheduler.finish_request(request_id, FinishReason.ERROR)
    if request is None:
        return None
    request.error_message = f"{type(error).__name__}: {error}"
    return RequestUpdate(request, [])


def fail_plan(scheduler: Scheduler, plan: SchedulerOutput, error: Exception) -> list[RequestUpdate]:
    """End every request of a plan that failed on the device with `error`."""
    updates = (fail_request(scheduler, c.request.request_id, error) for c in plan.chunks)
    return [update for update in updates if update is not None]
