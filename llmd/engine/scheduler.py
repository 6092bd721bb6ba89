"""Iteration-level scheduling under a token budget (no torch).

Every request has `num_computed_tokens` and a target (`num_tokens`); each step hands out
a token budget so that requests catch up. A decode is a catch-up of one token, a prefill
a large one split into chunks, and a prefix-cache hit simply starts further along, so
there is one scheduling model and no special modes.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from llmd.config import SchedulerConfig
from llmd.engine.block_manager import BlockManager
from llmd.engine.plan_writer import PlanWriter
from llmd.engine.request import FinishReason, Request, RequestStatus
from llmd.engine.scheduler_output import PENDING_TOKEN_ID, ScheduledChunk, SchedulerOutput
from llmd.engine.servability import check_servable
from llmd.engine.speculator import NO_DRAFT, Speculator
from llmd.engine.stop_rules import check_stop, ends_by_length_after_sample, grammar_stop
from llmd.engine.wait_tracker import WaitTracker
from llmd.engine.waiting_queue import make_waiting_queue
from llmd.errors import InvalidParameterError, SchedulerStallError
from llmd.wait_breakdown import KV_BLOCKS, MAX_NUM_SEQS, QUEUE, TOKEN_BUDGET

# Blocks kept free when admitting new requests while others run, so running ones can grow a
# little before anyone is preempted; a fraction of the pool. With nothing running there is
# nobody to grow, and no headroom: any request that fits the whole pool can then be admitted.
ADMISSION_HEADROOM_FRACTION = 0.01


class Scheduler:
    """Decides, each step, which requests compute how many tokens, and preempts on KV shortage."""

    def __init__(
        self,
        config: SchedulerConfig,
        block_manager: BlockManager,
        speculator: Speculator | None = None,
    ) -> None:
        self.config = config
        self.block_manager = block_manager
        self.speculator = speculator
        """Speculative decoding: drafts tokens for decodes and keeps their verified runs."""
        self.waiting = make_waiting_queue(config.policy)
        self.running: list[Request] = []
        self.requests: dict[str, Request] = {}
        self.num_preemptions = 0
        self.wait_tracker = WaitTracker()
        """Why each waiting request waits, step by step (read by metrics and stats)."""
        self.plan_writer = PlanWriter()
        """What the runner was told of each request (plans carry only what is new)."""
        self._is_decodes_first = True
        """Whether the plan being built has no decode after a prefill chunk (so far)."""
        self._largest_prefill: ScheduledChunk | None = None
        """The plan's largest non-decode chunk so far (the wait tracker names its request)."""
        self._has_verify = False
        """Whether the plan being built has a verify chunk so far (placed after decodes)."""
        self._admission_headroom = int(block_manager.num_blocks * ADMISSION_HEADROOM_FRACTION)

    def reset_counters(self) -> None:
        """Zero the preemption count and forget wait history (after a warm-up, say)."""
        self.num_preemptions = 0
        self.wait_tracker = WaitTracker()
        if self.speculator is not None:
            self.speculator.reset_counters()

    # ------------------------------------------------------------ admission

    def add_request(self, request: Request, now: float | None = None) -> None:
        """Queue a request, or reject it at once if it can never be served."""
        if request.request_id in self.requests:
            raise InvalidParameterError(
                f"request id {request.request_id!r} is already in use", "request_id"
            )
        check_servable(request, self.config.max_model_len, self.block_manager)
        request.status = RequestStatus.WAITING
        self.requests[request.request_id] = request
        self.waiting.push(request)
        self.wait_tracker.on_added(request, time.monotonic() if now is None else now)

    def finish_request(
        self,
        request_id: str,
        reason: FinishReason,
        stop_reason: int | str | None = None,
        now: float | None = None,
        num_output_tokens: int | None = None,
    ) -> Request | None:
        """End a request from outside the step (abort, stop string, error); frees its KV now.

        `num_output_tokens`, when given, is how many generated tokens were delivered (a stop
        string matched there): any sampled after them are dropped from the request.
        """
        request = self.requests.pop(request_id, None)
        if request is None:
            return None
        now = time.monotonic() if now is None else now
        self.wait_tracker.on_finished(request, now)
        if request.status is RequestStatus.RUNNING:
            self.running.remove(request)
        elif request.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED):
            self.waiting.remove(request)
        self.block_manager.free(request)
        self.plan_writer.on_finished(request_id)
        if self.speculator is not None:
            self.speculator.release(request_id)
        request.finish(reason, now, stop_reason)
        if num_output_tokens is not None:
            request.keep_output_tokens(num_output_tokens)
        return request

    # ------------------------------------------------------------ scheduling

    def schedule(self, now: float | None = None, may_draft: bool = True) -> SchedulerOutput:
        """Plan one step: running requests first (decodes, ongoing prefills), then admissions.

        Whatever it leaves waiting is charged, until the next step, to the one reason that
        stopped it (WaitTracker). `may_draft` False (a step in flight: async scheduling)
        plans no speculative drafts: a verify step's next plan needs its accepted length.
        """
        now = time.monotonic() if now is None else now
        self.wait_tracker.begin_step(now)
        output = SchedulerOutput()
        self._is_decodes_first, self._largest_prefill = True, None
        self._has_verify = False
        budget = self.config.max_num_batched_tokens
        if self.config.policy == "priority":
            self.running.sort(key=lambda r: (r.priority, r.times.arrival))
        if self.speculator is not None:
            self.speculator.begin_step(self.running, budget, may_draft)  # draft model passes
        budget = self._schedule_running(output, budget, now)
        head_reason, shared_reason = None, KV_BLOCKS  # a preemption means blocks ran out
        if not output.preempted_request_ids:
            head_reason, shared_reason = self._schedule_waiting(output, budget, now)
            if not output.chunks and not self.running and self.waiting:
                head = self.waiting.peek()
                raise SchedulerStallError(
                    f"request {head.request_id!r} ({head.num_tokens} tokens) cannot be admitted "
                    f"into an idle engine ({self.block_manager.num_free_blocks} of "
                    f"{self.block_manager.num_blocks} KV blocks free)",
                    request_id=head.request_id,
                )
        largest = self._largest_prefill
        self.wait_tracker.end_step(
            self.waiting.peek() if self.waiting else None,
            head_reason,
            shared_reason,
            None if largest is None else largest.request.request_id,
        )
        self.plan_writer.take_finished(output)
        # Decodes first, so the runner can split the batch into a decode and a prefill part.
        if not self._is_decodes_first:  # (a stable sort of a partitioned plan is a no-op)
            output.chunks.sort(key=lambda chunk: not chunk.is_decode)
        output.num_waiting = len(self.waiting)
        output.num_running = len(self.running)
        return output

    def wants_drafts(self) -> bool:
        """Whether a running decode would draft next step once its sample in flight is known
        (`Speculator.wants_drafts`); always False without speculative decoding."""
        budget = self.config.max_num_batched_tokens
        return self.speculator is not None and self.speculator.wants_drafts(self.running, budget)

    def _num_new_tokens(self, request: Request, budget: int) -> int:
        """Tokens this request should compute now, or 0 if it must wait for a bigger budget."""
        num_new = request.num_tokens - request.num_computed_tokens
        if num_new <= budget:
            return num_new
        return budget if self.config.enable_chunked_prefill else 0

    def _schedule_running(self, output: SchedulerOutput, budget: int, now: float) -> int:
        index = 0
        while index < len(self.running) and budget > 0:
            request = self.running[index]
            num_new = self._num_new_tokens(request, budget)
            if num_new == 0:
                index += 1
                continue
            draft_ids = NO_DRAFT
            if self.speculator is not None and num_new == 1 and request.num_output_tokens > 0:
                draft_ids = self.speculator.allocate_drafts(
                    request, budget, self.block_manager, self._admission_headroom
                )
            if draft_ids:
                self._add_chunk(output, request, 1 + len(draft_ids), now, draft_ids)
                budget -= 1 + len(draft_ids)
                index += 1
                continue
            while not self.block_manager.allocate_slots(request, num_new):
                victim = self.running[-1]  # newest (or lowest priority): runs last this step
                self._preempt(victim, output, now)
                if victim is request:
                    break
            else:
                self._add_chunk(output, request, num_new, now)
                budget -= num_new
                index += 1
        return budget

    def _schedule_waiting(
        self, output: SchedulerOutput, budget: int, now: float
    ) -> tuple[str | None, str]:
        """Admit in policy order; returns the reason that stopped the head (when one of its
        own did) and the reason that holds everyone else waiting."""
        while budget > 0 and self.waiting and len(self.running) < self.config.max_num_seqs:
            request = self.waiting.peek()
            hit_blocks, num_hit_tokens = self.block_manager.get_computed_blocks(request)
            num_new = request.num_tokens - num_hit_tokens
            if num_new > budget:
                if not self.config.enable_chunked_prefill:
                    return TOKEN_BUDGET, QUEUE
                num_new = budget
            headroom = self._admission_headroom if self.running else 0
            if not self.block_manager.allocate_slots(request, num_new, hit_blocks, headroom):
                return KV_BLOCKS, QUEUE
            self.waiting.pop()
            self.wait_tracker.on_admitted(request, now)
            self.block_manager.record_prefix_lookup(request, num_hit_tokens)
            request.num_computed_tokens = num_hit_tokens
            request.num_cached_tokens = num_hit_tokens
            request.status = RequestStatus.RUNNING
            if request.times.first_scheduled is None:
                request.times.first_scheduled = now
            self.running.append(request)
            self._add_chunk(output, request, num_new, now)
            budget -= num_new
        if not self.waiting:
            return None, QUEUE  # whoever arrives before the next step was not there
        if len(self.running) >= self.config.max_num_seqs:
            return None, MAX_NUM_SEQS
        return None, TOKEN_BUDGET

    def _add_chunk(
        self,
        output: SchedulerOutput,
        request: Request,
        num_new: int,
        now: float,
        draft_ids: list[int] = NO_DRAFT,
    ) -> None:
        if draft_ids:  # a verify chunk: decode work, placed with the prefill chunks
            self.plan_writer.add_chunk(output, request, num_new, True, draft_ids)
            output.num_verify_tokens += num_new
            self._has_verify = True
            return
        is_sampling = request.num_computed_tokens + num_new == request.num_tokens
        chunk = self.plan_writer.add_chunk(output, request, num_new, is_sampling)
        is_decode = chunk.is_decode
        largest = self._largest_prefill
        if not is_decode:
            if largest is None or num_new > largest.num_new_tokens:
                self._largest_prefill = chunk  # the first of the largest, as max() picks
        elif largest is not None or self._has_verify:
            self._is_decodes_first = False  # a decode after a prefill: reorder at the end
        # A one-token chunk is a decode only when that token is an output: the last prompt
        # token (1-token prompt, last chunk, prefix hit leaving one) is prefill work.
        if is_decode and request.num_output_tokens > 0:
            output.num_decode_tokens += 1
        else:
            output.num_prefill_tokens += num_new
            request.num_prefill_chunks += 1
            request.events.append((now, "prefill", num_new))

    def _preempt(self, request: Request, output: SchedulerOutput, now: float) -> None:
        """Free a running request's KV and queue it to be recomputed from scratch."""
        self.running.remove(request)
        self.block_manager.free(request)
        if self.speculator is not None:
            self.speculator.release(request.request_id)
        request.num_computed_tokens = 0
        request.status = RequestStatus.PREEMPTED
        request.num_preemptions += 1
        request.events.append((now, "preempted", request.num_tokens))
        self.num_preemptions += 1
        self.waiting.push_front(request)
        self.wait_tracker.on_preempted(request, now)
        self.plan_writer.on_preempted(request.request_id, output)

    # ------------------------------------------------------------ after the step

    def update_from_output(
        self,
        output: SchedulerOutput,
        sampled_token_ids: dict[str, int],
        placeholder_ids: set[str] | None = None,
        verified_token_ids: dict[str, list[int]] | None = None,
    ) -> list[Request]:
        """Advance computed tokens, append samples, apply stop rules; returns finished requests.

        The one post-step path of both scheduling modes. `placeholder_ids` is the async hook:
        None for a synchronous step, whose tokens are counted here; for a launched step
        (`advance_in_flight` counted its tokens at launch), the requests whose placeholder
        a sample replaces. A request that ended meanwhile (a stop found in the previous
        step, an abort, a stop string) has its sample discarded, as its placeholder was when
        it finished (`Request.finish`): no token is ever emitted past a stop. A verify
        chunk's samples (`verified_token_ids`, one per position; synchronous steps only)
        go to the speculator, which keeps the accepted run.
        """
        now = time.monotonic()
        finished: list[Request] = []
        for chunk in output.chunks:
            request = chunk.request
            if request.is_finished:
                continue  # ended from outside while the step ran
            if chunk.num_draft_tokens:
                assert self.speculator is not None and verified_token_ids is not None
                reason, stop_reason = self.speculator.apply_verified(
                    chunk, verified_token_ids[request.request_id], self.block_manager, now
                )
                self.plan_writer.on_table_cut(request.request_id, len(request.block_ids))
                if reason is not None:
                    self.finish_request(request.request_id, reason, stop_reason, now)
                    finished.append(request)
                continue
            if placeholder_ids is None:
                request.num_computed_tokens += chunk.num_new_tokens
            self.block_manager.cache_full_blocks(request)
            if not chunk.is_sampling:
                continue
            token_id = sampled_token_ids[request.request_id]
            if placeholder_ids is not None and request.request_id in placeholder_ids:
                request.resolve_pending_token(token_id, now)
            else:
                request.append_token(token_id, now)
            reason, stop_reason = check_stop(request, token_id, self.config.max_model_len)
            if reason is None and request.grammar is not None:
                reason = grammar_stop(request, token_id)
            if reason is not None:
                self.finish_request(request.request_id, reason, stop_reason, now)
                finished.append(request)
        return finished

    def advance_in_flight(self, output: SchedulerOutput) -> set[str]:
        """Count a launched step's tokens as computed before its samples are read (async hook).

        Each sampling request gets a `PENDING_TOKEN_ID` placeholder, so the next plan
        schedules its decode (whose input the runner takes from the device), unless the
        sample must end the request by length: it then waits, unscheduled, for it.
        Returns the ids of the requests given a placeholder, for `update_from_output`.
        """
        pending_ids: set[str] = set()
        for chunk in output.chunks:
            request = chunk.request
            if request.is_finished or request.status is not RequestStatus.RUNNING:
                continue  # ended (or preempted) after the plan was made
            request.num_computed_tokens += chunk.num_new_tokens
            if chunk.is_sampling and not ends_by_length_after_sample(
                request, self.config.max_model_len
            ):
                request.all_token_ids.append(PENDING_TOKEN_ID)
                pending_ids.add(request.request_id)
        return pending_ids

    def forget_runner_state(self) -> None:
        """The runner lost its per-request rows (a failed step): re-send running requests."""
        self.plan_writer.forget_runner_state()

    # ------------------------------------------------------------ state

    @property
    def has_unfinished_requests(self) -> bool:
        """True while any request is waiting or running."""
        return bool(self.requests)

    @property
    def num_preempted_waiting(self) -> int:
        """Waiting requests that were preempted and await recomputation."""
        return self.waiting.num_preempted

    def live_requests(self) -> Iterable[Request]:
        """Every request not yet finished."""
        return self.requests.values()

    def check_integrity(self) -> None:
        """Verify the KV pool against every live request (cheap enough at idle points)."""
        self.block_manager.check_integrity(list(self.requests.values()))
