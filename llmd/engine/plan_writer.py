"""Writes scheduled requests into the runner's data contract, remembering what it was sent.

The runner keeps per-request state between steps, so a plan carries a request's whole
data once (`NewRequestData`) and afterwards only what changed: its new blocks and the
chunk's input tokens. This ledger of what the runner knows is the scheduler's, so the
runner never reads an engine `Request` (no torch).
"""

from __future__ import annotations

from collections.abc import Sequence

from llmd.engine.request import Request
from llmd.engine.scheduler_output import NewRequestData, ScheduledChunk, SchedulerOutput

_NO_BLOCKS: list[int] = []
"""Shared by the (many) chunks that bring no new block; the runner never mutates it."""


class PlanWriter:
    """Turns (request, tokens) decisions into plan data; tracks blocks sent per request."""

    def __init__(self) -> None:
        self._num_blocks_sent: dict[str, int] = {}
        """Requests the runner holds rows for -> how many of their block ids it was sent."""
        self._finished_ids: list[str] = []

    def add_chunk(
        self,
        output: SchedulerOutput,
        request: Request,
        num_new_tokens: int,
        is_sampling: bool,
        draft_ids: Sequence[int] = (),
    ) -> ScheduledChunk:
        """Append the chunk of `request` to `output` (and its data, if the runner lacks it).

        With `draft_ids` (speculative decoding) the chunk is the request's last token and
        the drafts, `num_new_tokens` = 1 + len(draft_ids).
        """
        request_id = request.request_id
        block_ids = request.block_ids
        num_blocks = len(block_ids)
        num_blocks_sent = self._num_blocks_sent
        num_sent = num_blocks_sent.get(request_id)
        if num_sent is None:
            output.new_requests.append(
                NewRequestData(
                    request_id,
                    request.prompt_token_ids,
                    request.output_token_ids,
                    request.sampling_params,
                    request.eos_token_ids,
                )
            )
            new_block_ids = list(block_ids)
            num_blocks_sent[request_id] = num_blocks
        elif num_blocks > num_sent:
            new_block_ids = block_ids[num_sent:]
            num_blocks_sent[request_id] = num_blocks
        else:
            new_block_ids = _NO_BLOCKS  # the common decode: no block since the last step
        start = request.num_computed_tokens
        if num_new_tokens == 1:
            token_ids = [request.all_token_ids[start]]
        elif draft_ids:
            token_ids = [request.all_token_ids[start], *draft_ids]
        else:
            token_ids = request.all_token_ids[start : start + num_new_tokens]
        chunk = ScheduledChunk(
            request, num_new_tokens, is_sampling, request_id, start, token_ids, new_block_ids,
            num_blocks, len(draft_ids),
        )  # fmt: skip
        output.chunks.append(chunk)
        return chunk

    def on_table_cut(self, request_id: str, num_blocks: int) -> None:
        """The request's table was cut to `num_blocks` (a verify step's rejected drafts):
        blocks it grows into later are new to the runner, sent for the columns they take
        (`ScheduledChunk.num_blocks` tells the runner where the table ends)."""
        num_sent = self._num_blocks_sent.get(request_id)
        if num_sent is not None and num_blocks < num_sent:
            self._num_blocks_sent[request_id] = num_blocks

    def on_preempted(self, request_id: str, output: SchedulerOutput) -> None:
        """The request lost its blocks in this plan: the runner frees its row."""
        self._num_blocks_sent.pop(request_id, None)
        output.preempted_request_ids.append(request_id)

    def on_finished(self, request_id: str) -> None:
        """The request ended: the next plan tells the runner to free all of its state."""
        self._num_blocks_sent.pop(request_id, None)
        self._finished_ids.append(request_id)

    def take_finished(self, output: SchedulerOutput) -> None:
        """Hand the ids that ended since the previous plan to `output`."""
        if self._finished_ids:
            output.finished_request_ids = self._finished_ids
            self._finished_ids = []

    def forget_runner_state(self) -> None:
        """The runner dropped its rows (a failed step): send running requests whole again."""
        self._num_blocks_sent.clear()

    def plan(self, chunks: list[tuple[Request, int, bool]]) -> SchedulerOutput:
        """A plan of the given (request, num_new_tokens, is_sampling) chunks, as scheduled.

        Counts decodes and prefill tokens as the scheduler does (for tests and benchmarks).
        """
        output = SchedulerOutput()
        self.take_finished(output)
        for request, num_new_tokens, is_sampling in chunks:
            chunk = self.add_chunk(output, request, num_new_tokens, is_sampling)
            if chunk.is_decode and request.num_output_tokens > 0:
                output.num_decode_tokens += 1
            else:
                output.num_prefill_tokens += num_new_tokens
        return output
