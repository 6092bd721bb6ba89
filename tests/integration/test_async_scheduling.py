"""Async scheduling on CPU: outputs identical to sync mode for every sampling feature,
decode inputs really taken from the device tensor, no token past a stop, no double finish."""

from __future__ import annotations

import pytest

import llmd.runner.step_batch as step_batch
from llmd import LLM, SamplingParams
from llmd.engine.request import PENDING_TOKEN_ID
from llmd.errors import InvalidParameterError
from tests.tiny_model import make_tiny_model


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("async"), "qwen3")


def _workload(vocab_size: int):
    """Prompts and per-request params touching seeds, penalties, logprobs, stops, lengths."""
    prompts = [[(7 * i + 3 * j) % (vocab_size - 5) + 3 for j in range(4 + 5 * i)] for i in range(8)]
    params = [
        SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True),
        SamplingParams(temperature=0.9, seed=11, max_tokens=15, ignore_eos=True),
        SamplingParams(temperature=0.0, frequency_penalty=1.5, presence_penalty=0.5,
                       max_tokens=14, ignore_eos=True),
        SamplingParams(temperature=0.8, seed=5, repetition_penalty=1.4, top_k=20,
                       max_tokens=13, ignore_eos=True),
        SamplingParams(temperature=1.0, seed=3, min_tokens=4, max_tokens=20, logprobs=3),
        SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True),
        SamplingParams(temperature=1.2, seed=9, top_p=0.8, max_tokens=30, ignore_eos=True,
                       stop_token_ids=tuple(range(3, vocab_size, 4))),
        SamplingParams(temperature=0.7, seed=21, min_p=0.1, max_tokens=9),
    ]  # fmt: skip
    return prompts, params


def _outputs(llm, prompts, params):
    return [
        (o.token_ids, o.finish_reason, o.stop_reason,
         None if o.logprobs is None else [(lp.token_id, round(lp.logprob, 5)) for lp in o.logprobs])
        for o in llm.generate(prompts, params)
    ]  # fmt: skip


def test_async_outputs_equal_sync_outputs_for_every_sampling_feature(model_path, monkeypatch):
    sync = LLM(str(model_path), device="cpu", num_blocks=30, block_size=4,
               max_num_batched_tokens=32, async_scheduling=False)  # fmt: skip
    vocab_size = sync.engine.shape.vocab_size
    prompts, params = _workload(vocab_size)
    expected = _outputs(sync, prompts, params)
    assert any(reason == "stop" for _, reason, _, _ in expected)  # a stop token was hit
    assert sync.engine.scheduler.num_preemptions > 0  # the small pool preempted

    num_pending_inputs = 0
    real_source = step_batch.pending_source

    def counting_source(pending, request_id):
        nonlocal num_pending_inputs
        num_pending_inputs += 1
        return real_source(pending, request_id)

    monkeypatch.setattr(step_batch, "pending_source", counting_source)
    llm = LLM(str(model_path), device="cpu", num_blocks=30, block_size=4,
              max_num_batched_tokens=32, async_scheduling=True)  # fmt: skip
    assert _outputs(llm, prompts, params) == expected
    assert num_pending_inputs > 50  # decode inputs came from the previous step's tensor
    # Once drained, nothing is left in flight and the pool is whole.
    while llm.engine.has_unfinished_requests():
        llm.engine.step()
    llm.engine.scheduler.check_integrity()
    assert llm.engine.block_manager.usage().num_used == 0


def test_no_token_past_a_stop_and_one_finish_per_request(model_path):
    llm = LLM(str(model_path), device="cpu", num_blocks=64, block_size=4, async_scheduling=True)
    engine = llm.engine
    vocab_size = engine.shape.vocab_size
    stop_ids = tuple(range(3, vocab_size))  # any real token stops after min_tokens
    requests = [
        engine.add_request([5, 6, 7, 8 + i], SamplingParams(
            temperature=0.0, max_tokens=50, min_tokens=i, stop_token_ids=stop_ids))
        for i in range(4)
    ]  # fmt: skip
    streamed = {r.request_id: [] for r in requests}
    finishes = {r.request_id: 0 for r in requests}
    num_steps = 0
    while engine.has_unfinished_requests():
        num_steps += 1
        for update in engine.step().updates:
            streamed[update.request.request_id] += update.new_token_ids
            finishes[update.request.request_id] += update.is_finished
    for index, request in enumerate(requests):
        assert request.finish_reason.value == "stop"
        # Stops at the first token allowed to stop: exactly min_tokens + 1 tokens, none after.
        assert len(request.output_token_ids) == index + 1
        assert streamed[request.request_id] == request.output_token_ids
        assert PENDING_TOKEN_ID not in request.all_token_ids
    assert all(count == 1 for count in finishes.values())


def test_async_scheduling_config_is_validated():
    with pytest.raises(InvalidParameterError, match="async_scheduling"):
        LLM(async_scheduling="yes")


