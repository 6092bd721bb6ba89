"""Speculative decoding end to end on a tiny model: the same output with it on and off.

Greedy tokens must not change in any scheduling scenario (alone, batched with prefix
hits, chunked prefill, preemption), on both CPU attention backends; the counters must
reconcile with independently counted steps; a seeded request at temperature > 0 must draw
the same tokens; stops inside an accepted run end it there. The same under async
scheduling: test_speculative_async.py.
An oracle proposer (the spec-off continuation, some positions corrupted) makes runs of
every acceptance length happen on a random model, whose text rarely repeats itself.
"""

from __future__ import annotations

import pytest

from llmd import LLM, SamplingParams
from tests.oracle_proposer import OracleProposer
from tests.spec_counts import SamplingChunkCounter, assert_counts_reconcile
from tests.tiny_model import make_tiny_model

MAX_TOKENS = 24
PATTERN = [11, 12, 13, 14, 15, 16, 17, 18]


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("spec"), "llama")


def prompts_of() -> list[list[int]]:
    """Repetitive prompts (n-gram proposals hit), plain ones, and two sharing a prefix."""
    shared = [(7 * i) % 300 + 20 for i in range(24)]
    return [
        PATTERN * 4,
        [5, 9, 3, 7, 5, 9, 3],
        list(range(20, 60)),
        [42],
        shared + [5, 6, 7],
        shared + [9, 10],
    ]


GREEDY = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)


def make_llm(path, speculate: bool, **kwargs) -> LLM:
    kwargs.setdefault("attention_backend", "cpu")
    if speculate:
        kwargs.update(speculative_method="ngram", num_speculative_tokens=4, prompt_lookup_min=1)
    return LLM(str(path), device="cpu", dtype="float32", block_size=4, **kwargs)


def token_ids(llm: LLM, prompts, params=GREEDY) -> list[list[int]]:
    return [output.token_ids for output in llm.generate(prompts, params)]


@pytest.fixture(scope="module")
def expected(model_path):
    """The spec-off greedy continuations of `prompts_of()`."""
    llm = make_llm(model_path, False, num_blocks=256)
    return token_ids(llm, prompts_of())


@pytest.mark.parametrize("backend", ["cpu", "torch"])
def test_greedy_output_is_the_same_alone_batched_and_with_prefix_hits(
    model_path, expected, backend
):
    prompts = prompts_of()
    llm = make_llm(model_path, True, num_blocks=256, attention_backend=backend)
    assert llm.engine.runner.backend.name == backend
    for prompt, want in zip(prompts, expected):
        assert token_ids(llm, [prompt]) == [want]
    assert token_ids(llm, prompts) == expected
    assert token_ids(llm, prompts) == expected  # again: prefix-cache hits
    assert llm.engine.block_manager.usage().num_prefix_hit_tokens > 0
    totals = llm.engine.scheduler.speculator.totals
    assert totals.num_drafts > 0 and totals.num_accepted_tokens > 0  # the pattern prompt hits
    assert totals.num_accepted_tokens <= totals.num_draft_tokens


@pytest.mark.parametrize("period", [0, 2, 3])
def test_every_acceptance_length_keeps_greedy_output_under_chunking_and_preemption(
    model_path, expected, period
):
    prompts = prompts_of()
    scenarios = [
        {"num_blocks": 256, "max_num_batched_tokens": 7},  # chunked prefill, verify in budget
        {"num_blocks": 40, "max_num_batched_tokens": 32},  # preemption by a tiny pool
    ]
    for scenario in scenarios:
        llm = make_llm(model_path, True, **scenario)
        speculator = llm.engine.scheduler.speculator
        speculator.proposer = OracleProposer(prompts, expected, period)
        assert token_ids(llm, prompts) == expected, scenario
        totals = speculator.totals
        assert totals.num_drafts > 0
        if period == 0:
            assert totals.num_accepted_tokens == totals.num_draft_tokens  # all accepted
        else:
            assert 0 < totals.num_accepted_tokens < totals.num_draft_tokens
        if scenario["num_blocks"] == 40:
            assert llm.engine.scheduler.num_preemptions > 0


def test_counters_reconcile_with_independently_counted_steps(model_path, expected):
    prompt, want = PATTERN * 4, expected[0]
    llm = make_llm(model_path, True, num_blocks=256)
    speculator = llm.engine.scheduler.speculator
    speculator.proposer = OracleProposer([prompt], [want], period=3)
    counter = SamplingChunkCounter(llm.engine.runner)
    (output,) = llm.generate([prompt], GREEDY)
    assert output.token_ids == want
    totals = speculator.totals
    assert_counts_reconcile(output, totals, counter.num_sampling_chunks)
    assert output.metrics.mean_acceptance_length == totals.mean_acceptance_length > 1


