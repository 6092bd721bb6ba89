"""Packs a scheduler plan into one flat token batch plus attention metadata.

No padding in eager steps: every scheduled token of every request is one row, so a prefill
chunk of 500 tokens and 200 one-token decodes cost exactly 700 rows of compute. Decode-only
steps replayed as CUDA graphs are written instead into preallocated buffers and padded to
the graph's batch size with rows that store nothing and attend to nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from llmd.attention.metadata import AttentionMetadata
from llmd.engine.scheduler_output import ScheduledChunk, SchedulerOutput
from llmd.errors import require

PADDING_SLOT = -1
"""KV-cache slot of a padding row: the Triton KV store skips it."""


@dataclass
class InputBatch:
    """Device tensors for one forward pass."""

    input_ids: torch.Tensor  # [num_tokens] int64
    positions: torch.Tensor  # [num_tokens] int64
    metadata: AttentionMetadata
    logits_indices: torch.Tensor  # [num_sampling] int64: rows whose logits are sampled
    sampling_request_indices: list[int]
    """Index into the plan's chunks of each sampled row, in row order."""
    prompt_logprob_spans: list[Any] = field(default_factory=list)
    """`prompt_logprobs.PromptLogprobSpan`s: rows whose prompt logprobs this step computes."""
    draft_request_indices: list[int] = field(default_factory=list)
    """Speculative decoding: the verify chunk (index into the plan's chunks) of each row
    sampled at a draft token's position, after the sampled rows; a chunk's rows are
    consecutive, in position order (its last position is its row among the sampled)."""


def build_input_batch(
    plan: SchedulerOutput,
    block_size: int,
    device: torch.device,
    block_table_width: int | None = None,
    block_tables: Mapping[str, list[int]] | None = None,
) -> InputBatch:
    """Flatten the plan's chunks (decodes first) into input tensors and attention metadata.

    `block_table_width` fixes the block-table columns (CUDA graphs need a static shape);
    by default it is the widest table in the step. `block_tables` are the requests' whole
    tables by id; by default each chunk's `new_block_ids`, whole when its request is new.
    """
    input_ids: list[int] = []
    query_lens: list[int] = []
    seq_lens: list[int] = []
    starts: list[int] = []
    tables: list[list[int]] = []
    sampling_indices: list[int] = []
    logits_rows: list[int] = []
    num_decode_seqs = 0
    for index, chunk in enumerate(plan.chunks):
        start = chunk.num_computed_tokens
        end = start + chunk.num_new_tokens
        input_ids.extend(chunk.token_ids)
        starts.append(start)
        query_lens.append(chunk.num_new_tokens)
        seq_lens.append(end)
        tables.append(_table_of(chunk, block_tables))
        if chunk.is_decode:
            num_decode_seqs += 1
        if chunk.is_sampling:
            sampling_indices.append(index)
            logits_rows.append(len(input_ids) - 1)

    num_tokens = len(input_ids)
    width = block_table_width or max(len(table) for table in tables)
    padded = [table + [0] * (width - len(table)) for table in tables]
    block_tables_cpu = torch.tensor(padded, dtype=torch.int32)  # [num_seqs, width]
    query_lens_cpu = torch.tensor(query_lens, dtype=torch.int64)
    seq_index = torch.repeat_interleave(torch.arange(len(tables)), query_lens_cpu)  # [num_tokens]
    query_start_loc = torch.zeros(len(tables) + 1, dtype=torch.int32)
    torch.cumsum(query_lens_cpu, 0, out=query_start_loc[1:])
    offsets = torch.arange(num_tokens) - query_start_loc[:-1].long()[seq_index]
    positions = torch.tensor(starts, dtype=torch.int64)[seq_index] + offsets  # [num_tokens]
    block_ids = block_tables_cpu[seq_index, positions // block_size].long()
    slot_mapping = block_ids * block_size + positions % block_size  # [num_tokens]

    metadata = AttentionMetadata(
        num_decode_seqs=num_decode_seqs,
        num_prefill_seqs=len(tables) - num_decode_seqs,
        num_tokens=num_tokens,
        slot_mapping=slot_mapping.to(device, non_blocking=True),
        query_start_loc=query_start_loc.to(device, non_blocking=True),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32).to(device, non_blocking=True),
        block_tables=block_tables_cpu.to(device, non_blocking=True),
        max_query_len=max(query_lens),
        max_seq_len=max(seq_lens),
        query_lens_cpu=query_lens,
        seq_lens_cpu=seq_lens,
    )
    return InputBatch(
        input_ids=torch.tensor(input_ids, dtype=torch.int64).to(device, non_blocking=True),
        positions=positions.to(device, non_blocking=True),
        metadata=metadata,
        logits_indices=torch.tensor(logits_rows, dtype=torch.int64).to(device, non_blocking=True),
        sampling_request_indices=sampling_indices,
    )


