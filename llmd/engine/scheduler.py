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
from llmd.engine.request import PENDING_TOKEN_ID, FinishReason, Request, RequestStatus
from llmd.engine.scheduler_output import ScheduledChunk, SchedulerOutput
from llmd.engine.waiting_queue import make_waiting_queue
from llmd.errors import InvalidParameterError, RequestRejectedError, SchedulerStallError

# Blocks kept free when admitting new requests while others run, so running ones can grow a
# little before anyone is preempted; a fraction of the pool. With nothing running there is
# nobody to grow, and no headroom: any request that fits the whole pool can then be admitted.
ADMISSION_HEADROOM_FRACTION = 0.01


class Scheduler:
    """Decides, each step, which requests compute how many tokens, and preempts on KV shortage."""

    def __init__(self, config: SchedulerConfig, block_manager: BlockManager) -> None:
        self.config = config
        self.block_manager = block_manager
        self.waiting = make_waiting_queue(config.policy)
        self.running: list[Request] = []
        self.requests: dict[str, Request] = {}
        self.num_preemptions = 0
        self._admission_headroom = int(block_manager.num_blocks * ADMISSION_HEADROOM_FRACTION)

    # ------------------------------------------------------------ admission

    def check_servable(self, request: Request) -> None:
        """Raise RequestRejectedError if the request could never run on this engine."""
        max_len = self.config.max_model_len
        if request.num_prompt_tokens == 0:
            raise InvalidParameterError("prompt is empty", "prompt")
        if request.num_prompt_tokens >= max_len:
            raise RequestRejectedError(
                f"prompt has {request.num_prompt_tokens} tokens, but max_model_len is "
                f"{max_len} (prompt plus at least one output token must fit)",
                "prompt",
            )
        num_tokens = request.max_num_tokens
        if num_tokens > max_len:
            raise RequestRejectedError(
                f"prompt ({request.num_prompt_tokens} tokens) plus max_tokens "
                f"({request.sampling_params.max_tokens}) is {num_tokens} tokens, but "
                f"max_model_len is {max_len}",
                "max_tokens",
            )
        num_blocks = self.block_manager.num_blocks_for(num_tokens)
        if num_blocks > self.block_manager.num_blocks:
            raise RequestRejectedError(
                f"prompt plus max_tokens needs {num_tokens} tokens = {num_blocks} KV blocks, "
                f"but the whole KV cache has {self.block_manager.num_blocks} blocks",
                "max_tokens",
            )

    def add_request(self, request: Request) -> None:
        """Queue a request, or reject it at once if it can never be served."""
        if request.request_id in self.requests:
            raise InvalidParameterError(
                f"request id {request.request_id!r} is already in use", "request_id"
            )
        self.check_servable(request)
        request.status = RequestStatus.WAITING
        self.requests[request.request_id] = request
        self.waiting.push(request)

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
        if request.status is RequestStatus.RUNNING:
            self.running.remove(request)
        elif request.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED):
            self.waiting.remove(request)
        self.block_manager.free(request)
        request.finish(reason, time.monotonic() if now is None else now, stop_reason)
        if num_output_tokens is not None:
            request.keep_output_tokens(num_output_tokens)
        return request

    # ------------------------------------------------------------ scheduling

    def schedule(self) -> SchedulerOutput:
        """Plan one step: running requests first (decodes, ongoing prefills), then admissions."""
        now = time.monotonic()
        output = SchedulerOutput()
        budget = self.config.max_num_batched_tokens
        if self.config.policy == "priority":
            self.running.sort(key=lambda r: (r.priority, r.times.arrival))
        budget = self._schedule_running(output, budget, now)
        if not output.preempted_request_ids:
            self._schedule_waiting(output, budget, now)
            if not output.chunks and not self.running and self.waiting:
                head = self.waiting.peek()
                raise SchedulerStallError(
                    f"request {head.request_id!r} ({head.num_tokens} tokens) cannot be admitted "
                    f"into an idle engine ({self.block_manager.num_free_blocks} of "
                    f"{self.block_manager.num_blocks} KV blocks free)",
                    request_id=head.request_id,
                )
        # Decodes first, so the runner can split the batch into a decode and a prefill part.
        output.chunks.sort(key=lambda chunk: not chunk.is_decode)
        output.num_waiting = len(self.waiting)
        output.num_running = len(self.running)
        return output

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

    def _schedule_waiting(self, output: SchedulerOutput, budget: int, now: float) -> None:
        while budget > 0 and self.waiting and len(self.running) < self.config.max_num_seqs:
            request = self.waiting.peek()
            hit_blocks, num_hit_tokens = self.block_manager.get_computed_blocks(request)
            num_new = request.num_tokens - num_hit_tokens
            if num_new > budget:
                if not self.config.enable_chunked_prefill:
                    break
                num_new = budget
            headroom = self._admission_headroom if self.running else 0
            if not self.block_manager.allocate_slots(request, num_new, hit_blocks, headroom):
                break
            self.waiting.pop()
            self.block_manager.record_prefix_lookup(request, num_hit_tokens)
            request.num_computed_tokens = num_hit_tokens
            request.num_cached_tokens = num_hit_tokens
            request.status = RequestStatus.RUNNING
            if request.times.first_scheduled is None:
                request.times.first_scheduled = now
            self.running.append(request)
            self._add_chunk(output, request, num_new, now)
            budget -= num_new

    def _add_chunk(self, output: SchedulerOutput, request: Request, num_new: int, now: float):
        is_sampling = request.num_computed_tokens + num_new == request.num_tokens
        chunk = ScheduledChunk(request, num_new, is_sampling)
        output.chunks.append(chunk)
        # A one-token chunk is a decode only when that token is an output: the last prompt
        # token (1-token prompt, last chunk, prefix hit leaving one) is prefill work.
        if chunk.is_decode and request.num_output_tokens > 0:
            output.num_decode_tokens += 1
        else:
            output.num_prefill_tokens += num_new
            request.num_prefill_chunks += 1
            request.events.append((now, "prefill", num_new))

    def _preempt(self, request: Request, output: SchedulerOutput, now: float) -> None:
        """Free a running request's KV and queue it to be recomputed from scratch."""
        self.running.remove(request)
        self.block_manager.free(request)
        request.num_computed_tokens = 0
        request.status = RequestStatus.PREEMPTED
        request.num_preemptions += 1
        request.events.append((now, "preempted", request.num_tokens))
        self.num_preemptions += 1
        self.waiting.push_front(request)
        output.preempted_request_ids.append(request.request_id)

    # ------------------------------------------------------------ after the step

    def update_from_output(
        self, output: SchedulerOutput, sampled_token_ids: dict[str, int]
    ) -> list[Request]:
        """Advance computed tokens, append samples, apply stop rules; returns finished requests."""
        now = time.monotonic()
        finished: list[Request] = []
        for chunk in output.chunks:
            request = chunk.request
            if request.is_finished:
                continue  # ended from outside while the step ran
            request.num_computed_tokens += chunk.num_new_tokens
            self.block_manager.cache_full_blocks(request)
            if not chunk.is_sampling:
                continue
            token_id = sampled_token_ids[request.request_id]
            request.append_token(token_id, now)
            reason, stop_reason = self._check_stop(request, token_id)
            if reason is not None:
                self.finish_request(request.request_id, reason, stop_reason, now)
                finished.append(request)
        return finished

    # ------------------------------------------------------------ async scheduling

    def advance_in_flight(self, output: SchedulerOutput) -> set[str]:
        """Count a launched step's tokens as computed before its samples are read.

        Each sampling request gets a `PENDING_TOKEN_ID` placeholder, so the next plan
        schedules its decode (whose input the runner takes from the device), unless the
        sample must end the request by length: it then waits, unscheduled, for it.
        Returns the ids of the requests given a placeholder.
        """
        pending_ids: set[str] = set()
        for chunk in output.chunks:
            request = chunk.request
            if request.is_finished or request.status is not RequestStatus.RUNNING:
                continue  # ended (or preempted) after the plan was made
            request.num_computed_tokens += chunk.num_new_tokens
            if chunk.is_sampling and not self._ends_by_length_after_sample(request):
                request.all_token_ids.append(PENDING_TOKEN_ID)
                pending_ids.add(request.request_id)
        return pending_ids

    def resolve_in_flight(
        self, output: SchedulerOutput, sampled_token_ids: dict[str, int], pending_ids: set[str]
    ) -> list[Request]:
        """Apply a launched step's samples (see `advance_in_flight`); returns finished requests.

        A request that ended meanwhile (a stop found in the previous step, an abort, a
        stop string) has its sample discarded, as its placeholder was when it finished
        (`Request.finish`): no token is ever emitted past a stop.
        """
        now = time.monotonic()
        finished: list[Request] = []
        for chunk in output.chunks:
            request = chunk.request
            if request.is_finished:
                continue
            if not chunk.is_sampling:
                self.block_manager.cache_full_blocks(request)
                continue
            token_id = sampled_token_ids[request.request_id]
            if request.request_id in pending_ids:
                request.resolve_pending_token(token_id, now)
            else:
                request.append_token(token_id, now)
            self.block_manager.cache_full_blocks(request)
            reason, stop_reason = self._check_stop(request, token_id)
            if reason is not None:
                self.finish_request(request.request_id, reason, stop_reason, now)
                finished.append(request)
        return finished

    def _ends_by_length_after_sample(self, request: Request) -> bool:
        """True when the next sampled token will end the request by max_tokens or length."""
        return (
            request.num_output_tokens + 1 >= request.sampling_params.max_tokens
            or request.num_tokens + 1 >= self.config.max_model_len
        )

    def _check_stop(
        self, request: Request, token_id: int
    ) -> tuple[FinishReason | None, int | None]:
        params = request.sampling_params
        if request.num_output_tokens >= params.min_tokens:
            if not params.ignore_eos and token_id in request.eos_token_ids:
                return FinishReason.STOP, None
            if token_id in params.stop_token_ids:
                return FinishReason.STOP, token_id
        if request.num_output_tokens >= params.max_tokens:
            return FinishReason.LENGTH, None
        if request.num_tokens >= self.config.max_model_len:
            return FinishReason.LENGTH, None
        return None, None

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
