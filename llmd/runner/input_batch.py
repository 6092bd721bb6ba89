"""Packs a scheduler plan into one flat token batch plus attention metadata.

No padding: every scheduled token of every request is one row, so a prefill chunk of 500
tokens and 200 one-token decodes cost exactly 700 rows of compute.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from llmd.attention.metadata import AttentionMetadata
from llmd.engine.scheduler_output import SchedulerOutput


@dataclass
class InputBatch:
    """Device tensors for one forward pass."""

    input_ids: torch.Tensor  # [num_tokens] int64
    positions: torch.Tensor  # [num_tokens] int64
    metadata: AttentionMetadata
    logits_indices: torch.Tensor  # [num_sampling] int64: rows whose logits are sampled
    sampling_request_indices: list[int]
    """Index into the plan's chunks of each sampled row, in row order."""


def build_input_batch(
    plan: SchedulerOutput,
    block_size: int,
    device: torch.device,
    block_table_width: int | None = None,
) -> InputBatch:
    """Flatten the plan's chunks (decodes first) into input tensors and attention metadata.

    `block_table_width` fixes the block-table columns (CUDA graphs need a static shape);
    by default it is the widest table in the step.
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
        request = chunk.request
        start = request.num_computed_tokens
        end = start + chunk.num_new_tokens
        input_ids.extend(request.all_token_ids[start:end])
        starts.append(start)
        query_lens.append(chunk.num_new_tokens)
        seq_lens.append(end)
        tables.append(request.block_ids)
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
