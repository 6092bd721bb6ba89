"""Device-resident block tables of the running requests, updated row by row across steps.

Rebuilding padded block tables from Python lists every step costs O(requests x blocks) of
host work (41 ms at 256 x 2,000 on a laptop CPU), more than a decode step of a large model.
Here each request keeps one row of a device tensor for as long as it runs: a step writes
only the block ids that appeared since the last step (a new block every `block_size`
tokens, a whole row on admission), so host work per step is O(requests) plus new blocks.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch

from llmd.engine.scheduler_output import NewRequestData, SchedulerOutput
from llmd.errors import LLMDError
from llmd.runner.host_transfer import rows_to_device, to_device
from llmd.runner.request_state import RequestState
from llmd.runner.sampling_batch import is_plain_greedy


@dataclass
class _Row:
    """What one row of the table holds: whose blocks, and how many the runner was sent."""

    index: int
    state: RequestState
    num_blocks: int = 0
    """Length of the request's table as the runner last wrote it (a cut shortens it)."""


class PersistentBatch:
    """Rows of block ids on the device, one per running request, kept between steps.

    It is the runner's registry of running requests: a request gets a row and its
    `RequestState` when a plan introduces it, and loses both when a plan says it
    finished or was preempted (sampling state lives on in `SamplingState`).
    """
    def __init__(self, max_num_rows: int, max_blocks_per_seq: int, device: torch.device) -> None:
        self.device = torch.device(device)
        self.block_tables = torch.zeros(
            max_num_rows, max_blocks_per_seq, dtype=torch.int32, device=self.device
        )  # [max_num_rows, max_blocks_per_seq]; columns past a row's blocks hold 0
        # Host mirror of the table (slots of decodes are computed from it, vectorized).
        self.host_block_tables = np.zeros((max_num_rows, max_blocks_per_seq), dtype=np.int64)
        self.num_blocks = np.zeros(max_num_rows, dtype=np.int64)  # [max_num_rows]
        self._rows: dict[str, _Row] = {}
        self._free_rows = list(range(max_num_rows - 1, -1, -1))  # pop() takes the lowest
        self.sampled_request_ids: set[str] = set()
        """Requests holding rows whose sampling is more than a plain argmax."""
        self.num_entries_written = 0
        """Block ids written to the device so far (what the incremental update saves)."""

    @property
    def max_blocks_per_seq(self) -> int:
        """Columns of the table: the widest block table any request can have."""
        return self.block_tables.shape[1]

    @property
    def num_rows_in_use(self) -> int:
        """Rows held by requests."""
        return len(self._rows)

    def row_of(self, request_id: str) -> int | None:
        """The row a request holds, or None."""
        row = self._rows.get(request_id)
        return None if row is None else row.index

    def state_of(self, request_id: str) -> RequestState:
        """The kept state of a request that holds a row."""
        return self._rows[request_id].state

    def update(self, plan: SchedulerOutput) -> tuple[list[int], list[int], list[int]]:
        """Bring the rows of the plan's requests up to date.

        Returns, per chunk, its row, its first new position (`num_computed_tokens`) and the
        token there: all a decode needs, gathered in the same pass over the chunks.

        Rows of the plan's finished and preempted requests are zeroed and freed first, then
        its new requests take rows. All writes of the step go to the device as one transfer
        and one scatter (from pinned memory on CUDA), queued behind any step still running.
        """
        zeroed = self._release(plan.finished_request_ids, plan.preempted_request_ids)
        for data in plan.new_requests:
            self._admit(data, zeroed)
        write_rows: list[int] = []
        write_cols: list[int] = []
        write_ids: list[int] = []
        row_indices: list[int] = []
        positions: list[int] = []
        tokens: list[int] = []
        cuts: list[tuple[int, int]] = []  # (row, blocks left) of tables cut since sent
        rows_get = self._rows.get
        for chunk in plan.chunks:
            positions.append(chunk.num_computed_tokens)
            tokens.append(chunk.token_ids[0])
            row = rows_get(chunk.request_id)
            if row is None:
                raise LLMDError(
                    f"the plan runs request {chunk.request_id}, which the runner was never "
                    "sent (or was told had ended)",
                    "plan",
                )
            new_block_ids = chunk.new_block_ids
            if new_block_ids:
                # A table may have been cut since (rejected drafts' blocks): the new blocks
                # take the columns just before `chunk.num_blocks`, over the cut ones.
                num_blocks = chunk.num_blocks
                num_written = num_blocks - len(new_block_ids)
                if num_written < 0:
                    raise LLMDError(
                        f"the plan sends request {chunk.request_id} {len(new_block_ids)} new "
                        f"blocks for a table of {num_blocks}",
                        "plan",
                    )
                if num_blocks > self.max_blocks_per_seq:
                    raise LLMDError(
                        f"request {chunk.request_id} has {num_blocks} blocks, more than the "
                        f"{self.max_blocks_per_seq} a block-table row holds",
                        "max_model_len",
                    )
                write_rows.extend([row.index] * len(new_block_ids))
                write_cols.extend(range(num_written, num_blocks))
                write_ids.extend(new_block_ids)
            if chunk.num_blocks < row.num_blocks:
                cuts.append((row.index, chunk.num_blocks))
            if new_block_ids or chunk.num_blocks < row.num_blocks:
                row.num_blocks = chunk.num_blocks
            row_indices.append(row.index)
        self._zero(zeroed)
        for row_index, num_blocks in cuts:  # past a cut table: zero, as past any table
            self.host_block_tables[row_index, num_blocks:] = 0
            self.block_tables[row_index, num_blocks:] = 0
            self.num_blocks[row_index] = num_blocks
        if write_ids:
            self.host_block_tables[write_rows, write_cols] = write_ids
            np.maximum.at(self.num_blocks, write_rows, np.asarray(write_cols) + 1)
            writes = rows_to_device([write_rows, write_cols, write_ids], torch.int64, self.device)
            self.block_tables[writes[0], writes[1]] = writes[2].to(torch.int32)
            self.num_entries_written += len(write_ids)
        return row_indices, positions, tokens

    def free(self, plan: SchedulerOutput) -> None:
        """Free the rows of a plan's finished and preempted requests (a plan not run)."""
        self._zero(self._release(plan.finished_request_ids, plan.preempted_request_ids))

    def gather(self, row_indices: torch.Tensor, width: int) -> torch.Tensor:
        """The first `width` columns of the given rows: [len(row_indices), width] int32."""
        return self.block_tables[:, :width].index_select(0, row_indices)

    def clear(self) -> None:
        """Free every row (after a failed step, whose plan may be half-applied)."""
        self.block_tables.zero_()
        self.host_block_tables.fill(0)
        self.num_blocks.fill(0)
        self._free_rows = list(range(self.block_tables.shape[0] - 1, -1, -1))
        self._rows.clear()
        self.sampled_request_ids.clear()

    def _admit(self, data: NewRequestData, zeroed: list[int]) -> None:
        """Give a request the plan introduces a row (its old one, rewritten, if it held one)."""
        row = self._rows.get(data.request_id)
        if row is None:
            if not self._free_rows:
                raise LLMDError(
                    f"more than {self.block_tables.shape[0]} requests in one batch",
                    "max_num_seqs",
                )
            row = _Row(self._free_rows.pop(), RequestState.of(data))
            self._rows[data.request_id] = row
        else:  # re-sent whole (after a failed step): rewrite the row
            zeroed.append(row.index)
            row.state, row.num_blocks = RequestState.of(data), 0
        if is_plain_greedy(data.sampling_params):
            self.sampled_request_ids.discard(data.request_id)
        else:
            self.sampled_request_ids.add(data.request_id)

    def _zero(self, rows: list[int]) -> None:
        """Zero the given rows of the table and its host mirror."""
        if rows:
            self.host_block_tables[rows] = 0
            self.num_blocks[rows] = 0
            self.block_tables.index_fill_(0, to_device(rows, torch.int64, self.device), 0)

    def _release(self, *id_lists: Iterable[str]) -> list[int]:
        """Free the rows of the given requests, keeping the used rows dense.

        The last used row moves into each hole (one device row copy), so rows in use are
        always 0..n-1 and a step over all of them can read the table without a gather.
        Returns the rows to zero.
        """
        rows = self._rows
        departed = [rid for ids in id_lists for rid in ids if rid in rows]
        departed = list(dict.fromkeys(departed))
        if not departed:
            return []
        for request_id in departed:
            self._free_rows.append(self._rows.pop(request_id).index)
            self.sampled_request_ids.discard(request_id)
        by_index = {row.index: row for row in self._rows.values()}
        num_used = len(self._rows)
        holes = sorted(index for index in self._free_rows if index < num_used)
        movers = sorted((index for index in by_index if index >= num_used), reverse=True)
        if holes:
            sources = to_device(movers, torch.int64, self.device)
            targets = to_device(holes, torch.int64, self.device)
            self.block_tables.index_copy_(0, targets, self.block_tables.index_select(0, sources))
            self.host_block_tables[holes] = self.host_block_tables[movers]
            self.num_blocks[holes] = self.num_blocks[movers]
            for hole, mover in zip(holes, movers):
                by_index[mover].index = hole
        self._free_rows = list(range(self.block_tables.shape[0] - 1, num_used - 1, -1))
        return list(range(num_used, num_used + len(departed)))
