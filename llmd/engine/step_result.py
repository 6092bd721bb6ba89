"""What one engine step produced: `RequestUpdate`s, its `StepStats`, an idle-point pool error.

Pure functions of a plan and its requests (`request_updates`, `step_stats`), so that the
synchronous and the pipelined step report tokens, ends and figures by the same rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmd.engine.request import Request
from llmd.engine.step_stats import StepStats
from llmd.errors import KVCacheIntegrityError
from llmd.outputs import TokenLogprob

if TYPE_CHECKING:
    from llmd.engine.scheduler import Scheduler
    from llmd.engine.scheduler_output import SchedulerOutput
    from llmd.runner.pending_step import RunnerOutput


@dataclass
class RequestUpdate:
    """New tokens of one request from one step, and whether it has finished."""

    request: Request
    new_token_ids: list[int]
    new_logprobs: list[TokenLogprob] | None = None
    prompt_logprobs: list[TokenLogprob | None] | None = None
    """Every prompt token's entry, on the update of a request's first output token (when
    it asked for them)."""

    @property
    def is_finished(self) -> bool:
        """True when the request ended in this step."""
        return self.request.is_finished


@dataclass
class StepResult:
    """Everything one step produced."""

    updates: list[RequestUpdate]
    stats: StepStats | None
    integrity_error: KVCacheIntegrityError | None = None
    """Set when the idle-point pool check failed this step (the pool was then rebuilt)."""


def request_updates(
    plan: SchedulerOutput,
    output: RunnerOutput,
    ended_before: set[str],
    reported_ended: set[str],
) -> tuple[list[RequestUpdate], set[str]]:
    """The updates of a plan whose samples `output` holds (just applied), and the ids it ended.

    One per sampling request (its new token) and one without tokens per request that
    ended from outside while the step ran (`ended_before`), unless its end was reported
    already (`reported_ended`: the previous apply's ids, whose next sample a pipelined
    step had launched meanwhile), so that every request ends exactly once. The step's
    prompt logprobs (by request id) are recorded first; the update of a request's first
    output token carries them all. A verify chunk's update carries its accepted run (the
    tokens after the chunk's first, up to a stop) and their logprobs.
    """
    logprobs, prompt_logprobs = output.logprobs, output.prompt_logprobs
    verified_logprobs = output.verified_logprobs
    updates = []
    ended_now: set[str] = set()
    for chunk in plan.chunks:
        request = chunk.request
        request_id = request.request_id
        if prompt_logprobs and request_id in prompt_logprobs:
            request.add_prompt_logprobs(*prompt_logprobs[request_id])
        if request_id in ended_before:
            if request_id not in reported_ended:
                updates.append(RequestUpdate(request, []))
            continue
        if not chunk.is_sampling:
            continue
        if chunk.num_draft_tokens:
            new_token_ids = request.all_token_ids[chunk.num_computed_tokens + 1 :]
            run_logprobs = verified_logprobs.get(request_id)
            if run_logprobs is not None:
                run_logprobs = run_logprobs[: len(new_token_ids)]
            updates.append(RequestUpdate(request, new_token_ids, run_logprobs))
            if request.is_finished:
                ended_now.add(request_id)
            continue
        logprob = logprobs.get(request_id)
        new_logprobs = None if logprob is None else [logprob]
        update = RequestUpdate(request, [request.all_token_ids[-1]], new_logprobs)
        if request.prompt_logprobs is not None and request.num_output_tokens == 1:
            update.prompt_logprobs = list(request.prompt_logprobs)
        updates.append(update)
        if request.is_finished:
            ended_now.add(request_id)
    return updates, ended_now


def step_stats(
    plan: SchedulerOutput,
    scheduler: Scheduler,
    output: RunnerOutput,
    started: float,
    scheduled: float,
    finished_at: float,
    kv_context_tokens: int,
) -> StepStats:
    """A step's token counts and phase times, from its plan and the runner's output.

    Shared by the synchronous and the pipelined step, so both report the same figures.
    Verify chunks (speculative decoding) count as decode work: their tokens and sequences;
    the speculator's counts of the step just applied are taken with them.
    """
    speculator = scheduler.speculator
    spec_counts = None if speculator is None else speculator.take_step_counts()
    num_verify_seqs = 0
    if plan.num_verify_tokens:
        num_verify_seqs = sum(1 for chunk in plan.chunks if chunk.num_draft_tokens)
    num_decode = plan.num_decode_tokens + num_verify_seqs
    return StepStats(
        started_at=started,
        num_prefill_tokens=plan.num_prefill_tokens,
        num_decode_tokens=plan.num_decode_tokens + plan.num_verify_tokens,
        num_prefill_seqs=len(plan.chunks) - num_decode,
        num_decode_seqs=num_decode,
        num_preempted=len(plan.preempted_request_ids),
        num_running=len(scheduler.running),
        num_waiting=len(scheduler.waiting),
        schedule_s=scheduled - started,
        prepare_s=output.prepare_s,
        forward_s=output.forward_s,
        sample_s=output.sample_s,
        grammar_s=0.0 if plan.grammar_bitmask is None else plan.grammar_bitmask.fill_s,
        total_s=finished_at - started,
        kv_context_tokens=kv_context_tokens,
        num_sampling_seqs=sum(1 for chunk in plan.chunks if chunk.is_sampling),
        device_gap_s=output.device_gap_s,
        num_experts_touched=output.num_experts_touched,
        spec_decode=spec_counts,
    )
