"""The rows of penalized verify chunks: drafts counted before each position, and which
samples reach the kept counts, on a hand-laid step."""

from __future__ import annotations

import pytest
import torch

from llmd.engine.scheduler_output import ScheduledChunk
from llmd.runner.verify_penalties import add_preceding_drafts, kept_row_weights, verify_penalty_rows

VOCAB = 16


def step():
    """Sampling rows: 0 = A's last position, 1 = B (a plain decode), 2 = C's last position,
    3-5 = A's draft positions, 6-7 = C's; A and B use penalties, C does not."""
    a = ScheduledChunk(None, 4, True, "a", token_ids=[1, 5, 6, 7], num_draft_tokens=3)
    b = ScheduledChunk(None, 1, True, "b", token_ids=[2])
    c = ScheduledChunk(None, 3, True, "c", token_ids=[3, 8, 9], num_draft_tokens=2)
    return [a, b, c], [a, a, a, c, c], [0, 1, 3, 4, 5]


def test_each_position_counts_the_drafts_before_it():
    chunks, draft_chunks, penalized_rows = step()
    rows = verify_penalty_rows(chunks, draft_chunks, penalized_rows, VOCAB, "cpu")
    counts = torch.zeros(len(penalized_rows), VOCAB)
    add_preceding_drafts(counts, rows)
    nonzero = {position: counts[position].nonzero().flatten().tolist() for position in range(5)}
    # Positions among penalized rows: 0 = A's last (after drafts 5, 6, 7), 1 = B (none),
    # 2-4 = A's drafts' positions (after none, after 5, after 5 and 6).
    assert nonzero == {0: [5, 6, 7], 1: [], 2: [], 3: [5], 4: [5, 6]}
    assert counts.sum() == 6


@pytest.mark.parametrize(
    ("a_samples", "a_last", "want"),
    [
        ([5, 6, 7], 4, [1, 1, 1, 1, 1]),  # every draft accepted: the bonus counts too
        ([5, 6, 0], 4, [0, 1, 1, 1, 1]),  # the third differs: it is output, the bonus is not
        ([5, 0, 7], 4, [0, 1, 1, 1, 0]),  # the second differs: the third is rejected
        ([0, 6, 7], 4, [0, 1, 1, 0, 0]),  # only the first sample is output
    ],
)
def test_only_the_accepted_run_is_kept(a_samples, a_last, want):
    chunks, draft_chunks, penalized_rows = step()
    rows = verify_penalty_rows(chunks, draft_chunks, penalized_rows, VOCAB, "cpu")
    c_samples = [0, 0]  # C rejects everything: not penalized, so it must not matter
    sampled = torch.tensor([a_last, 2, 9, *a_samples, *c_samples])
    assert kept_row_weights(rows, sampled, len(penalized_rows)).tolist() == want


def test_a_step_without_penalized_verify_chunks_has_no_layout():
    chunks, draft_chunks, _ = step()
    assert verify_penalty_rows(chunks, draft_chunks, [1], VOCAB, "cpu") is None
