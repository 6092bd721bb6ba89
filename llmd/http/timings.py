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
    request_id: str | None,
    timings: dict[str, float | None],
    waits: WaitBreakdown | None,
    spec_decode: dict[str, int] | None = None,
) -> dict[str, object]:
    """One choice's timings: its daemon request id, phase seconds and wait breakdown, and
    with speculative decoding its drafts, accepted tokens and mean acceptance length."""
    breakdown = (waits or WaitBreakdown()).to_dict()
    result: dict[str, object] = {
        "request_id": request_id,
        **{f"{phase}_s": timings.get(phase) for phase in PHASES},
        **breakdown,
    }
    if spec_decode:
        num_drafts = spec_decode.get("num_drafts", 0)
        num_accepted = spec_decode.get("num_accepted_tokens", 0)
        result["spec_num_drafts"] = num_drafts
        result["spec_num_draft_tokens"] = spec_decode.get("num_draft_tokens", 0)
        result["spec_num_accepted_tokens"] = num_accepted
        result["spec_mean_acceptance_length"] = (
            1 + num_accepted / num_drafts if num_drafts else None
        )
    return result


def completion_timings(completion: Completion) -> dict[str, object]:
    """The timings of a blocking request's choice."""
    return timings_object(
        completion.request_id, completion.timings, completion.waits, completion.spec_decode
    )


def finished_timings(request_id: str | None, finished: Finished) -> dict[str, object]:
    """The timings of a streamed choice, from its `finished` message."""
    waits = WaitBreakdown.from_dict(finished.breakdown)
    return timings_object(request_id, finished.timings, waits, finished.spec_decode)