def test_seeded_sampling_logprobs_and_min_tokens_are_the_same_token_for_token(model_path, expected):
    prompts = prompts_of()[:3]
    params = [
        SamplingParams(temperature=0.8, seed=7, max_tokens=MAX_TOKENS, ignore_eos=True),
        SamplingParams(temperature=1.0, seed=3, top_k=20, max_tokens=MAX_TOKENS, logprobs=2),
        SamplingParams(temperature=0.0, min_tokens=6, max_tokens=MAX_TOKENS, logprobs=1),
    ]

    def outputs(llm):
        return [
            (o.token_ids, o.finish_reason,
             [(lp.token_id, round(lp.logprob, 4)) for lp in o.logprobs or ()])
            for o in llm.generate(prompts, params)
        ]  # fmt: skip

    want = outputs(make_llm(model_path, False, num_blocks=256))
    llm = make_llm(model_path, True, num_blocks=256)
    continuations = [tokens for tokens, _, _ in want]
    llm.engine.scheduler.speculator.proposer = OracleProposer(prompts, continuations, period=4)
    assert outputs(llm) == want
    assert llm.engine.scheduler.speculator.totals.num_accepted_tokens > 0


def test_stop_tokens_and_stop_strings_inside_an_accepted_run_end_it_there(model_path, expected):
    base = make_llm(model_path, False, num_blocks=256)
    prompt = prompts_of()[2]
    text = base.generate([prompt], GREEDY)[0].text
    stop_string = text[len(text) // 2 : len(text) // 2 + 3]
    stop_token = expected[2][9]
    params = [
        SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, stop=[stop_string]),
        SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, stop_token_ids=[stop_token]),
    ]

    def outputs(llm):
        return [
            (o.token_ids, o.text, o.finish_reason, o.stop_reason)
            for o in llm.generate([prompt, prompt], params)
        ]

    want = outputs(base)
    assert want[0][2] == "stop" and want[0][3] == stop_string
    assert want[1][2] == "stop" and len(want[1][0]) <= 10
    llm = make_llm(model_path, True, num_blocks=256)
    llm.engine.scheduler.speculator.proposer = OracleProposer(
        [prompt, prompt], [expected[2], expected[2]]
    )
    assert outputs(llm) == want
    assert llm.engine.scheduler.speculator.totals.num_accepted_tokens > 0
    assert not llm.engine.has_unfinished_requests()


def test_steps_with_more_running_requests_than_the_limit_do_not_draft(model_path, expected):
    prompts = prompts_of()[:3]
    params = [
        SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
        for max_tokens in (MAX_TOKENS, 8, 4)  # three run together at first, then fewer
    ]

    def running_counts_of_verify_steps(limit):
        llm = make_llm(model_path, True, num_blocks=256, speculative_max_batch_size=limit)
        llm.engine.scheduler.speculator.proposer = OracleProposer(prompts, expected[:3])
        counts = []
        execute = llm.engine.runner.execute

        def recording_execute(plan):
            if any(chunk.is_verify for chunk in plan.chunks):
                counts.append(len(llm.engine.scheduler.running))
            return execute(plan)

        llm.engine.runner.execute = recording_execute
        outputs = [output.token_ids for output in llm.generate(prompts, params)]
        assert outputs == [want[: p.max_tokens] for want, p in zip(expected, params)]
        return counts

    assert max(running_counts_of_verify_steps(None)) == 3  # unlimited: all three draft
    limited = running_counts_of_verify_steps(2)
    assert limited and max(limited) <= 2


def test_blocks_only_rejected_drafts_reached_go_back_and_the_runner_follows(
    model_path, expected, monkeypatch
):
    """After a verify step a request keeps the blocks of its kept tokens and its next slot
    only; in a small pool the released blocks go to others, and the runner's table rows
    must hold the scheduler's block ids, column for column, after every step."""
    prompts = prompts_of()
    llm = make_llm(model_path, True, num_blocks=40, max_num_batched_tokens=32)
    engine = llm.engine
    engine.scheduler.speculator.proposer = OracleProposer(prompts, expected, period=2)
    block_manager, persistent = engine.block_manager, engine.runner.persistent_batch
    released: list[int] = []
    free_tail = block_manager.free_tail

    def recording_free_tail(request, num_tokens):
        num_released = free_tail(request, num_tokens)
        released.append(num_released)
        assert len(request.block_ids) == block_manager.num_blocks_for(num_tokens)
        return num_released

    monkeypatch.setattr(block_manager, "free_tail", recording_free_tail)
    step = engine.step
    num_rows_checked = 0

    def checked_step():
        nonlocal num_rows_checked
        result = step()
        for request in engine.scheduler.running:
            row = persistent.row_of(request.request_id)
            if row is not None and request.block_ids:
                table = persistent.host_block_tables[row, : len(request.block_ids)]
                assert table.tolist() == request.block_ids, request.request_id
                num_rows_checked += 1
        return result

    monkeypatch.setattr(engine, "step", checked_step)
    assert token_ids(llm, prompts) == expected
    assert sum(released) > 0 and num_rows_checked > 0
    assert engine.scheduler.num_preemptions > 0  # the pool was tight: blocks changed hands
    assert block_manager.usage().num_used == 0
