"""Penalty counts of a verify step: the drafts each row comes after, and the rows that count.

A verify chunk samples every position at once, so the row after draft j must be penalized
as if drafts 1..j were already output, and only the accepted run may enter the request's
kept counts. Both are worked out on the device from the samples, so the step still
launches without waiting for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from llmd.engine.scheduler_output import ScheduledChunk
from llmd.runner.host_transfer import to_device


@dataclass(frozen=True)
class VerifyPenaltyRows:
    """Where the penalized verify chunks of a step sit among its penalized rows."""

    preceding_positions: torch.Tensor  # [num_preceding] int64, positions among penalized rows
    preceding_ids: torch.Tensor  # [num_preceding] int64: a draft output before that row
    draft_rows: torch.Tensor  # [num_draft_rows] int64, sampling rows of the draft positions
    draft_positions: torch.Tensor  # [num_draft_rows] int64, the same among penalized rows
    next_draft_ids: torch.Tensor  # [num_draft_rows] int64: the draft its sample must equal
    segment_firsts: torch.Tensor  # [num_draft_rows] int64: its chunk's first draft row (index)
    bonus_positions: torch.Tensor  # [num_chunks] int64: each chunk's last row, among penalized
    bonus_firsts: torch.Tensor  # [num_chunks] int64: the chunk's first draft row (index)
    bonus_lasts: torch.Tensor  # [num_chunks] int64: the chunk's last draft row (index)


def verify_penalty_rows(
    chunks: Sequence[ScheduledChunk],
    draft_chunks: Sequence[ScheduledChunk],
    penalized_rows: Sequence[int],
    vocab_size: int,
    device: torch.device | str,
) -> VerifyPenaltyRows | None:
    """The layout of the penalized verify chunks, or None when the step has none.

    Sampling rows are the chunks' own rows (a verify chunk's is its last position) and
    then the draft positions, each verify chunk's in order (`build_step_batch`).
    """
    position_of = {row: position for position, row in enumerate(penalized_rows)}
    first_draft_row: dict[int, int] = {}
    for offset, chunk in enumerate(draft_chunks):
        first_draft_row.setdefault(id(chunk), len(chunks) + offset)
    preceding_positions: list[int] = []
    preceding_ids: list[int] = []
    draft_rows: list[int] = []
    next_draft_ids: list[int] = []
    segment_firsts: list[int] = []
    bonus: tuple[list[int], list[int], list[int]] = ([], [], [])
    for chunk_row, chunk in enumerate(chunks):
        if not chunk.is_verify or chunk_row not in position_of:
            continue
        draft_ids = chunk.token_ids[-chunk.num_draft_tokens :]
        first = len(draft_rows)
        start = first_draft_row[id(chunk)]
        offset_rows = [*range(start, start + chunk.num_draft_tokens), chunk_row]
        for offset, row in enumerate(offset_rows):
            for draft_id in draft_ids[:offset]:  # the drafts output before this position
                if 0 <= draft_id < vocab_size:
                    preceding_positions.append(position_of[row])
                    preceding_ids.append(draft_id)
            if offset < chunk.num_draft_tokens:
                draft_rows.append(row)
                next_draft_ids.append(draft_ids[offset])
                segment_firsts.append(first)
        bonus[0].append(position_of[chunk_row])
        bonus[1].append(first)
        bonus[2].append(len(draft_rows) - 1)
    if not bonus[0]:
        return None

    def ints(values: list[int]) -> torch.Tensor:
        return to_device(values, torch.int64, device)

    return VerifyPenaltyRows(
        preceding_positions=ints(preceding_positions),
        preceding_ids=ints(preceding_ids),
        draft_rows=ints(draft_rows),
        draft_positions=ints([position_of[row] for row in draft_rows]),
        next_draft_ids=ints(next_draft_ids),
        segment_firsts=ints(segment_firsts),
        bonus_positions=ints(bonus[0]),
        bonus_firsts=ints(bonus[1]),
        bonus_lasts=ints(bonus[2]),
    )


def add_preceding_drafts(counts: torch.Tensor, rows: VerifyPenaltyRows) -> None:
    """Count each row's preceding drafts as outputs ([num_penalized, vocab] counts, in place)."""
    ones = torch.ones(rows.preceding_ids.shape[0], dtype=counts.dtype, device=counts.device)
    counts.index_put_((rows.preceding_positions, rows.preceding_ids), ones, accumulate=True)


def kept_row_weights(
    rows: VerifyPenaltyRows, sampled_ids: torch.Tensor, num_penalized: int
) -> torch.Tensor:  # [num_penalized] float32, 1 where the row's sample is output
    """1 for each penalized row whose sample the step outputs, 0 for the rejected ones.

    A verify chunk outputs its samples while each equals the draft at its position, then
    the first that differs (or the last row's, when every draft matched): a row counts
    when no row before it in its chunk differed from its draft.
    """
    mismatches = (sampled_ids[rows.draft_rows] != rows.next_draft_ids).float()  # [num_draft_rows]
    inclusive = torch.cumsum(mismatches, dim=0)
    exclusive = inclusive - mismatches
    weights = torch.ones(num_penalized, dtype=torch.float32, device=sampled_ids.device)
    weights[rows.draft_positions] = (exclusive == exclusive[rows.segment_firsts]).float()
    weights[rows.bonus_positions] = (
        inclusive[rows.bonus_lasts] == exclusive[rows.bonus_firsts]
    ).float()
    return weights
