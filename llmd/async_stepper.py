"""Async scheduling: the host schedules and prepares step N+1 while the device runs step N.

Each `step()` schedules a plan, launches it (forward and sampling queued on the device),
then reads the previous launch's samples (waiting for that launch only), applies them, and
counts the new launch's tokens as computed with a placeholder for each sample. A decode's
input token thus comes from the device tensor of the previous step, and the host never
synchronizes the device in the steady state. Outputs lag one step; a request that stops
keeps no token sampled after its stop (the extra step's token is discarded).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmd.engine.scheduler_output import SchedulerOutput
from llmd.engine.step_result import RequestUpdate, StepResult, step_stats
from llmd.engine.step_stats import StepStats
from llmd.errors import SchedulerStallError

if TYPE_CHECKING:
    from llmd.llm_engine import LLMEngine
    from llmd.runner.pending_step import PendingStep, RunnerOutput

logger = logging.getLogger(__name__)


@dataclass
class InFlightStep:
    """A launched plan whose samples are not applied yet."""

    plan: SchedulerOutput
    pending: PendingStep
    pending_ids: set[str]
    """Requests given a placeholder token for this step's sample."""
    kv_context_tokens: int


class AsyncStepper:
    """Runs the engine's steps with one plan always in flight on the device."""

    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self.in_flight: InFlightStep | None = None
        self._finished_last_step: set[str] = set()
        """Requests finished when the previous step was applied: their next sample, if
        one was launched meanwhile, is discarded without a second finish update."""

    @property
    def has_in_flight(self) -> bool:
        """True while a launched step waits to be applied."""
        return self.in_flight is not None

    def step(self) -> StepResult:
        """Schedule and launch one plan, then apply the previous one's samples."""
        engine = self.engine
        scheduler = engine.scheduler
        started = time.monotonic()
        try:
            plan = scheduler.schedule()
        except SchedulerStallError as error:  # never step empty plans forever: fail the head
            logger.error("scheduler stalled: %s", error)
            update = engine.fail_request(error.request_id, error)
            return StepResult([update] if update is not None else [], None)
        scheduled = time.monotonic()
        launched = None
        updates: list[RequestUpdate] = []
        if not plan.is_empty:
            kv_context_tokens = sum(
                chunk.request.num_computed_tokens + chunk.num_new_tokens for chunk in plan.chunks
            )
            try:
                launched = engine.runner.launch(plan)
            except Exception as error:  # a bad batch fails its own requests only
                logger.exception("step failed; failing its %d requests", len(plan.chunks))
                updates += engine.fail_plan(plan, error)
        previous, self.in_flight = self.in_flight, None
        stats = None
        if previous is not None:
            try:
                output = previous.pending.resolve()
            except Exception as error:
                logger.exception("reading a step's samples failed")
                updates += engine.fail_plan(previous.plan, error)
                if launched is not None:  # its inputs came from the failed step
                    updates += engine.fail_plan(plan, error)
                    launched = None
            else:
                updates += self._apply(previous, output)
                stats = self._stats(previous, output, started, scheduled)
        if launched is not None:
            pending_ids = scheduler.advance_in_flight(plan)
            self.in_flight = InFlightStep(plan, launched, pending_ids, kv_context_tokens)
        elif previous is None and not updates:
            return StepResult([], None)
        integrity_error = None
        if not scheduler.has_unfinished_requests and self.in_flight is None:
            integrity_error = engine.check_pool_at_idle()  # idle point: the pool must be whole
        return StepResult(updates, stats, integrity_error)

    def _apply(self, step: InFlightStep, output: RunnerOutput) -> list[RequestUpdate]:
        """Apply a step's samples; one update per request that got a token or ended."""
        scheduler = self.engine.scheduler
        already_finished = {
            chunk.request.request_id for chunk in step.plan.chunks if chunk.request.is_finished
        }
        scheduler.resolve_in_flight(step.plan, output.sampled_token_ids, step.pending_ids)
        updates = []
        finished_now: set[str] = set()
        for chunk in step.plan.chunks:
            request = chunk.request
            request_id = request.request_id
            if request_id in already_finished:
                if request_id not in self._finished_last_step:
                    updates.append(RequestUpdate(request, []))  # ended from outside
                continue
            if not chunk.is_sampling:
                continue
            logprob = output.logprobs.get(request_id)
            updates.append(
                RequestUpdate(
                    request,
                    [request.all_token_ids[-1]],
                    [logprob] if logprob is not None else None,
                )
            )
            if request.is_finished:
                finished_now.add(request_id)
        self._finished_last_step = finished_now
        return updates

    def _stats(
        self, step: InFlightStep, output: RunnerOutput, started: float, scheduled: float
    ) -> StepStats:
        """The applied plan's token counts and phase times; `schedule_s`, `total_s` are this call's.

        `forward_s` is the applied step's launch plus the wait for its samples: with the
        device ahead of the host the wait tends to zero, which is the point.
        """
        return step_stats(
            step.plan, self.engine.scheduler, output, started, scheduled, time.monotonic(),
            step.kv_context_tokens,
        )  # fmt: skip
