"""A request's last message: `finished` with its usage, timings and wait breakdown.

Built on the text thread from the request's frozen final state (`EndedRequest`) and its
text-side state; one log line per request says how it ended and why it waited.
"""

from __future__ import annotations

import logging

from llmd.daemon.engine_loop import label_text
from llmd.daemon.live_request import LiveRequest
from llmd.daemon.prompt_echo import take_prompt_fields
from llmd.engine.ended_request import EndedRequest
from llmd.engine.request import FinishReason
from llmd.outputs import RequestMetrics
from llmd.protocol import Finished
from llmd.wait_breakdown import WAIT_REASONS

logger = logging.getLogger("llmd.daemon.requests")

TIMING_NAMES = ("queue", "prefill", "ttft", "decode", "tpot", "e2e")


def finished_message(
    live: LiveRequest,
    request: EndedRequest,
    metrics: RequestMetrics,
    reason: str,
    stop_reason: int | str | None,
) -> Finished:
    """The `finished` message of a request that ended (not by an error)."""
    return Finished(
        id=live.client_id,
        finish_reason=reason,
        stop_reason=stop_reason,
        token_ids=live.output_token_ids,
        usage={
            "prompt_tokens": request.num_prompt_tokens,
            "completion_tokens": len(live.output_token_ids),
            "cached_tokens": request.num_cached_tokens,
        },
        timings={
            "queue": metrics.queue_time,
            "prefill": metrics.prefill_time,
            "ttft": metrics.ttft,
            "decode": metrics.decode_time,
            "tpot": metrics.tpot,
            "e2e": metrics.e2e,
        },
        text=None if live.stream else live.text.text,
        logprobs=None if live.stream else live.logprobs,
        num_preemptions=request.num_preemptions,
        breakdown=metrics.waits.to_dict(),
        spec_decode=None
        if not metrics.num_drafts
        else {
            "num_drafts": metrics.num_drafts,
            "num_draft_tokens": metrics.num_draft_tokens,
            "num_accepted_tokens": metrics.num_accepted_tokens,
        },
        **take_prompt_fields(live),
    )


def unstarted_abort_message(client_id: str, is_streaming: bool) -> Finished:
    """The last message of a request aborted before the engine ever saw it."""
    return Finished(
        id=client_id,
        finish_reason=FinishReason.ABORT.value,
        stop_reason=None,
        token_ids=[],
        usage={"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0},
        timings=dict.fromkeys(TIMING_NAMES),
        text=None if is_streaming else "",
    )


def log_finished(live: LiveRequest, metrics: RequestMetrics, reason: str) -> None:
    """One line per finished request (debug; a warning if it failed): how it ended, its
    TTFT and why it waited, naming it by engine id and label."""
    level = logging.WARNING if reason == FinishReason.ERROR.value else logging.DEBUG
    if not logger.isEnabledFor(level):
        return
    waits = metrics.waits
    waited = ", ".join(
        f"{name} {waits.wait_s[name]:.3f}s" for name in WAIT_REASONS if waits.wait_s[name] > 0
    )
    ttft = "-" if metrics.ttft is None else f"{metrics.ttft:.3f}s"
    logger.log(
        level,
        "request %s%s finished (%s): %d tokens, ttft %s, waited %s; %d prefill chunk(s), "
        "%d cached tokens, %d preemption(s)",
        live.engine_id,
        label_text(live.label),
        reason,
        metrics.num_generated_tokens,
        ttft,
        waited or "0s",
        waits.num_prefill_chunks,
        waits.num_cached_tokens,
        waits.num_preemptions,
    )
