"""The engine thread: drains a command queue between steps and does nothing else but step.

Commands (`engine_commands.py`) arrive from other threads through a queue, so the engine
is only ever touched here, through its public API (add, abort, finish, step, snapshot);
each iteration's results go to the text thread as an `EngineBatch` of frozen records,
which it turns into messages, so the device never waits for tokenizers or sockets.
"""

from __future__ import annotations

import logging
import queue
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llmd.daemon.admission import Admission
from llmd.daemon.engine_batch import EngineBatch, UpdateRecord
from llmd.daemon.engine_commands import (
    AbortCommand,
    AddCommand,
    EngineCommand,
    FinishCommand,
    FlushCacheCommand,
    SnapshotCommand,
)
from llmd.daemon.engine_state import collect_engine_state
from llmd.daemon.engine_thread import EngineThread
from llmd.daemon.kv_event_publisher import KVEventPublisher
from llmd.engine.ended_request import EndedRequest
from llmd.engine.engine_snapshot import EngineSnapshot, SnapshotScope
from llmd.engine.kv_events import AllBlocksCleared
from llmd.engine.request import Request
from llmd.engine.step_result import StepResult
from llmd.engine.step_stats import StepStats
from llmd.errors import LLMDError
from llmd.metrics import ServingMetrics
from llmd.warmup import WarmupReport, warm_up

if TYPE_CHECKING:
    from llmd.llm_engine import LLMEngine

logger = logging.getLogger(__name__)

IDLE_WAIT_S = 0.5
"""How long the idle engine thread blocks on its queue before checking for stop."""
EMPTY_STEP_WAIT_S = 0.002
"""Pause after a step that scheduled nothing although work exists (avoids a busy spin)."""
NUM_RECENT_REQUESTS = 32
MAX_COMMANDS_PER_STEP = 256
"""While requests run, at most this many queued commands run between two steps."""
BACKLOG_SCOPE = SnapshotScope(include_backlog=True)
"""What admission reads of the engine: the prefill tokens queued ahead of a new request."""


def label_text(label: str | None) -> str:
    """` (label X)` after a request id in a log line, or nothing when it has no label."""
    return "" if label is None else f" (label {label})"


