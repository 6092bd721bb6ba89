"""Prompt logprob spans: which rows predict which prompt tokens, and their reduction in
bounded passes (never [whole prompt, vocab] logits at once)."""

from __future__ import annotations

import torch

from llmd.runner.prompt_logprobs import (
    ROWS_PER_PASS,
    PromptLogprobs,
    PromptLogprobSpan,
    prompt_logprob_span,
)

VOCAB = 50
HIDDEN = 8


def test_span_covers_the_chunk_up_to_the_last_prompt_position():
    prompt = list(range(10, 20))  # 10 tokens: positions 0..8 predict tokens 1..9
    first = prompt_logprob_span("r", prompt, 2, start=0, end=4, first_row=3)
    assert first == PromptLogprobSpan("r", 0, 3, [11, 12, 13, 14], 2)
    last = prompt_logprob_span("r", prompt, 2, start=8, end=10, first_row=0)
    assert last is not None and last.target_token_ids == [19]  # position 9 is the sampler's
    assert prompt_logprob_span("r", prompt, 2, start=9, end=10, first_row=0) is None
    assert prompt_logprob_span("r", prompt, 2, start=10, end=12, first_row=0) is None  # outputs


def test_reduction_matches_log_softmax_in_bounded_passes():
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(VOCAB, HIDDEN, generator=generator)
    num_positions = ROWS_PER_PASS * 2 + 17
    hidden = torch.randn(num_positions + 5, HIDDEN, generator=generator)
    targets = torch.randint(0, VOCAB, (num_positions,), generator=generator).tolist()
    pass_sizes: list[int] = []

    def compute_logits(rows: torch.Tensor) -> torch.Tensor:
        pass_sizes.append(rows.shape[0])
        return rows @ weight.T

    span = PromptLogprobSpan("r", 7, 5, targets, 3)
    results = PromptLogprobs.compute(compute_logits, hidden, [span]).read()
    assert max(pass_sizes) == ROWS_PER_PASS and sum(pass_sizes) == num_positions
    first_position, entries = results["r"]
    assert first_position == 7 and len(entries) == num_positions
    expected = torch.log_softmax(hidden[5 : 5 + num_positions] @ weight.T, dim=-1)
    for index in (0, ROWS_PER_PASS, num_positions - 1):
        entry, row = entries[index], expected[index]
        assert entry.token_id == targets[index]
        assert abs(entry.logprob - row[targets[index]].item()) < 1e-5
        assert entry.rank == int((row > row[targets[index]]).sum()) + 1
        assert list(entry.top_token_ids) == row.topk(3).indices.tolist()
