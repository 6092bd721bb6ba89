"""The engine: the one module that knows both the scheduler and the model runner.

Its step is schedule, run, apply, either synchronously or pipelined (async scheduling: plan
N+1 is launched before plan N's samples are applied); the two share one apply path, one
failure path and one idle-point pool check. The offline API and the daemon drive the same
engine and differ only in where requests come from and where tokens go.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Iterable

from llmd.batch_limits import USAGE_OFFLINE, resolve_batch_limits
from llmd.config import EngineConfig, SchedulerConfig, default_model_dir
from llmd.engine.block_manager import BlockManager
from llmd.engine.engine_snapshot import EngineFacts, EngineSnapshot, SnapshotScope
from llmd.engine.kv_events import KVEvent, KVEventLog
from llmd.engine.launched_step import LaunchedStep
from llmd.engine.prompt_checks import check_token_ids
from llmd.engine.request import FinishReason, Request
from llmd.engine.scheduler import Scheduler
from llmd.engine.scheduler_output import SchedulerOutput
from llmd.engine.servability import resolve_max_model_len
from llmd.engine.snapshot_collector import collect_snapshot
from llmd.engine.speculator import make_speculator
from llmd.engine.step_failure import fail_plan, fail_request
from llmd.engine.step_result import RequestUpdate, StepResult, request_updates, step_stats
from llmd.engine.step_stats import StepStats
from llmd.engine.tokenizer import load_model_tokenizer
from llmd.engine_facts import engine_facts
from llmd.errors import (
    CacheBusyError,
    InvalidParameterError,
    KVCacheIntegrityError,
    SchedulerStallError,
)
from llmd.models.loader import load_hf_config, model_shape, resolve_model_path
from llmd.runner.device import device_name, dtype_name, resolve_async_scheduling, resolve_device
from llmd.runner.model_runner import ModelRunner
from llmd.runner.pending_step import RunnerOutput
from llmd.sampling_params import SamplingParams
from llmd.structured.grammar_admission import GrammarAdmission
from llmd.structured.grammar_stats import GrammarStats

logger = logging.getLogger(__name__)


class LLMEngine:
    """Loads a model and turns requests into tokens, one scheduling step at a time."""

    def __init__(self, config: EngineConfig, usage: str = USAGE_OFFLINE) -> None:
        """Load `config`'s model; `usage` picks the unset batch limits' defaults."""
        config = resolve_batch_limits(config, resolve_device(config.device).type, usage)
        self.config = config
        self.usage = usage
        """offline or serve: whose defaults filled the unset batch limits."""
        model = config.model or default_model_dir()
        self.model_path = resolve_model_path(model)
        self.model_name = config.served_model_name or config.model or "llmd-default"
        self.hf_config = load_hf_config(self.model_path)
        self.shape = model_shape(self.hf_config)
        # The configured length, capped by the model's positions and any sliding window.
        self.max_model_len = resolve_max_model_len(config.max_model_len, self.shape.max_model_len)
        self.tokenizer, self.eos_token_ids = load_model_tokenizer(
            self.model_path, self.hf_config, config.tokenizer, config.skip_tokenizer_init
        )
        scheduler_config = SchedulerConfig.resolve(config, self.max_model_len)
        self.runner = ModelRunner(
            config, self.model_path, self.hf_config, self.shape, self.max_model_len,
            scheduler_config.max_num_batched_tokens,
        )  # fmt: skip
        self.device = str(self.runner.device)
        """The device the model runs on, as a string."""
        self.device_name = device_name(self.runner.device)
        """The GPU's name, or "cpu"."""
        self.dtype = dtype_name(self.runner.dtype)
        """The model's dtype name."""
        self.block_manager = BlockManager(
            self.runner.num_blocks, config.block_size, config.enable_prefix_caching
        )
        speculator = make_speculator(
            config, self.max_model_len, self.shape.vocab_size, self.runner.num_blocks
        )
        self.scheduler = Scheduler(scheduler_config, self.block_manager, speculator)
        self.async_scheduling = resolve_async_scheduling(
            config.async_scheduling, self.runner.device
        )
        self.grammars: GrammarAdmission | None = None
        """Structured outputs: compiles and admits constrained requests (made on first use)."""
        self.grammar_stats = GrammarStats()
        """Constrained requests, compiles and their times since start (zeros until used)."""
        self._in_flight: LaunchedStep | None = None
        """The pipelined step's launched plan, applied by the next step (async scheduling)."""
        self.num_overlapped_steps = 0
        """Steps launched while the previous one was in flight: host work the device hid."""
        self._finished_last_step: set[str] = set()
        """Requests the last apply finished: a sample of theirs launched meanwhile is
        discarded without a second finish update."""
        self.started_at = time.monotonic()
        self.num_integrity_errors = 0
        """KV-pool integrity violations found (and repaired) at idle points since start."""
        logger.info(
            "engine ready: model=%s device=%s dtype=%s blocks=%d x %d tokens max_model_len=%d",
            self.model_name,
            self.runner.device,
            dtype_name(self.runner.dtype),
            self.runner.num_blocks,
            config.block_size,
            self.max_model_len,
        )

    # ---------------------------------------------------------------- requests

    def enable_kv_events(self) -> None:
        """Record prefix-cache stores and evictions from now on (`--kv-events`)."""
        self.block_manager.kv_events = KVEventLog()

    def drain_kv_events(self) -> list[KVEvent]:
        """The KV-cache events since the last drain (none unless enabled)."""
        log = self.block_manager.kv_events
        return [] if log is None else log.drain()

    def add_request(
        self,
        prompt_token_ids: list[int],
        params: SamplingParams,
        request_id: str | None = None,
        priority: int = 0,
        arrival_time: float | None = None,
        label: str | None = None,
    ) -> Request:
        """Validate and queue a request; raises a typed error if it can never be served.

        `label` is the client's name for it (an HTTP X-Request-Id), for logs and stats.
        """
        check_token_ids(prompt_token_ids, params, self.shape.vocab_size)
        request = Request(
            request_id or uuid.uuid4().hex,
            prompt_token_ids,
            params,
            eos_token_ids=self.eos_token_ids,
            priority=priority,
            arrival_time=arrival_time,
            label=label,
        )
        if self.grammars is not None and request.request_id in self.grammars.compiling:
            # The scheduler checks its own ids; one compiling is not among them yet.
            raise InvalidParameterError(
                f"request id {request.request_id!r} is already in use", "request_id"
            )
        if params.structured_outputs is None:
            self.scheduler.add_request(request)
        else:
            self._add_constrained(request)
        return request

    def _add_constrained(self, request: Request) -> None:
        """Queue a request with structured outputs: its grammar compiles off this thread."""
        if self.tokenizer is None:
            raise InvalidParameterError(
                "needs the tokenizer, and this engine was started without one "
                "(skip_tokenizer_init)",
                "structured_outputs",
            )
        if self.grammars is None:
            self.grammars = GrammarAdmission.for_tokenizer(
                self.tokenizer, self.shape.vocab_size, self.eos_token_ids, self.grammar_stats
            )
        self.grammars.add(request, self.scheduler, time.monotonic())

    def abort_request(self, request_id: str) -> Request | None:
        """Abort a request wherever it is; its KV blocks are freed at once."""
        if self.grammars is not None and request_id in self.grammars.compiling:
            return self.grammars.abort(request_id)
        return self.scheduler.finish_request(request_id, FinishReason.ABORT)

    def finish_request(
        self,
        request_id: str,
        reason: FinishReason,
        stop_reason: int | str | None = None,
        num_output_tokens: int | None = None,
    ) -> Request | None:
        """End a request from outside the step loop (a matched stop string, an error).

        `num_output_tokens`: the generated tokens delivered; later samples are dropped.
        """
        return self.scheduler.finish_request(
            request_id, reason, stop_reason, num_output_tokens=num_output_tokens
        )

    def reset_after_warmup(self) -> None:
        """Forget a finished warm-up: every block free, no cached prefix, counters at zero."""
        if self.has_unfinished_requests():
            raise RuntimeError("reset_after_warmup while requests are unfinished")
        self.block_manager.rebuild()
        self.block_manager.reset_counters()
        self.scheduler.reset_counters()
        if self.runner.routing_stats is not None:
            self.runner.routing_stats.reset()
        self.num_integrity_errors = 0
        self.num_overlapped_steps = 0
        self.started_at = time.monotonic()

    def reset_prefix_cache(self) -> int:
        """Drop every cached prefix and return how many blocks were dropped (`/flush_cache`).

        Refused while any request is unfinished: its blocks stay cached, so the flush
        would leave a prefix behind.
        """
        if self.has_unfinished_requests():
            raise CacheBusyError("requests are running or waiting; flush once the engine is idle")
        return self.block_manager.reset_prefix_cache()

    def has_unfinished_requests(self) -> bool:
        """True while any request waits (for its grammar too) or runs, or a launched step is
        still to be applied."""
        return (
            self._in_flight is not None
            or self.scheduler.has_unfinished_requests
            or (self.grammars is not None and len(self.grammars.compiling) > 0)
        )

    # ---------------------------------------------------------------- step

    def step(self) -> StepResult:
        """Schedule, run and apply one step; a failing step fails only its own requests.

        With async scheduling the run is pipelined (`_run_pipelined`): outputs lag one step,
        but drafts need every token: a step in flight that verifies drafts, or that a decode
        would draft after (`Scheduler.wants_drafts`), is applied first, without overlap.
        """
        started = time.monotonic()
        updates: list[RequestUpdate] = []  # grammars compiled, then a step applied first
        if self.grammars is not None:
            updates = self.grammars.admit_ready(self.scheduler, started)
        stats, in_flight = None, self._in_flight
        if in_flight and (in_flight.plan.num_verify_tokens or self.scheduler.wants_drafts()):
            applied, stats = self._apply_in_flight(started, started)
            updates += applied
        try:  # a plan drafts only with no step in flight
            plan = self.scheduler.schedule(may_draft=self._in_flight is None)
        except SchedulerStallError as error:  # never step empty plans forever: fail the head
            logger.error("scheduler stalled: %s", error)
            update = fail_request(self.scheduler, error.request_id, error)
            return self._step_result(updates + ([] if update is None else [update]), stats)
        scheduled = time.monotonic()
        if plan.is_empty and (plan.finished_request_ids or plan.preempted_request_ids):
            self.runner.free(plan)  # no step will carry these ends to the runner
        if self.async_scheduling:
            result = self._run_pipelined(plan, started, scheduled)
        else:
            result = self._run_sync(plan, started, scheduled)
        if plan.is_empty and self._in_flight is None and self.grammars is not None:
            self.grammars.wait_if_idle()  # only compiles pending: do not spin
        result.updates[:0] = updates
        result.stats = result.stats or stats  # one at most: none was in flight after it
        return result

    def _run_sync(self, plan: SchedulerOutput, started: float, scheduled: float) -> StepResult:
        """Run a plan to the end, then apply its samples."""
        if plan.is_empty:
            return StepResult([], None)
        launched = LaunchedStep.of(plan)
        try:
            self._attach_masks(plan)
            output = self.runner.execute(plan)
        except Exception as error:  # a bad batch must not take the engine down
            return self._step_result(self._fail(error, plan), None)
        return self._step_result(*self._apply(launched, output, started, scheduled))

    def _run_pipelined(self, plan: SchedulerOutput, started: float, scheduled: float) -> StepResult:
        """Launch a plan, then apply the previous one's samples (async scheduling).

        The host prepares plan N+1 while the device runs plan N, so in the steady state it
        never waits for the device; the launched plan's tokens are counted at once, with a
        placeholder per sample (a plan with drafts: when applied, first thing next step),
        and a sample taken past a stop is discarded.
        """
        updates: list[RequestUpdate] = []
        stats = None
        if self._in_flight is not None and self.grammars is not None and plan.samples_constrained:
            # A grammar mask needs the token in flight: apply it first (no overlap here).
            updates, stats = self._apply_in_flight(started, scheduled, plan)
            if stats is None:  # it failed, and the plan with it (its inputs came from there)
                return self._step_result(updates, None)
        if plan.is_empty and self._in_flight is None:
            return self._step_result(updates, stats)  # idle once a step applied first ends all
        launched = None if plan.is_empty else LaunchedStep.of(plan)
        if launched is not None:
            try:
                self._attach_masks(plan)
                launched.pending = self.runner.launch(plan)
            except Exception as error:  # a bad batch fails its own requests only
                updates += self._fail(error, plan)
                launched = None
        if self._in_flight is not None:  # the launched plan's inputs came from this step
            self.num_overlapped_steps += launched is not None
            dependent = [] if launched is None else [plan]
            applied, stats = self._apply_in_flight(started, scheduled, *dependent)
            updates += applied
            launched = None if stats is None else launched  # failed with it
        if launched is not None:
            if not plan.num_verify_tokens:
                launched.placeholder_ids = self.scheduler.advance_in_flight(plan)
            self._in_flight = launched
        return self._step_result(updates, stats)

    def _apply_in_flight(
        self, started: float, scheduled: float, *dependent: SchedulerOutput
    ) -> tuple[list[RequestUpdate], StepStats | None]:
        """Apply the step in flight now; unreadable, it fails with `dependent` (stats None)."""
        step, self._in_flight = self._in_flight, None
        assert step is not None and step.pending is not None  # only a launched step flies
        try:
            output = step.pending.resolve()
        except Exception as error:
            return self._fail(error, step.plan, *dependent), None
        return self._apply(step, output, started, scheduled)

    def _attach_masks(self, plan: SchedulerOutput) -> None:
        """Give the plan its constrained rows' grammar masks, from every token applied."""
        if self.grammars is not None:
            self.grammars.attach_masks(plan)

    def _apply(
        self, step: LaunchedStep, output: RunnerOutput, started: float, scheduled: float
    ) -> tuple[list[RequestUpdate], StepStats]:
        """Apply a step's samples, in either mode; returns its updates and figures.

        `schedule_s` and `total_s` are the calling step's; `forward_s` of a pipelined step
        is its launch plus the wait for its samples, which tends to zero, as is the point.
        """
        plan = step.plan
        ended_before = {c.request.request_id for c in plan.chunks if c.request.is_finished}
        self.scheduler.update_from_output(
            plan, output.sampled_token_ids, step.placeholder_ids, output.verified_token_ids
        )
        updates, self._finished_last_step = request_updates(
            plan, output, ended_before, self._finished_last_step
        )
        stats = step_stats(
            plan, self.scheduler, output, started, scheduled, time.monotonic(),
            step.kv_context_tokens,
        )  # fmt: skip
        return updates, stats

    def _fail(self, error: Exception, *plans: SchedulerOutput) -> list[RequestUpdate]:
        """The one failure path: log `error` and end every request of `plans` with it."""
        logger.exception("step failed; failing its %d requests", sum(len(p.chunks) for p in plans))
        self.scheduler.forget_runner_state()  # the runner dropped its rows: re-send the rest
        return [update for plan in plans for update in fail_plan(self.scheduler, plan, error)]

    def _step_result(self, updates: list[RequestUpdate], stats: StepStats | None) -> StepResult:
        """The step's result; the one idle point: with nothing left to run, check the pool."""
        integrity_error = None
        if not self.has_unfinished_requests():
            integrity_error = self.check_pool_at_idle()  # e.g. blocks leaked by a bug
        return StepResult(updates, stats, integrity_error)

    def check_pool_at_idle(self) -> KVCacheIntegrityError | None:
        """Verify the KV pool when no request holds blocks; on a violation report and rebuild.

        A violation is a bug, but at idle nothing depends on the pool's old state, so the
        engine logs it, counts it and keeps serving instead of dying with every client.
        """
        try:
            self.scheduler.check_integrity()
        except KVCacheIntegrityError as error:
            logger.error("KV pool integrity violated at idle (%s); rebuilding the pool", error)
            self.num_integrity_errors += 1
            self.block_manager.rebuild()
            return error
        return None

    # ---------------------------------------------------------------- reading

    def facts(self) -> EngineFacts:
        """What does not change while serving: model, device, limits and the KV pool."""
        return engine_facts(self)

    def snapshot(
        self, scope: SnapshotScope | None = None, recent: Iterable[Request] = ()
    ) -> EngineSnapshot:
        """The live state between two steps: queues, KV use and what `scope` asks for (by
        default nothing more). Only the thread that steps may call it, as the scheduler
        changes during a step; `recent` are finished requests the caller kept, for rows;
        the grammar figures are zeros until the first constrained request."""
        num_compiling = 0 if self.grammars is None else len(self.grammars.compiling)
        grammar = self.grammar_stats.section(num_compiling)
        snapshot = collect_snapshot(self.scheduler, scope or SnapshotScope(), recent, grammar)
        stats = self.runner.routing_stats  # an MoE model's: its routing load goes along
        return snapshot if stats is None else dataclasses.replace(snapshot, moe=stats.section())