@dataclass(eq=False)
class EngineLoop:
    """Runs `engine.step()` in a thread fed by a command queue."""

    engine: LLMEngine
    metrics: ServingMetrics
    on_batch: Callable[[EngineBatch], None]
    """Given every step's updates, on the engine thread."""
    on_death: Callable[[str], None]
    """Given why the engine thread died, once it has."""
    admission: Admission | None = None
    """Refuses, with --admission slo, what could not start within the TTFT target."""
    on_warm: Callable[[WarmupReport], None] | None = None
    """Given: the thread first runs the warm-up (`llmd.warmup`), then reports it here."""
    thread: EngineThread | None = None
    """The thread that loaded the engine (`llmd serve`), or one made at start."""
    kv_publisher: KVEventPublisher | None = None
    """Publishes the engine's KV-cache events after every step and command (`--kv-events`)."""
    dead_error: str | None = field(default=None, init=False)
    """Why the engine thread died, once it has."""
    _commands: queue.SimpleQueue[EngineCommand | None] = field(
        default_factory=queue.SimpleQueue, init=False
    )
    _recent: deque[Request] = field(
        default_factory=lambda: deque(maxlen=NUM_RECENT_REQUESTS), init=False
    )
    _is_stopping: bool = field(default=False, init=False)
    _is_started: bool = field(default=False, init=False)

    def start(self) -> None:
        """Start stepping (after the warm-up, when given)."""
        if self.thread is None:
            self.thread = EngineThread()
        self._is_started = True
        self.thread.start(self._run)

    def submit(self, command: EngineCommand) -> None:
        """Queue a command; it runs before the next step."""
        self._commands.put(command)

    def stop(self, timeout: float = 10.0) -> None:
        """Finish the current step and end the thread."""
        self._is_stopping = True
        self._commands.put(None)
        if self.thread is not None and self.thread.is_alive():
            self.thread.join(timeout)

    @property
    def is_alive(self) -> bool:
        """True while the thread steps (after start, until it ends)."""
        return self._is_started and self.thread is not None and self.thread.is_alive()

    def _run(self) -> None:
        try:
            if self.on_warm is not None:  # on this thread: its OpenMP team, its malloc arena
                self.on_warm(warm_up(self.engine, self._on_warmup_step))
            if self.kv_publisher is not None:
                self.kv_publisher.open()
                self.engine.drain_kv_events()  # the warm-up's blocks are gone (reset)
                self.kv_publisher.publish([AllBlocksCleared()])  # a fresh start for routers
            self._loop()
        except BaseException as error:  # anything escaping the loop kills the engine
            logger.exception("engine thread died")
            self.dead_error = f"{type(error).__name__}: {error}"
            self.on_death(self.dead_error)
        finally:
            if self.kv_publisher is not None:
                self.kv_publisher.close()

    def _on_warmup_step(self, stats: StepStats) -> None:
        if self.admission is not None:  # admission starts with a measured prefill rate
            self.admission.observe_step(stats.num_prefill_tokens, stats.total_s)

    def _loop(self) -> None:
        engine = self.engine
        last_step_end: float | None = None  # set while work was left after the last step
        while not self._is_stopping:
            batch = EngineBatch()
            has_work = engine.has_unfinished_requests()
            self._drain(batch, wait_s=None if has_work else IDLE_WAIT_S)
            if engine.has_unfinished_requests() and not self._is_stopping:
                step_start = time.monotonic()
                idle_gap = 0.0 if last_step_end is None else step_start - last_step_end
                result = engine.step()
                self._collect(result, batch, idle_gap)
                last_step_end = time.monotonic() if engine.has_unfinished_requests() else None
                if result.stats is None and not result.updates:
                    self._drain(batch, wait_s=EMPTY_STEP_WAIT_S)
            else:
                last_step_end = None
            if self.kv_publisher is not None:
                self.kv_publisher.publish(engine.drain_kv_events())
            if batch:
                self.on_batch(batch)

    def _drain(self, batch: EngineBatch, wait_s: float | None) -> None:
        """Run queued commands; wait up to `wait_s` for the first one when given.

        With requests to step, it stops after MAX_COMMANDS_PER_STEP, so a flood of
        commands can slow the engine down but never stop it.
        """
        try:
            command = self._commands.get(timeout=wait_s) if wait_s else self._commands.get_nowait()
        except queue.Empty:
            return
        num_applied = 0
        while True:
            if command is not None:
                self._apply(command, batch)
                num_applied += 1
            if num_applied >= MAX_COMMANDS_PER_STEP and self.engine.has_unfinished_requests():
                return
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return

    def _apply(self, command: EngineCommand, batch: EngineBatch) -> None:
        engine = self.engine
        if isinstance(command, AddCommand):
            refusal = self._refusal(command)
            if refusal is not None:
                batch.rejected.append((command.request_id, refusal))
                return
            try:
                request = engine.add_request(
                    command.prompt_token_ids,
                    command.params,
                    command.request_id,
                    command.priority,
                    command.arrival_time,
                    command.label,
                )
            except LLMDError as error:
                batch.rejected.append((command.request_id, error))
            except Exception as error:  # add_request changes nothing before it can fail
                logger.exception(
                    "adding request %s%s failed", command.request_id, label_text(command.label)
                )
                batch.rejected.append((command.request_id, LLMDError(f"internal error: {error}")))
            else:
                batch.added.append((request.request_id, request.num_prompt_tokens))
        elif isinstance(command, AbortCommand):
            self._ended(engine.abort_request(command.request_id), batch)
        elif isinstance(command, FinishCommand):
            finished = engine.finish_request(
                command.request_id, command.reason, command.stop_reason, command.num_output_tokens
            )
            if finished is None and command.num_output_tokens is not None:
                self._keep_delivered_tokens(command.request_id, command.num_output_tokens)
            self._ended(finished, batch)
        elif isinstance(command, SnapshotCommand):
            try:
                state: EngineSnapshot | None = collect_engine_state(
                    engine,
                    self._recent,
                    command.include_requests,
                    command.include_block_map,
                    command.timeline_request_ids,
                    command.max_requests,
                )
            except Exception:  # reading changes nothing: serve on, answer without our part
                logger.exception("collecting the engine's stats failed")
                state = None
            command.on_ready(state)
        elif isinstance(command, FlushCacheCommand):
            try:
                result: int | LLMDError = engine.reset_prefix_cache()
            except LLMDError as error:  # refused (requests unfinished): the engine is intact
                result = error
            command.on_done(result)
        else:
            raise TypeError(f"unknown engine command {command!r}")

    def _refusal(self, command: AddCommand) -> LLMDError | None:
        """Admission's refusal of a new request, or None (always None without a policy)."""
        if self.admission is None:
            return None
        snapshot = self._snapshot(BACKLOG_SCOPE)
        if snapshot is None:
            return None  # the engine's state could not be read: admit, as without a policy
        waited_s = time.monotonic() - command.arrival_time
        num_prompt_tokens = len(command.prompt_token_ids)
        return self.admission.check_backlog(
            snapshot.backlog_tokens or 0, num_prompt_tokens, waited_s, snapshot.queue.running
        )

    def _snapshot(self, scope: SnapshotScope | None = None) -> EngineSnapshot | None:
        """The engine's state now, or None if reading it failed (logged; serving goes on)."""
        try:
            return self.engine.snapshot(scope)
        except Exception:  # reading changes nothing, so a bug in it must not stop the engine
            logger.exception("reading the engine's state failed")
            return None

    def _ended(self, request: Request | None, batch: EngineBatch) -> None:
        if request is not None:
            batch.ended.append(EndedRequest.of(request))
            self._recent.append(request)

    def _keep_delivered_tokens(self, request_id: str, num_output_tokens: int) -> None:
        """A request that ended (by length, say) before its stop string was seen keeps, in
        the stats, only the tokens delivered up to the stop."""
        for recent in self._recent:
            if recent.request_id == request_id:
                recent.keep_output_tokens(num_output_tokens)
                return

    def _is_recent(self, request: Request) -> bool:
        """True if `request` is listed already: with async scheduling, one ended from outside
        the step (abort, stop string) gets a last update when its in-flight step is applied."""
        return any(recent is request for recent in self._recent)

    def _collect(self, result: StepResult, batch: EngineBatch, idle_gap: float) -> None:
        num_generated = 0
        for update in result.updates:
            request = update.request
            is_finished = request.is_finished
            batch.updates.append(
                UpdateRecord(
                    request.request_id,
                    update.new_token_ids,
                    update.new_logprobs,
                    is_finished,
                    EndedRequest.of(request) if is_finished else None,
                    update.prompt_logprobs,
                )
            )
            num_generated += len(update.new_token_ids)
            if is_finished and not self._is_recent(request):
                self._recent.append(request)
        stats = result.stats
        if stats is None:
            return
        # On CUDA the gap is the device's own idle time between steps (CUDA events), the
        # same measure with async scheduling on or off; elsewhere, host time between steps.
        device_gap = getattr(stats, "device_gap_s", None)
        gap = idle_gap if device_gap is None else device_gap
        self.metrics.record_step(stats, num_generated, gap)
        if self.admission is not None:
            self.admission.observe_step(
                stats.num_prefill_tokens, stats.total_s, stats.num_decode_seqs
            )
        snapshot = self._snapshot() if stats.num_prefill_tokens else None
        for prefill in () if snapshot is None else snapshot.prefilling:
            batch.progress.append(
                (prefill.request_id, prefill.num_computed_tokens, prefill.num_prompt_tokens)
            )
