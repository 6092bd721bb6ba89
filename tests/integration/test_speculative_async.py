"""Speculative decoding under async scheduling, end to end on a tiny model (CPU).

Async scheduling stays on while speculating: a step in flight is applied first only when
a decode would draft after it or it verifies drafts, and plain decodes (requests backing
off or opted out) pipeline as they do without speculation. Greedy tokens must be the same
as with speculation off in every scenario (alone, batched, prefix hits, chunked prefill,
preemption), for oracle drafts of every acceptance length and for drafts always rejected
(whose backoff leaves stretches of plain decodes, which must really overlap: counted by
`LLMEngine.num_overlapped_steps`); the counters reconcile with independently counted
steps; seeded sampling, penalties and logprobs, and stops inside an accepted run keep
their tokens. The draft-model proposer's async scenarios are in
test_draft_model_speculation.py.
"""

from __future__ import annotations

import pytest
import torch

from llmd import LLM, SamplingParams
from tests.integration.test_speculative_decoding import (
    GREEDY,
    MAX_TOKENS,
    PATTERN,
    make_llm,
    prompts_of,
    token_ids,
)
from tests.oracle_proposer import OracleProposer
from tests.spec_counts import SamplingChunkCounter, assert_counts_reconcile
from tests.tiny_model import make_tiny_model

SCENARIOS = {
    "batched": {"num_blocks": 256},  # alone, batched, then again with prefix hits
    "chunked": {"num_blocks": 256, "max_num_batched_tokens": 7},  # verify steps in budget
    "preempted": {"num_blocks": 40, "max_num_batched_tokens": 32},  # a tiny pool
}
ALWAYS_REJECTED = 1
"""An oracle period that corrupts every draft token: no draft is ever accepted."""


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("spec_async"), "llama")


@pytest.fixture(scope="module")
def expected(model_path):
    """The spec-off, async-off greedy continuations of `prompts_of()`."""
    return token_ids(make_llm(model_path, False, num_blocks=256), prompts_of())


def async_llm(path, speculate: bool = True, **kwargs) -> LLM:
    llm = make_llm(path, speculate, async_scheduling=True, **kwargs)
    assert llm.engine.async_scheduling is True  # speculating does not turn it off
    return llm


@pytest.mark.parametrize("scenario", SCENARIOS.values(), ids=SCENARIOS.keys())
@pytest.mark.parametrize("period", [0, 2, 3, ALWAYS_REJECTED])
def test_async_scheduling_keeps_greedy_output_for_every_acceptance_length(
    model_path, expected, scenario, period
):
    prompts = prompts_of()
    llm = async_llm(model_path, **scenario)
    speculator = llm.engine.scheduler.speculator
    speculator.proposer = OracleProposer(prompts, expected, period)
    for prompt, want in zip(prompts[:2], expected[:2]):
        assert token_ids(llm, [prompt]) == [want]
    assert token_ids(llm, prompts) == expected
    assert token_ids(llm, prompts) == expected  # again: prefix-cache hits
    totals = speculator.totals
    assert totals.num_drafts > 0  # verify steps ran with async scheduling on
    if period == 0:
        assert totals.num_accepted_tokens == totals.num_draft_tokens
    elif period == ALWAYS_REJECTED:
        assert totals.num_accepted_tokens == 0
        # Backing off, the requests decode plainly for 1, 2, 4, ... steps: those pipeline.
        assert llm.engine.num_overlapped_steps > 0
    else:
        assert 0 < totals.num_accepted_tokens < totals.num_draft_tokens
    if scenario["num_blocks"] == 40:
        assert llm.engine.scheduler.num_preemptions > 0
    else:
        assert llm.engine.block_manager.usage().num_prefix_hit_tokens > 0
    assert not llm.engine.has_unfinished_requests()
    llm.engine.scheduler.check_integrity()


def test_requests_that_opt_out_pipeline_as_without_speculation(model_path, expected):
    prompts = prompts_of()
    opted_out = SamplingParams(
        temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True, can_speculate=False
    )
    plain = async_llm(model_path, False, num_blocks=256)
    assert token_ids(plain, prompts, opted_out) == expected
    llm = async_llm(model_path, num_blocks=256)  # n-gram drafts would hit the pattern prompt
    assert token_ids(llm, prompts, opted_out) == expected
    assert llm.engine.scheduler.speculator.totals.num_drafts == 0
    assert llm.engine.num_overlapped_steps == plain.engine.num_overlapped_steps > 0
    # Opted in, the same engine drafts (n-gram: the pattern repeats), with the same output.
    assert token_ids(llm, prompts) == expected
    assert llm.engine.scheduler.speculator.totals.num_accepted_tokens > 0


class FickleProposer(OracleProposer):
    """The oracle's drafts, except that every third ask gets none."""

    num_asks = 0

    def propose(self, token_ids, max_num_tokens):
        self.num_asks += 1
        return [] if self.num_asks % 3 == 0 else super().propose(token_ids, max_num_tokens)