@pytest.mark.parametrize(
    ("flags", "expected"),
    [([], None), (["--async-scheduling"], True), (["--no-async-scheduling"], False)],
)
def test_async_scheduling_flag_reaches_the_engine_config(flags, expected):
    import click
    from click.testing import CliRunner

    from llmd.cli_options import ENGINE_OPTIONS, apply_options, pop_engine_kwargs
    from llmd.config import EngineConfig

    seen = {}

    @click.command()
    @apply_options(ENGINE_OPTIONS)
    def command(**kwargs):
        seen["config"] = EngineConfig(**pop_engine_kwargs(kwargs))

    result = CliRunner().invoke(command, flags)
    assert result.exit_code == 0, result.output
    assert seen["config"].async_scheduling is expected


def _stop_cases(llm, vocab_size: int):
    """Prompts, each with params stopped by a string from the middle of its free output."""
    prompts = [
        [(11 * i + 5 * j) % (vocab_size - 5) + 3 for j in range(3 + 2 * i)] for i in range(8)
    ]
    free = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True))
    cases = []
    for prompt, output in zip(prompts, free, strict=True):
        middle = len(output.text) // 2
        stop = output.text[middle : middle + 3]
        if len(stop.strip()) == 3:
            cases.append((prompt, SamplingParams(temperature=0.0, max_tokens=24, stop=[stop])))
        middle_token = output.token_ids[len(output.token_ids) // 2]
        cases.append((prompt, SamplingParams(
            temperature=0.0, max_tokens=24, stop_token_ids=(middle_token,))))  # fmt: skip
    return cases


@pytest.mark.parametrize("batched", [False, True], ids=["alone", "batched"])
def test_a_stop_string_or_token_leaves_no_placeholder_and_async_equals_sync(model_path, batched):
    """Regression: a request ended by a stop string while its next sample was in flight
    kept that step's placeholder (-1) as its last token under async scheduling."""
    results = {}
    for is_async in (False, True):
        llm = LLM(str(model_path), device="cpu", num_blocks=128, block_size=4,
                  async_scheduling=is_async)  # fmt: skip
        cases = _stop_cases(llm, llm.engine.shape.vocab_size)
        assert sum(bool(params.stop) for _, params in cases) >= 4  # stop strings were found
        if batched:
            outputs = llm.generate([p for p, _ in cases], [params for _, params in cases])
        else:
            outputs = [llm.generate([p], params)[0] for p, params in cases]
        for output in outputs:
            assert PENDING_TOKEN_ID not in output.token_ids, output
            assert output.finish_reason == "stop", output
            assert output.metrics.num_generated_tokens == len(output.token_ids)
        results[is_async] = [(o.token_ids, o.text, o.stop_reason) for o in outputs]
    assert results[True] == results[False]


def test_an_abort_while_a_sample_is_in_flight_leaves_no_placeholder(model_path):
    llm = LLM(str(model_path), device="cpu", num_blocks=64, block_size=4, async_scheduling=True)
    engine = llm.engine
    request = engine.add_request([5, 6, 7], SamplingParams(max_tokens=40, ignore_eos=True))
    while request.num_output_tokens < 5:
        engine.step()
    assert request.all_token_ids[-1] == PENDING_TOKEN_ID  # a sample is in flight now
    num_real = request.num_output_tokens - 1
    engine.abort_request(request.request_id)
    assert PENDING_TOKEN_ID not in request.all_token_ids
    assert request.num_output_tokens == num_real
    while engine.has_unfinished_requests():
        engine.step()
    assert PENDING_TOKEN_ID not in request.all_token_ids
    assert request.num_output_tokens == num_real
    engine.scheduler.check_integrity()


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_a_stop_found_outside_the_engine_keeps_only_the_delivered_tokens(model_path, is_async):
    """The daemon's text thread may match a stop string a few tokens after the engine
    sampled them; finishing with the delivered count drops the rest from every count."""
    from llmd.engine.request import FinishReason
    from llmd.outputs import RequestMetrics

    llm = LLM(str(model_path), device="cpu", num_blocks=64, block_size=4,
              async_scheduling=is_async)  # fmt: skip
    engine = llm.engine
    request = engine.add_request([5, 6, 7], SamplingParams(max_tokens=40, ignore_eos=True))
    while request.num_output_tokens < 8:
        engine.step()
    delivered = request.output_token_ids[:3]
    engine.finish_request(request.request_id, FinishReason.STOP, "xy", num_output_tokens=3)
    assert request.output_token_ids == delivered and len(request.times.token_times) == 3
    metrics = RequestMetrics.from_request(request)
    assert metrics.num_generated_tokens == 3 and len(metrics.itl) == 2
    while engine.has_unfinished_requests():
        engine.step()
    assert request.output_token_ids == delivered
    engine.scheduler.check_integrity()
