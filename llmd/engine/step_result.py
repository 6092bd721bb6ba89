"""What one engine step produced: `RequestUpdate`s, its `StepStats`, an idle-point pool error.

Shared by `LLMEngine` and `AsyncStepper`, so that neither imports the other for its
result types and both report a step's figures the same way (`step_stats`).
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

    Shared by the synchronous step and the async stepper, so both report the same figures.
    """
    num_decode = plan.num_decode_tokens
    return StepStats(
        started_at=started,
        num_prefill_tokens=plan.num_prefill_tokens,
        num_decode_tokens=num_decode,
        num_prefill_seqs=len(plan.chunks) - num_decode,
        num_decode_seqs=num_decode,
        num_preempted=len(plan.preempted_request_ids),
        num_running=len(scheduler.running),
        num_waiting=len(scheduler.waiting),
        schedule_s=scheduled - started,
        prepare_s=output.prepare_s,
        forward_s=output.forward_s,
        sample_s=output.sample_s,
        total_s=finished_at - started,
        kv_context_tokens=kv_context_tokens,
        num_sampling_seqs=sum(1 for chunk in plan.chunks if chunk.is_sampling),
        device_gap_s=output.device_gap_s,
    )
