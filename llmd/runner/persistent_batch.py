"""Device-resident block tables of the running requests, updated row by row across steps.

Rebuilding padded block tables from Python lists every step costs O(requests x blocks) of
host work (41 ms at 256 x 2,000 on a laptop CPU), more than a decode step of a large model.
Here each request keeps one row of a device tensor for as long as it runs: a step writes
only the block ids that appeared since the last step (a new block every `block_size`
tokens, a whole row on admission), so host work per step is O(requests) plus new blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from llmd.engine.request import Request, RequestStatus
from llmd.engine.scheduler_output import SchedulerOutput
from llmd.errors import LLMDError
from llmd.runner.host_transfer import rows_to_device, to_device
from llmd.runner.sampling_batch import is_plain_greedy


@dataclass
class _Row:
    """What one row of the table holds: whose blocks, and how many are written."""

    index: int
    request: Request
    block_ids: list[int]
    """The request's block-id list when the row was last written; a new list object means
    its blocks were freed (preemption) and allocated again, so the row is rewritten."""
    num_written: int


class PersistentBatch:
    """Rows of block ids on the device, one per running request, kept between steps."""

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

    def update(self, plan: SchedulerOutput) -> tuple[list[int], list[int], list[int]]:
        """Bring the rows of the plan's requests up to date.

        Returns, per chunk, its row, its first new position (`num_computed_tokens`) and the
        token there: all a decode needs, gathered in the same pass over the requests.

        Rows of requests that stopped running (finished, aborted, preempted) are zeroed
        and freed first. All writes of the step go to the device as one transfer and one
        scatter (from pinned memory on CUDA), queued behind any step still running.
        """
        zeroed = self._release_departed()
        write_rows: list[int] = []
        write_cols: list[int] = []
        write_ids: list[int] = []
        row_indices: list[int] = []
        positions: list[int] = []
        tokens: list[int] = []
        rows_get = self._rows.get
        for chunk in plan.chunks:
            request = chunk.request
            position = request.num_computed_tokens
            positions.append(position)
            tokens.append(request.all_token_ids[position])
            row = rows_get(request.request_id)
            block_ids = request.block_ids
            if row is None:
                row = self._take_row(request)
            elif row.block_ids is not block_ids or row.request is not request:
                zeroed.append(row.index)  # re-admitted on new blocks: rewrite the row
                row.request, row.block_ids, row.num_written = request, block_ids, 0
            elif len(block_ids) == row.num_written:
                row_indices.append(row.index)  # the common case: nothing new
                continue
            num_blocks = len(block_ids)
            if num_blocks > self.max_blocks_per_seq:
                raise LLMDError(
                    f"request {request.request_id} has {num_blocks} blocks, more than the "
                    f"{self.max_blocks_per_seq} a block-table row holds",
                    "max_model_len",
                )
            if num_blocks > row.num_written:
                write_rows.extend([row.index] * (num_blocks - row.num_written))
                write_cols.extend(range(row.num_written, num_blocks))
                write_ids.extend(block_ids[row.num_written :])
                row.num_written = num_blocks
            row_indices.append(row.index)
        if zeroed:
            self.host_block_tables[zeroed] = 0
            self.num_blocks[zeroed] = 0
            self.block_tables.index_fill_(0, to_device(zeroed, torch.int64, self.device), 0)
        if write_ids:
            self.host_block_tables[write_rows, write_cols] = write_ids
            np.maximum.at(self.num_blocks, write_rows, np.asarray(write_cols) + 1)
            writes = rows_to_device([write_rows, write_cols, write_ids], torch.int64, self.device)
            self.block_tables[writes[0], writes[1]] = writes[2].to(torch.int32)
            self.num_entries_written += len(write_ids)
        return row_indices, positions, tokens

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

    def _take_row(self, request: Request) -> _Row:
        if not self._free_rows:
            raise LLMDError(
                f"more than {self.block_tables.shape[0]} requests in one batch", "max_num_seqs"
            )
        row = _Row(self._free_rows.pop(), request, request.block_ids, 0)
        self._rows[request.request_id] = row
        if not is_plain_greedy(request.sampling_params):
            self.sampled_request_ids.add(request.request_id)
        return row

    def _release_departed(self) -> list[int]:
        """Free the rows of requests no longer running, keeping the used rows dense.

        The last used row moves into each hole (one device row copy), so rows in use are
        always 0..n-1 and a step over all of them can read the table without a gather.
        Returns the rows to zero.
        """
        departed = [
            request_id
            for request_id, row in self._rows.items()
            if row.request.status is not RequestStatus.RUNNING
        ]
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
