"""Kept sampling state: seeded requests draw exactly what a fresh generator per row drew
(same tokens for the same seed whatever the batch), generators are made once per request,
and penalty counts kept incrementally on the device equal counts rebuilt from histories."""

from __future__ import annotations

import random
import zlib

import torch

from llmd.engine.request import Request, RequestStatus
from llmd.runner.sampler import Sampler, build_sampling_batch
from llmd.runner.sampling_state import SamplingState
from llmd.sampling_params import SamplingParams

VOCAB = 50
CPU = torch.device("cpu")


def _request(request_id: str, **params) -> Request:
    request = Request(request_id, [1, 2, 3, 4], SamplingParams(max_tokens=500, **params))
    request.status = RequestStatus.RUNNING
    return request


def _run(requests_per_step, sampler_seed, use_state, num_steps, logits_seed=0):
    """Sample `num_steps` steps; step s samples the requests `requests_per_step(s)` returns.

    Returns each request's sampled tokens; logits of a request depend only on its id and
    its output index, so the tokens may depend only on the request, not on the batch.
    """
    state = SamplingState(VOCAB, CPU) if use_state else None
    sampler = Sampler(sampler_seed)
    for step in range(num_steps):
        requests = requests_per_step(step)
        if not requests:
            continue
        logits = torch.stack([
            torch.randn(VOCAB, generator=torch.Generator().manual_seed(
                logits_seed + zlib.crc32(f"{r.request_id}:{r.num_output_tokens}".encode())))
            for r in requests
        ])  # fmt: skip
        batch = build_sampling_batch(requests, VOCAB, CPU, state)
        sample = sampler.sample(logits, batch)
        if state is not None and batch.penalties is not None:
            state.record_sampled(
                batch.penalties.count_slots, sample.token_ids[batch.penalties.row_indices]
            )
        for request, token_id in zip(requests, sample.read(batch).token_ids):
            request.append_token(token_id, 0.0)
    return state


def test_seeded_tokens_are_identical_to_fresh_generators_in_any_batch():
    rng = random.Random(0)

    def make():
        return [_request(f"s{i}", temperature=1.0, top_p=0.9, seed=100 + i) for i in range(6)]

    # Reference: each seeded request alone in its batch, stateless (a new generator per row).
    alone = make()
    _run(lambda step: [alone[step % 6]], sampler_seed=1, use_state=False, num_steps=6 * 20)
    # Kept generators, random batch compositions and orders, another engine seed.
    mixed = make()
    noise = [_request(f"n{i}", temperature=0.8) for i in range(4)]

    def batch(step):
        chosen = [r for r in mixed if r.num_output_tokens < 20 and rng.random() < 0.6]
        chosen += rng.sample(noise, rng.randrange(0, 4))
        rng.shuffle(chosen)
        return chosen

    state = _run(batch, sampler_seed=7, use_state=True, num_steps=200)
    assert all(r.num_output_tokens == 20 for r in mixed)
    assert [r.output_token_ids for r in mixed] == [r.output_token_ids for r in alone]
    assert len({tuple(r.output_token_ids) for r in mixed}) == 6  # seeds really differ
    assert state.num_generators_made == 6  # once per seeded request, not per row per step


def test_kept_penalty_counts_equal_counts_rebuilt_from_history():
    def make():
        return [
            _request("a", temperature=0.0, frequency_penalty=0.7, presence_penalty=0.3),
            _request("b", temperature=0.0, repetition_penalty=1.5),
            _request("c", temperature=0.0),
            _request("d", temperature=0.9, seed=3, frequency_penalty=2.0),
        ]

    rebuilt, kept = make(), make()
    _run(lambda step: rebuilt, sampler_seed=0, use_state=False, num_steps=40)
    state = _run(lambda step: kept, sampler_seed=0, use_state=True, num_steps=40)
    assert [r.output_token_ids for r in kept] == [r.output_token_ids for r in rebuilt]
    assert state.num_histories_counted == 3  # each penalized request counted once
    for request in kept:
        slot = state._slots.get(request.request_id)
        if slot is None:
            continue
        expected = torch.bincount(torch.tensor(request.output_token_ids), minlength=VOCAB)
        assert torch.equal(state.output_counts[slot], expected.float())


def test_state_is_dropped_only_for_ids_named_finished():
    state = SamplingState(VOCAB, CPU)
    request = _request("p", temperature=0.0, frequency_penalty=1.0)
    request.all_token_ids += [5, 5, 9]
    slots = state.penalty_slots([request])
    assert state.output_counts[slots[0], 5] == 2 and state.output_counts[slots[0], 9] == 1
    state.release(["never-seen"])  # a preempted request is not named: its state stays
    assert state.num_requests == 1
    state.release(["p"])
    assert state.num_requests == 0
    # The freed row is reused and refilled from the new request's own history.
    other = _request("q", temperature=0.0, frequency_penalty=1.0)
    other.all_token_ids += [7]
    slot = state.penalty_slots([other])[0]
    assert slot == slots[0]
    assert state.output_counts[slot].sum() == 1 and state.output_counts[slot, 7] == 1
