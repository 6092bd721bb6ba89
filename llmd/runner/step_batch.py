"""Builds a step's input tensors from a plan and the persistent batch's device block tables.

The same tensors as `input_batch.build_input_batch` (which rebuilds everything from Python
lists and stays as the reference), but block tables come from `PersistentBatch` rows and
all small per-step arrays travel to the device in one pinned transfer. Host work is
O(tokens + requests), never O(requests x blocks).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch

from llmd.attention.metadata import AttentionMetadata
from llmd.engine.scheduler_output import PENDING_TOKEN_ID, ScheduledChunk, SchedulerOutput
from llmd.errors import require
from llmd.runner.host_transfer import arrays_to_device, to_device
from llmd.runner.input_batch import PADDING_SLOT, DecodeBuffers, InputBatch
from llmd.runner.pending_tokens import PendingTokens, pending_source
from llmd.runner.persistent_batch import PersistentBatch
from llmd.runner.prompt_logprobs import PromptLogprobSpan, prompt_logprob_span
from llmd.runner.sampling_batch import SamplingBatch, build_sampling_batch, greedy_sampling_batch
from llmd.runner.sampling_state import SamplingState
from llmd.runner.verify_penalties import add_preceding_drafts, verify_penalty_rows


def build_step_batch(
    plan: SchedulerOutput,
    block_size: int,
    persistent: PersistentBatch,
    pending: PendingTokens | None = None,
) -> InputBatch:
    """Flatten the plan into an unpadded batch over persistent block tables.

    Sequences come decodes first, each part in the order of its persistent rows (not the
    plan's), so that a step over rows 0..n-1 reads the table in place, without a gather;
    `sampling_request_indices` still name the plan's chunks. Decodes are packed with
    vectorized numpy over the host mirror of the table (one token per request), prefill
    chunks token by token. A request's last input token may be `PENDING_TOKEN_ID` (async
    scheduling): it is then copied on the device from `pending`, the previous step's ids.
    """
    plan_rows, first_positions, first_tokens = persistent.update(plan)
    chunks = plan.chunks
    num_seqs = len(chunks)
    rows_np = np.array(plan_rows, dtype=np.int64)
    decode_order, prefill_order = _split_decodes_first(plan, rows_np)
    num_decodes = len(decode_order)

    # Decodes: one token each, at position num_computed_tokens (gathered by the update).
    decode_rows = rows_np[decode_order]
    positions_np = np.array(first_positions, dtype=np.int64)[decode_order]
    tokens_np = np.array(first_tokens, dtype=np.int64)[decode_order]
    slots_np = (
        persistent.host_block_tables[decode_rows, positions_np // block_size] * block_size
        + positions_np % block_size
    )  # [num_decodes]
    pending_rows: list[int] = []
    pending_sources: list[int] = []
    for row in np.flatnonzero(tokens_np == PENDING_TOKEN_ID).tolist():
        pending_rows.append(row)
        request_id = chunks[decode_order[row]].request_id
        pending_sources.append(pending_source(pending, request_id))
    if pending_rows:
        tokens_np[pending_rows] = 0

    # Prefill chunks (and recomputation): token by token.
    input_ids: list[int] = []
    positions: list[int] = []
    slots: list[int] = []
    query_lens: list[int] = [1] * num_decodes
    prefill_seq_lens: list[int] = []
    sampling_indices: list[int] = list(decode_order)
    logits_rows: list[int] = list(range(num_decodes))
    width = int(persistent.num_blocks[decode_rows].max()) if num_decodes else 1
    spans: list[PromptLogprobSpan] = []
    draft_rows: list[int] = []
    draft_indices: list[int] = []
    for index in prefill_order:
        chunk = chunks[index]
        start = chunk.num_computed_tokens
        end = start + chunk.num_new_tokens
        row = plan_rows[index]
        state = persistent.state_of(chunk.request_id)
        num_top = state.sampling_params.prompt_logprobs
        if num_top is not None:
            span = prompt_logprob_span(
                chunk.request_id, state.prompt_token_ids, num_top, start, end,
                num_decodes + len(input_ids),
            )  # fmt: skip
            if span is not None:
                spans.append(span)
        token_ids = chunk.token_ids
        if token_ids[-1] == PENDING_TOKEN_ID:
            pending_rows.append(num_decodes + len(input_ids) + len(token_ids) - 1)
            pending_sources.append(pending_source(pending, chunk.request_id))
            token_ids = [*token_ids[:-1], 0]  # the plan's list stays as sent
        input_ids.extend(token_ids)
        positions.extend(range(start, end))
        slots.extend(_slots(persistent.host_block_tables[row], start, end, block_size))
        query_lens.append(chunk.num_new_tokens)
        prefill_seq_lens.append(end)
        width = max(width, chunk.num_blocks)
        if chunk.is_sampling:
            sampling_indices.append(index)
            logits_rows.append(num_decodes + len(input_ids) - 1)
            if chunk.num_draft_tokens:  # a verify chunk: sampled at every position
                first_row = num_decodes + len(input_ids) - chunk.num_new_tokens
                draft_rows.extend(range(first_row, first_row + chunk.num_draft_tokens))
                draft_indices.extend([index] * chunk.num_draft_tokens)

    num_tokens = num_decodes + len(input_ids)
    ids, positions_t, slots_t, logits_t, dst, src = arrays_to_device([
        np.concatenate([tokens_np, np.array(input_ids, dtype=np.int64)]),
        np.concatenate([positions_np, np.array(positions, dtype=np.int64)]),
        np.concatenate([slots_np, np.array(slots, dtype=np.int64)]),
        np.array(logits_rows + draft_rows, dtype=np.int64),
        np.array(pending_rows, dtype=np.int64),
        np.array(pending_sources, dtype=np.int64),
    ], np.int64, persistent.device)  # fmt: skip
    if pending_rows:
        ids = ids.clone()
        ids[dst] = pending.token_ids[src]
    seq_lens_np = np.concatenate([positions_np + 1, np.array(prefill_seq_lens, dtype=np.int64)])
    query_start_loc = np.zeros(num_seqs + 1, dtype=np.int64)
    np.cumsum(query_lens, out=query_start_loc[1:])
    row_indices = np.concatenate([decode_rows, rows_np[prefill_order]])
    query_start_loc_t, seq_lens_t, rows_t = arrays_to_device(
        [query_start_loc, seq_lens_np, row_indices], np.int32, persistent.device
    )
    if row_indices[-1] == num_seqs - 1 and (row_indices == np.arange(num_seqs)).all():
        block_tables = persistent.block_tables[:num_seqs, :width]  # a view: no copy
    else:
        block_tables = persistent.gather(rows_t, width)  # [num_seqs, width] int32
    seq_lens = seq_lens_np.tolist()
    metadata = AttentionMetadata(
        num_decode_seqs=num_decodes,
        num_prefill_seqs=num_seqs - num_decodes,
        num_tokens=num_tokens,
        slot_mapping=slots_t,
        query_start_loc=query_start_loc_t,
        seq_lens=seq_lens_t,
        block_tables=block_tables,
        max_query_len=max(query_lens),
        max_seq_len=max(seq_lens),
        query_lens_cpu=query_lens,
        seq_lens_cpu=seq_lens,
    )
    return InputBatch(
        input_ids=ids,
        positions=positions_t,
        metadata=metadata,
        logits_indices=logits_t,
        sampling_request_indices=sampling_indices,
        prompt_logprob_spans=spans,
        draft_request_indices=draft_indices,
    )


def _slots(table_row: np.ndarray, start: int, end: int, block_size: int) -> np.ndarray:
    """KV slots of positions start..end-1 of the request whose block-table row is given."""
    positions = np.arange(start, end)  # [end - start]
    return table_row[positions // block_size] * block_size + positions % block_size


def _split_decodes_first(plan: SchedulerOutput, rows: np.ndarray) -> tuple[list, list]:
    """Chunk indices of the decodes and of the rest, each part sorted by persistent row.

    The scheduler already puts decodes first and counts them; the per-chunk scan runs only
    when a plan says otherwise. Sorting is skipped when the rows already ascend.
    """
    chunks = plan.chunks
    num_seqs = len(chunks)
    num_decodes = plan.num_decode_tokens
    is_counted = 0 <= num_decodes <= num_seqs and (
        (num_decodes == 0 or (chunks[0].is_decode and chunks[num_decodes - 1].is_decode))
        and (num_decodes == num_seqs or not chunks[num_decodes].is_decode)
    )
    if is_counted:
        decodes, rest = list(range(num_decodes)), list(range(num_decodes, num_seqs))
    else:
        decodes = [i for i, chunk in enumerate(chunks) if chunk.is_decode]
        rest = [i for i, chunk in enumerate(chunks) if not chunk.is_decode]
    parts = []
    for part in (decodes, rest):
        part_rows = rows[part]
        if len(part) > 1 and (np.diff(part_rows) < 0).any():
            part = [part[i] for i in np.argsort(part_rows, kind="stable").tolist()]
        parts.append(part)
    return parts[0], parts[1]


def fill_decode_buffers(
    plan: SchedulerOutput,
    block_size: int,
    persistent: PersistentBatch,
    buffers: DecodeBuffers,
    num_padded_seqs: int,
    pending: PendingTokens | None = None,
) -> InputBatch:
    """Write a decode-only plan into the graphs' static buffers as `num_padded_seqs` rows.

    Padding rows store nothing (slot -1) and attend to nothing (context 0); block tables
    are copied on the device from the persistent rows, so no block list is re-sent.
    """
    num_seqs = len(plan.chunks)
    buffers.check_rows(num_seqs, num_padded_seqs)
    row_indices, first_positions, first_tokens = persistent.update(plan)
    token_ids = first_tokens
    positions = first_positions
    pending_rows: list[int] = []
    pending_sources: list[int] = []
    width = 1
    for index, chunk in enumerate(plan.chunks):
        require(chunk.is_decode, "plan", "a decode batch holds one-token sampling chunks only")
        if token_ids[index] == PENDING_TOKEN_ID:
            pending_rows.append(index)
            pending_sources.append(pending_source(pending, chunk.request_id))
            token_ids[index] = 0
        width = max(width, chunk.num_blocks)
    positions_np = np.array(positions, dtype=np.int64)  # [num_seqs]
    slots = (
        persistent.host_block_tables[row_indices, positions_np // block_size] * block_size
        + positions_np % block_size
    ).tolist()  # [num_seqs]
    seq_lens = (positions_np + 1).tolist()
    buffers.check_table_width(width)
    num_padding = num_padded_seqs - num_seqs
    seq_lens += [0] * num_padding
    packed = to_device(
        token_ids + [0] * num_padding + positions + [0] * num_padding
        + slots + [PADDING_SLOT] * num_padding + seq_lens + row_indices
        + pending_rows + pending_sources,
        torch.int64, persistent.device,
    )  # fmt: skip
    num_rows = 3 * num_padded_seqs
    token_rows = packed[:num_rows].view(3, num_padded_seqs)
    buffers.token_rows[:, :num_padded_seqs].copy_(token_rows)
    buffers.seq_lens[:num_padded_seqs].copy_(packed[num_rows : num_rows + num_padded_seqs])
    offset = num_rows + num_padded_seqs
    rows_t = packed[offset : offset + num_seqs]
    buffers.block_tables[:num_seqs, :width].copy_(persistent.gather(rows_t, width))
    if pending_rows:
        offset += num_seqs
        num_pending = len(pending_rows)
        dst = packed[offset : offset + num_pending]
        src = packed[offset + num_pending : offset + 2 * num_pending]
        buffers.token_rows[0].index_copy_(0, dst, pending.token_ids[src])
    return buffers.view(num_padded_seqs, seq_lens, num_seqs)


def build_step_sampling_batch(
    chunks: list[ScheduledChunk],
    persistent: PersistentBatch,
    state: SamplingState,
    draft_chunks: Sequence[ScheduledChunk] = (),
) -> SamplingBatch:
    """The sampling batch of the step's sampling chunks: O(1) when every row is an argmax.

    The persistent batch records, when a request joins, whether its sampling is more than
    an argmax; only then are parameters packed, from the requests' kept state, each row's
    output count set to what it has before this step's sample. `draft_chunks` name the
    verify chunk of each row after those (`InputBatch.draft_request_indices`): such a row
    samples the output at its position, with that output's seed and min_tokens rule, and
    its penalties count the drafts before that position as outputs.
    """
    special = persistent.sampled_request_ids
    if not special or not any(chunk.request_id in special for chunk in chunks):
        return greedy_sampling_batch(len(chunks) + len(draft_chunks), state.vocab_size)
    rows = []
    for chunk in chunks:
        row = persistent.state_of(chunk.request_id)
        row.num_output_tokens = (
            chunk.num_computed_tokens + chunk.num_new_tokens - row.num_prompt_tokens
        )
        rows.append(row)
    offset, previous = 0, None
    for chunk in draft_chunks:
        offset = offset + 1 if chunk is previous else 0
        previous = chunk
        row = persistent.state_of(chunk.request_id)
        num_before = chunk.num_computed_tokens + 1 + offset - row.num_prompt_tokens
        rows.append(dataclasses.replace(row, num_output_tokens=num_before))
    batch = build_sampling_batch(rows, state.vocab_size, state.device, state)
    if batch.penalties is not None and draft_chunks:
        penalized_rows = [i for i, row in enumerate(rows) if row.sampling_params.has_penalties]
        verify_rows = verify_penalty_rows(
            chunks, draft_chunks, penalized_rows, state.vocab_size, state.device
        )
        if verify_rows is not None:
            add_preceding_drafts(batch.penalties.output_token_counts, verify_rows)
            batch.penalties.verify_rows = verify_rows
    return batch
