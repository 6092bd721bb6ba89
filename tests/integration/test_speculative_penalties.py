"""Speculative decoding with repetition, presence and frequency penalties: same tokens.

A verify step samples every draft position at once, so each position's penalties must
count the drafts before it as outputs, and only the accepted run may reach the request's
kept counts; either mistake changes the continuation within a few tokens, which the
oracle proposer's runs of every acceptance length would show.
"""

from __future__ import annotations

import pytest

from llmd import LLM, SamplingParams
from tests.oracle_proposer import OracleProposer
from tests.tiny_model import make_tiny_model

MAX_TOKENS = 24
PROMPTS = [[11, 12, 13, 14] * 6, [5, 9, 3, 7, 5, 9, 3], list(range(20, 60)), [42]]
PARAMS = [
    SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True,
                   repetition_penalty=1.4),
    SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True,
                   presence_penalty=0.8, frequency_penalty=0.6),
    SamplingParams(temperature=0.9, seed=11, max_tokens=MAX_TOKENS, ignore_eos=True,
                   repetition_penalty=1.2, frequency_penalty=0.5),
    SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True,
                   presence_penalty=1.0),
]  # fmt: skip


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("spec-penalties"), "llama")


def make_llm(path, speculate: bool, **kwargs) -> LLM:
    if speculate:
        kwargs.update(speculative_method="ngram", num_speculative_tokens=4, prompt_lookup_min=1)
    return LLM(str(path), device="cpu", dtype="float32", block_size=4, attention_backend="cpu",
               **kwargs)  # fmt: skip


def token_ids(llm: LLM, params=PARAMS) -> list[list[int]]:
    return [output.token_ids for output in llm.generate(PROMPTS, params)]


@pytest.fixture(scope="module")
def expected(model_path):
    return token_ids(make_llm(model_path, False, num_blocks=256))


def test_the_penalties_change_the_continuations(model_path, expected):
    plain = [SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)] * 4
    unpenalized = token_ids(make_llm(model_path, False, num_blocks=256), plain)
    assert sum(a != b for a, b in zip(unpenalized, expected)) >= 2


@pytest.mark.parametrize("period", [0, 2, 3])
@pytest.mark.parametrize(
    "scenario",
    [{"num_blocks": 256}, {"num_blocks": 20, "max_num_batched_tokens": 32}],
    ids=["batched", "preempted"],
)
def test_penalized_requests_draft_and_keep_their_tokens(model_path, expected, period, scenario):
    llm = make_llm(model_path, True, **scenario)
    speculator = llm.engine.scheduler.speculator
    speculator.proposer = OracleProposer(PROMPTS, expected, period)
    assert token_ids(llm) == expected
    totals = speculator.totals
    assert totals.num_drafts > 0 and totals.num_accepted_tokens > 0
    if period == 0:
        assert totals.num_accepted_tokens == totals.num_draft_tokens
    else:
        assert totals.num_accepted_tokens < totals.num_draft_tokens
    if scenario["num_blocks"] == 20:
        assert llm.engine.scheduler.num_preemptions > 0


def test_ngram_drafts_keep_penalized_output(model_path, expected):
    llm = make_llm(model_path, True, num_blocks=256)
    assert token_ids(llm) == expected
    assert llm.engine.scheduler.speculator.totals.num_drafts > 0