def _table_of(chunk: ScheduledChunk, block_tables: Mapping[str, list[int]] | None) -> list[int]:
    """The chunk's whole block table: from `block_tables`, else its new blocks (all of them)."""
    return chunk.new_block_ids if block_tables is None else block_tables[chunk.request_id]


@dataclass
class DecodeBuffers:
    """Preallocated device tensors that decode-only batches are written into, in place.

    A CUDA graph replays with the tensor addresses it was captured with, so each graph reads
    its inputs from row prefixes of these buffers; block tables are as wide as the longest
    allowed context (`ceil(max_model_len / block_size)` columns).
    """

    token_rows: torch.Tensor  # [3, max_num_seqs] int64: input ids, positions, slots
    seq_lens: torch.Tensor  # [max_num_seqs] int32
    query_start_loc: torch.Tensor  # [max_num_seqs + 1] int32: always 0, 1, 2, ...
    block_tables: torch.Tensor  # [max_num_seqs, max_blocks_per_seq] int32
    logits_indices: torch.Tensor  # [max_num_seqs] int64: always 0, 1, 2, ...

    @classmethod
    def allocate(
        cls, max_num_seqs: int, max_blocks_per_seq: int, device: torch.device
    ) -> DecodeBuffers:
        """Buffers for up to `max_num_seqs` decodes, every row filled as padding."""
        # Ids, positions and slots share one tensor, so a step fills all three in one copy.
        token_rows = torch.zeros(3, max_num_seqs, dtype=torch.int64, device=device)
        token_rows[2].fill_(PADDING_SLOT)
        return cls(
            token_rows=token_rows,
            seq_lens=torch.zeros(max_num_seqs, dtype=torch.int32, device=device),
            query_start_loc=torch.arange(max_num_seqs + 1, dtype=torch.int32, device=device),
            block_tables=torch.zeros(
                max_num_seqs, max_blocks_per_seq, dtype=torch.int32, device=device
            ),
            logits_indices=torch.arange(max_num_seqs, dtype=torch.int64, device=device),
        )

    @property
    def max_num_seqs(self) -> int:
        """Most decodes one batch can hold."""
        return self.seq_lens.shape[0]

    @property
    def max_blocks_per_seq(self) -> int:
        """Block-table columns: the widest table any sequence can have."""
        return self.block_tables.shape[1]

    def check_rows(self, num_seqs: int, num_padded_seqs: int) -> None:
        """Raise unless `num_seqs` decodes padded to `num_padded_seqs` rows fit here."""
        require(
            0 < num_seqs <= num_padded_seqs <= self.max_num_seqs,
            "num_padded_seqs",
            f"need 0 < {num_seqs} requests <= {num_padded_seqs} <= {self.max_num_seqs} rows",
        )

    def check_table_width(self, width: int) -> None:
        """Raise unless block tables `width` blocks wide fit here."""
        require(
            width <= self.max_blocks_per_seq,
            "plan",
            f"a block table of {width} blocks exceeds the buffers' {self.max_blocks_per_seq}",
        )

    def view(self, num_padded_seqs: int, seq_lens_cpu: list[int], num_seqs: int) -> InputBatch:
        """The first `num_padded_seqs` rows as a decode batch whose first `num_seqs` sample."""
        metadata = AttentionMetadata(
            num_decode_seqs=num_padded_seqs,
            num_prefill_seqs=0,
            num_tokens=num_padded_seqs,
            slot_mapping=self.token_rows[2, :num_padded_seqs],
            query_start_loc=self.query_start_loc[: num_padded_seqs + 1],
            seq_lens=self.seq_lens[:num_padded_seqs],
            block_tables=self.block_tables[:num_padded_seqs],
            max_query_len=1,
            max_seq_len=max(seq_lens_cpu),
            query_lens_cpu=[1] * num_padded_seqs,
            seq_lens_cpu=seq_lens_cpu,
        )
        return InputBatch(
            input_ids=self.token_rows[0, :num_padded_seqs],
            positions=self.token_rows[1, :num_padded_seqs],
            metadata=metadata,
            logits_indices=self.logits_indices[:num_seqs],
            sampling_request_indices=list(range(num_seqs)),
        )

    def padding_batch(self, num_padded_seqs: int) -> InputBatch:
        """Fill the first `num_padded_seqs` rows with padding (for warm-up and capture)."""
        self.token_rows[:2, :num_padded_seqs].zero_()
        self.token_rows[2, :num_padded_seqs].fill_(PADDING_SLOT)
        self.seq_lens[:num_padded_seqs].zero_()
        return self.view(num_padded_seqs, [0] * num_padded_seqs, num_seqs=0)


