"""Sampler: greedy, truncation (top-k/top-p/min-p), temperature, seeds, penalties, logprobs."""

from __future__ import annotations

import math

import pytest
import torch

from llmd.engine.request import Request
from llmd.runner.sampler import (
    Sampler,
    SampleRow,
    apply_penalties,
    build_sampling_batch,
)
from llmd.sampling_params import SamplingParams

VOCAB = 8
EOS = 7


def _row(output_token_ids: list[int] | None = None, prompt: list[int] | None = None, **params):
    return SampleRow(
        SamplingParams(max_tokens=64, **params),
        prompt_token_ids=prompt or [1, 2],
        output_token_ids=output_token_ids or [],
        eos_token_ids=(EOS,),
    )


def _sample(logits: torch.Tensor, rows: list[SampleRow], sampler: Sampler | None = None):
    batch = build_sampling_batch(rows, logits.shape[1], "cpu")
    return (sampler or Sampler(seed=0))(logits, batch)


def _logits_from_probs(probs: list[float]) -> torch.Tensor:
    return torch.tensor(probs).log()[None, :]  # [1, vocab]


def test_greedy_is_argmax_with_first_index_on_ties():
    logits = torch.tensor([[0.0, 3.0, 3.0, 1.0], [5.0, 0.0, 0.0, 5.0], [0.0, 0.0, 0.0, 9.0]])
    rows = [_row(temperature=0.0) for _ in range(3)]
    batch = build_sampling_batch(rows, 4, "cpu")
    assert batch.is_argmax_only
    assert Sampler(0)(logits, batch).token_ids == [1, 0, 3]


def test_greedy_rows_mixed_with_random_rows():
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(1))
    rows = [_row(temperature=0.0 if i % 2 else 1.0, seed=i) for i in range(6)]
    token_ids = _sample(logits, rows).token_ids
    argmax = logits.argmax(-1).tolist()
    assert [token_ids[i] for i in (1, 3, 5)] == [argmax[i] for i in (1, 3, 5)]


def test_top_k_one_equals_greedy():
    logits = torch.randn(16, 40, generator=torch.Generator().manual_seed(2))
    rows = [_row(temperature=1.5, top_k=1) for _ in range(16)]
    assert _sample(logits, rows).token_ids == logits.argmax(-1).tolist()


def test_top_k_keeps_only_the_k_most_likely():
    logits = _logits_from_probs([0.05, 0.3, 0.05, 0.2, 0.1, 0.1, 0.1, 0.1]).repeat(200, 1)
    rows = [_row(top_k=2, seed=i) for i in range(200)]
    assert set(_sample(logits, rows).token_ids) == {1, 3}


def test_top_p_never_samples_outside_the_nucleus():
    # Sorted: 2 (0.5), 5 (0.25), 0 (0.15), rest 0.1 in total; p=0.7 -> nucleus {2, 5}.
    probs = [0.15, 0.02, 0.5, 0.03, 0.02, 0.25, 0.02, 0.01]
    logits = _logits_from_probs(probs).repeat(300, 1)
    rows = [_row(top_p=0.7, seed=i) for i in range(300)]
    assert set(_sample(logits, rows).token_ids) == {2, 5}
    # p=0.8 reaches past 0.75, so token 0 joins the nucleus.
    rows = [_row(top_p=0.8, seed=i) for i in range(300)]
    assert set(_sample(logits, rows).token_ids) == {0, 2, 5}


def test_top_p_small_keeps_the_top_token():
    logits = _logits_from_probs([0.1, 0.4, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05]).repeat(50, 1)
    rows = [_row(top_p=0.01, seed=i) for i in range(50)]
    assert set(_sample(logits, rows).token_ids) == {1}


def test_top_k_and_top_p_combine():
    # Top-p applies to the renormalized top-k: 0.4/0.7 > 0.5, so top_p=0.5 keeps token 0 only
    # (without renormalization the mass before token 1 would be 0.4 < 0.5).
    logits = _logits_from_probs([0.4, 0.3, 0.2, 0.04, 0.03, 0.02, 0.005, 0.005]).repeat(100, 1)
    rows = [_row(top_k=2, top_p=0.5, seed=i) for i in range(100)]
    assert set(_sample(logits, rows).token_ids) == {0}
    rows = [_row(top_k=2, top_p=0.6, seed=i) for i in range(100)]
    assert set(_sample(logits, rows).token_ids) == {0, 1}


