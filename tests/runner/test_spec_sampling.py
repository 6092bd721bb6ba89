"""Speculative sampling at temperature > 0 keeps the target's distribution (a chi-square
test on a 4-token vocabulary), with the runner's own sampler and the engine's acceptance rule.

The target is a Markov chain (each position's logits depend on the token before it), so a
verify step's rows are the chain's rows at the draft's tokens, as a model's would be; the
draft is fixed (a one-hot proposal, as n-gram drafts are). Over many trials the emitted
3-token sequences must follow the chain's own probabilities; a rule that trusted the draft
instead is rejected by the same test, so it can fail.
"""

from __future__ import annotations

import math
from collections import Counter

import torch

from llmd.engine.speculator import accepted_run
from llmd.runner.sampler import Sampler, SampleRow, build_sampling_batch
from llmd.sampling_params import SamplingParams

VOCAB = 4
LENGTH = 3
DRAFT = [1, 2]
TEMPERATURE = 0.8
CHAIN_LOGITS = torch.tensor(
    [[0.0, 1.5, 0.3, -0.5], [0.2, -0.3, 1.2, 0.0], [0.5, 0.5, -0.2, 0.9], [1.0, 0.0, 0.0, 0.4]]
)  # [previous token, next token]


def target_probability(sequence: tuple[int, ...]) -> float:
    probs = torch.softmax(CHAIN_LOGITS / TEMPERATURE, dim=-1)
    value, previous = 1.0, 0
    for token in sequence:
        value *= float(probs[previous, token])
        previous = token
    return value


def speculative_samples(num_trials: int, accept) -> Counter:
    """Each trial generates LENGTH tokens from token 0, verifying DRAFT's next tokens."""
    sampler = Sampler(seed=1234)
    params = SamplingParams(temperature=TEMPERATURE)
    outputs: list[list[int]] = [[] for _ in range(num_trials)]
    while True:
        active = [i for i, out in enumerate(outputs) if len(out) < LENGTH]
        if not active:
            break
        rows, spans = [], []
        for trial in active:
            out = outputs[trial]
            num_drafts = min(len(DRAFT), LENGTH - len(out) - 1)
            context = [out[-1] if out else 0, *DRAFT[:num_drafts]]
            spans.append((trial, len(rows), num_drafts))
            rows.extend(context)
        logits = CHAIN_LOGITS[rows]  # [num_rows, VOCAB]: the chain's row after each token
        batch = build_sampling_batch([SampleRow(params)] * len(rows), VOCAB, "cpu")
        samples = sampler(logits, batch).token_ids
        for trial, first, num_drafts in spans:
            run = accept(DRAFT[:num_drafts], samples[first : first + num_drafts + 1])
            outputs[trial].extend(run[: LENGTH - len(outputs[trial])])
    return Counter(tuple(out) for out in outputs)


def chi_square(counts: Counter, num_trials: int) -> tuple[float, int]:
    """Pearson's statistic over all VOCAB**LENGTH sequences, and its degrees of freedom."""
    statistic, num_cells = 0.0, 0
    for index in range(VOCAB**LENGTH):
        sequence = tuple((index // VOCAB**p) % VOCAB for p in reversed(range(LENGTH)))
        expected = num_trials * target_probability(sequence)
        statistic += (counts.get(sequence, 0) - expected) ** 2 / expected
        num_cells += 1
    return statistic, num_cells - 1


def test_the_accepted_runs_follow_the_target_distribution():
    num_trials = 40_000
    counts = speculative_samples(num_trials, accepted_run)
    statistic, dof = chi_square(counts, num_trials)
    # The chi-square(63) quantile at 1 - 1e-6 is about 130: a false alarm is that unlikely.
    assert statistic < dof + 6 * math.sqrt(2 * dof), (statistic, dof)
    assert counts[(1, 2, 0)] > 0  # whole drafts were accepted (and bonus tokens drawn)


def test_the_same_test_rejects_a_rule_that_trusts_the_draft():
    def trusting(draft_ids, sampled_ids):
        return [*draft_ids, sampled_ids[len(draft_ids)]]

    num_trials = 40_000
    statistic, dof = chi_square(speculative_samples(num_trials, trusting), num_trials)
    assert statistic > dof + 6 * math.sqrt(2 * dof)