def test_a_verify_step_in_flight_is_applied_first_whatever_the_proposer_says(model_path, expected):
    """The plan after a verify step needs its accepted lengths: it is applied before the
    next plan even when no decode would draft (the ask just after its drafts gets none)."""
    prompts = prompts_of()
    llm = async_llm(model_path, num_blocks=256)
    speculator = llm.engine.scheduler.speculator
    speculator.proposer = FickleProposer(prompts, expected, period=3)
    assert token_ids(llm, prompts) == expected
    assert speculator.totals.num_drafts > 0
    while llm.engine.has_unfinished_requests():
        llm.engine.step()
    llm.engine.scheduler.check_integrity()


@pytest.mark.parametrize("period", [2, 3])
def test_counters_reconcile_with_independently_counted_steps(model_path, expected, period):
    prompt, want = PATTERN * 4, expected[0]
    llm = async_llm(model_path, num_blocks=256)
    speculator = llm.engine.scheduler.speculator
    speculator.proposer = OracleProposer([prompt], [want], period)
    # Both modes launch (a synchronous step then waits): count there.
    counter = SamplingChunkCounter(llm.engine.runner, "launch")
    (output,) = llm.generate([prompt], GREEDY)
    assert output.token_ids == want
    assert_counts_reconcile(output, speculator.totals, counter.num_sampling_chunks)
    assert speculator.totals.num_accepted_tokens < speculator.totals.num_draft_tokens
    if period == 2:  # misses two in a row: the backoff's two plain decodes overlap
        assert llm.engine.num_overlapped_steps > 0


def test_seeded_sampling_penalties_and_logprobs_are_the_same_token_for_token(model_path):
    prompts = prompts_of()[:4]
    params = [
        SamplingParams(temperature=0.8, seed=7, max_tokens=MAX_TOKENS, ignore_eos=True),
        SamplingParams(temperature=1.0, seed=3, top_k=20, max_tokens=MAX_TOKENS, logprobs=2),
        SamplingParams(temperature=0.0, min_tokens=6, max_tokens=MAX_TOKENS, logprobs=1),
        SamplingParams(temperature=0.0, frequency_penalty=1.5, presence_penalty=0.5,
                       max_tokens=MAX_TOKENS, ignore_eos=True),
    ]  # fmt: skip

    def outputs(llm):
        return [
            (o.token_ids, o.finish_reason,
             [(lp.token_id, round(lp.logprob, 4)) for lp in o.logprobs or ()])
            for o in llm.generate(prompts, params)
        ]  # fmt: skip

    want = outputs(make_llm(model_path, False, num_blocks=256))
    continuations = [tokens for tokens, _, _ in want]
    for period in (0, 4, ALWAYS_REJECTED):
        llm = async_llm(model_path, num_blocks=256)
        speculator = llm.engine.scheduler.speculator
        speculator.proposer = OracleProposer(prompts, continuations, period)
        assert outputs(llm) == want, period
        assert speculator.totals.num_drafts > 0


def test_stop_tokens_and_stop_strings_inside_an_accepted_run_end_it_there(model_path, expected):
    base = make_llm(model_path, False, num_blocks=256)
    prompt = prompts_of()[2]
    text = base.generate([prompt], GREEDY)[0].text
    stop_string = text[len(text) // 2 : len(text) // 2 + 3]
    params = [
        SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, stop=[stop_string]),
        SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, stop_token_ids=[expected[2][9]]),
    ]

    def outputs(llm):
        return [
            (o.token_ids, o.text, o.finish_reason, o.stop_reason)
            for o in llm.generate([prompt, prompt], params)
        ]

    want = outputs(base)
    assert [reason for _, _, reason, _ in want] == ["stop", "stop"]
    for period in (0, ALWAYS_REJECTED):
        llm = async_llm(model_path, num_blocks=256)
        llm.engine.scheduler.speculator.proposer = OracleProposer(
            [prompt, prompt], [expected[2], expected[2]], period
        )
        assert outputs(llm) == want, period
        while llm.engine.has_unfinished_requests():  # a sample past the stop may be in flight
            llm.engine.step()
        llm.engine.scheduler.check_integrity()
        assert llm.engine.block_manager.usage().num_used == 0


@pytest.mark.cuda
def test_on_cuda_speculation_keeps_async_scheduling_and_the_output(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    path = make_tiny_model(tmp_path / "llama", "llama")
    kwargs = {"device": "cuda", "dtype": "float32", "block_size": 4, "num_blocks": 256,
              "attention_backend": "triton"}  # fmt: skip
    prompts = prompts_of()
    want = token_ids(LLM(str(path), async_scheduling=False, **kwargs), prompts)
    for period in (0, 3, ALWAYS_REJECTED):
        llm = LLM(str(path), speculative_method="ngram", num_speculative_tokens=4, **kwargs)
        assert llm.engine.async_scheduling is True  # the CUDA default, speculating too
        speculator = llm.engine.scheduler.speculator
        speculator.proposer = OracleProposer(prompts, want, period)
        assert token_ids(llm, prompts) == want, period
        assert speculator.totals.num_drafts > 0
        if period == ALWAYS_REJECTED:
            assert llm.engine.num_overlapped_steps > 0
            assert llm.engine.runner.graph_runner.num_replays > 0  # plain decodes: graphs
        del llm
        torch.cuda.empty_cache()
