"""The `timings` object of a choice (llmd's extension, asked for with `return_timings`).

llama.cpp returns `timings` and vLLM an optional per-request `metrics`; llmd's says, in
seconds, how long each phase took and why the request waited: the daemon's timings and
its wait breakdown (docs/protocol.md), flattened into one object.
"""

from __future__ import annotations

from llmd.client import Completion, Finished
from llmd.wait_breakdown import WaitBreakdown

PHASES = ("queue", "prefill", "ttft", "decode", "tpot", "e2e")


def timings_object(
    request_id: str | None, timings: dict[str, float | None], waits: WaitBreakdown | None
) -> dict[str, object]:
    """One choice's timings: its daemon request id, phase seconds and wait breakdown."""
    breakdown = (waits or WaitBreakdown()).to_dict()
    return {
        "request_id": request_id,
        **{f"{phase}_s": timings.get(phase) for phase in PHASES},
        **breakdown,
    }


def completion_timings(completion: Completion) -> dict[str, object]:
    """The timings of a blocking request's choice."""
    return timings_object(completion.request_id, completion.timings, completion.waits)


def finished_timings(request_id: str | None, finished: Finished) -> dict[str, object]:
    """The timings of a streamed choice, from its `finished` message."""
    return timings_object(request_id, finished.timings, WaitBreakdown.from_dict(finished.breakdown))