def test_min_p_drops_unlikely_tokens():
    # max prob 0.4; min_p=0.5 keeps probs >= 0.2 -> tokens 0, 1, 2.
    probs = [0.4, 0.25, 0.22, 0.04, 0.03, 0.03, 0.02, 0.01]
    logits = _logits_from_probs(probs).repeat(300, 1)
    rows = [_row(min_p=0.5, seed=i) for i in range(300)]
    assert set(_sample(logits, rows).token_ids) == {0, 1, 2}
    rows = [_row(min_p=0.5, top_k=2, seed=i) for i in range(300)]
    assert set(_sample(logits, rows).token_ids) == {0, 1}


def test_sampling_follows_the_distribution_and_temperature():
    probs = [0.6, 0.3, 0.1]
    logits = _logits_from_probs(probs).repeat(3000, 1)
    counts = torch.bincount(torch.tensor(_sample(logits, [_row() for _ in range(3000)]).token_ids))
    frequencies = (counts.float() / 3000).tolist()
    assert all(abs(f - p) < 0.04 for f, p in zip(frequencies, probs))
    # Low temperature sharpens towards the argmax, high temperature flattens.
    cold = _sample(logits, [_row(temperature=0.2) for _ in range(3000)]).token_ids
    hot = _sample(logits, [_row(temperature=5.0) for _ in range(3000)]).token_ids
    assert cold.count(0) / 3000 > 0.95
    assert 0.25 < hot.count(2) / 3000 < 0.40


def test_seed_gives_same_tokens_in_any_batch_position_or_composition():
    generator = torch.Generator().manual_seed(3)
    target_logits = torch.randn(1, 64, generator=generator)

    def run(num_before: int, num_after: int, engine_seed: int, num_outputs: int) -> int:
        others_before = torch.randn(num_before, 64, generator=generator)
        others_after = torch.randn(num_after, 64, generator=generator)
        logits = torch.cat([others_before, target_logits, others_after])
        rows = [_row(temperature=0.7, top_p=0.9) for _ in range(num_before)]
        rows.append(_row(output_token_ids=[3] * num_outputs, seed=1234, temperature=1.3))
        rows += [_row(temperature=0.0, seed=9) for _ in range(num_after)]
        return _sample(logits, rows, Sampler(engine_seed)).token_ids[num_before]

    for num_outputs in range(6):
        tokens = {run(b, a, s, num_outputs) for b, a, s in [(0, 0, 0), (3, 1, 5), (7, 4, 11)]}
        assert len(tokens) == 1


def test_seeded_tokens_vary_with_seed_and_position():
    logits = torch.zeros(1, 1000)  # uniform: any variation comes from the noise alone
    by_seed = {_sample(logits, [_row(seed=seed)]).token_ids[0] for seed in range(20)}
    assert len(by_seed) > 10
    by_index = {
        _sample(logits, [_row(seed=5, output_token_ids=[1] * n)]).token_ids[0] for n in range(20)
    }
    assert len(by_index) > 10


def test_unseeded_rows_use_the_engine_generator():
    logits = torch.zeros(4, 1000)
    rows = [_row() for _ in range(4)]
    first = _sample(logits, rows, Sampler(7)).token_ids
    assert first == _sample(logits, rows, Sampler(7)).token_ids
    sampler = Sampler(7)
    assert _sample(logits, rows, sampler).token_ids != _sample(logits, rows, sampler).token_ids


def test_apply_penalties_matches_definitions():
    logits = torch.tensor([[2.0, -2.0, 1.0, -1.0, 0.5]])
    prompt_mask = torch.tensor([[True, False, False, False, False]])
    counts = torch.tensor([[0.0, 2.0, 1.0, 0.0, 0.0]])

    def penalize(repetition: float, presence: float, frequency: float) -> list[float]:
        return apply_penalties(
            logits,
            prompt_mask,
            counts,
            torch.tensor([repetition]),
            torch.tensor([presence]),
            torch.tensor([frequency]),
        )[0].tolist()

    # Repetition covers prompt (token 0) and output (1, 2); unseen tokens 3 and 4 are untouched.
    assert penalize(2.0, 0.0, 0.0) == pytest.approx([1.0, -4.0, 0.5, -1.0, 0.5])
    # Presence and frequency cover output tokens only.
    assert penalize(1.0, 0.5, 0.0) == pytest.approx([2.0, -2.5, 0.5, -1.0, 0.5])
    assert penalize(1.0, 0.0, 0.25) == pytest.approx([2.0, -2.5, 0.75, -1.0, 0.5])
    assert penalize(1.0, -1.0, 1.0) == pytest.approx([2.0, -3.0, 1.0, -1.0, 0.5])
    assert logits[0].tolist() == [2.0, -2.0, 1.0, -1.0, 0.5]  # input unchanged