def build_decode_batch(
    plan: SchedulerOutput,
    block_size: int,
    buffers: DecodeBuffers,
    num_padded_seqs: int,
    block_tables: Mapping[str, list[int]] | None = None,
) -> InputBatch:
    """Write a decode-only plan into `buffers` as `num_padded_seqs` rows and return views.

    `block_tables` are as in `build_input_batch`.
    Rows past the plan's requests are padding: token 0 at position 0, slot -1 (never
    stored) and context length 0 (attention writes zeros), so they change no state.
    Block-table columns past a row's own blocks keep stale ids that no kernel reads.
    """
    num_seqs = len(plan.chunks)
    buffers.check_rows(num_seqs, num_padded_seqs)
    token_ids: list[int] = []
    positions: list[int] = []
    slots: list[int] = []
    seq_lens: list[int] = []
    tables: list[list[int]] = []
    for chunk in plan.chunks:
        require(chunk.is_decode, "plan", "a decode batch holds one-token sampling chunks only")
        position = chunk.num_computed_tokens
        block_ids = _table_of(chunk, block_tables)
        token_ids.append(chunk.token_ids[0])
        positions.append(position)
        slots.append(block_ids[position // block_size] * block_size + position % block_size)
        seq_lens.append(position + 1)
        tables.append(block_ids)
    width = max(len(table) for table in tables)
    buffers.check_table_width(width)
    num_padding = num_padded_seqs - num_seqs
    seq_lens += [0] * num_padding
    token_rows = torch.tensor(
        [token_ids + [0] * num_padding, positions + [0] * num_padding,
         slots + [PADDING_SLOT] * num_padding],
        dtype=torch.int64,
    )  # fmt: skip
    padded_tables = [table + [0] * (width - len(table)) for table in tables]
    buffers.token_rows[:, :num_padded_seqs].copy_(token_rows, non_blocking=True)
    buffers.seq_lens[:num_padded_seqs].copy_(
        torch.tensor(seq_lens, dtype=torch.int32), non_blocking=True
    )
    buffers.block_tables[:num_seqs, :width].copy_(
        torch.tensor(padded_tables, dtype=torch.int32), non_blocking=True
    )
    return buffers.view(num_padded_seqs, seq_lens, num_seqs)