def test_penalties_apply_only_to_penalized_rows_in_a_batch():
    logits = torch.tensor([[1.0, 0.9, 0.0, 0.0], [1.0, 0.9, 0.0, 0.0]])
    rows = [
        _row(temperature=0.0, output_token_ids=[0], presence_penalty=0.5),
        _row(temperature=0.0, output_token_ids=[0]),
    ]
    assert _sample(logits, rows).token_ids == [1, 0]
    rows = [_row(temperature=0.0, prompt=[0], repetition_penalty=1.2), _row(temperature=0.0)]
    assert _sample(logits, rows).token_ids == [1, 0]


def test_min_tokens_suppresses_eos_and_stop_token_ids():
    logits = torch.tensor([[0.0, 1.0, 0.0, 5.0, 0.0, 0.0, 0.0, 9.0]])
    params = {"temperature": 0.0, "min_tokens": 2, "stop_token_ids": (3,)}
    assert _sample(logits, [_row(**params)]).token_ids == [1]
    assert _sample(logits, [_row(output_token_ids=[1], **params)]).token_ids == [1]
    assert _sample(logits, [_row(output_token_ids=[1, 1], **params)]).token_ids == [EOS]
    # With ignore_eos the EOS id is an ordinary token; stop ids are still held off.
    assert _sample(logits, [_row(ignore_eos=True, **params)]).token_ids == [EOS]
    random_rows = [_row(min_tokens=1, stop_token_ids=(3,), seed=i) for i in range(100)]
    assert {3, EOS}.isdisjoint(_sample(logits.repeat(100, 1), random_rows).token_ids)


def test_logprobs_are_raw_log_softmax_with_rank_and_top_n():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0], [0.0, 0.0, 4.0, 1.0], [2.0, 1.0, 0.0, 0.0]])
    rows = [
        _row(temperature=0.0, logprobs=2, repetition_penalty=2.0, prompt=[3], output_token_ids=[1]),
        _row(temperature=0.0, logprobs=0),
        _row(temperature=0.0),
    ]
    output = _sample(logits, rows)
    expected = torch.log_softmax(logits, dim=-1)
    first, second, third = output.logprobs
    # The penalty halves token 1's logit, so the sampled token is 2, ranked second raw.
    assert output.token_ids == [2, 2, 0]
    assert first.token_id == 2 and first.rank == 2
    assert first.logprob == pytest.approx(expected[0, 2].item())
    assert first.top_token_ids == (1, 2)
    assert first.top_logprobs == pytest.approx(expected[0, [1, 2]].tolist())
    assert second.rank == 1 and second.top_token_ids == () and second.top_logprobs == ()
    assert second.logprob == pytest.approx(expected[1, 2].item())
    assert third is None
    assert math.isclose(sum(math.exp(v) for v in expected[0].tolist()), 1.0, rel_tol=1e-5)


def test_builder_accepts_requests():
    params = SamplingParams(temperature=0.0, presence_penalty=1.0, max_tokens=8)
    request = Request("r0", [0, 1], params, eos_token_ids=(EOS,))
    request.append_token(0, now=0.0)
    batch = build_sampling_batch([request], VOCAB, "cpu")
    assert batch.penalties is not None
    assert batch.penalties.output_token_counts[0].tolist() == [1.0] + [0.0] * (VOCAB - 1)
    logits = torch.tensor([[1.0, 0.5, 0, 0, 0, 0, 0, 0]])
    assert Sampler(0)(logits, batch).token_ids == [1]


def test_every_feature_in_one_batch():
    logits = torch.randn(6, 64, generator=torch.Generator().manual_seed(4))
    rows = [
        _row(temperature=0.0, logprobs=3),
        _row(temperature=0.9, top_k=5, seed=1, output_token_ids=[4, 4], frequency_penalty=1.0),
        _row(temperature=1.1, top_p=0.8, min_p=0.05, logprobs=1),
        _row(temperature=0.7, top_k=-1, repetition_penalty=1.3, min_tokens=3, seed=2),
        _row(temperature=0.0, presence_penalty=-0.5, output_token_ids=[9]),
        _row(temperature=1.0, top_k=3, top_p=0.5, stop_token_ids=(1,), min_tokens=1),
    ]
    output = _sample(logits, rows)
    assert len(output.token_ids) == 6 and all(0 <= t < 64 for t in output.token_ids)
    assert output.token_ids[0] == logits[0].argmax().item()
    penalized = logits[1].clone()
    penalized[4] -= 2.0  # frequency penalty 1.0 times two occurrences
    assert output.token_ids[1] in penalized.topk(5).indices.tolist()
    assert output.token_ids[3] != EOS and output.token_ids[5] != 1
    assert [entry is not None for entry in output.logprobs] == [1, 0, 1, 0, 0, 0]
    assert len(output.logprobs[0].top_token_ids) == 3 and len(output.logprobs[2].top_logprobs) == 1
    assert output.logprobs[2].token_id == output.token_ids[2]
