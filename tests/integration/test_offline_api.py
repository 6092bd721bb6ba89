"""The offline API end to end on a tiny model with a real tokenizer."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from llmd import LLM, SamplingParams, StructuredOutputs
from llmd.cli import main
from llmd.engine.request import Request
from llmd.errors import InvalidParameterError, RequestRejectedError
from llmd.protocol.errors import RequestFailedError


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    return LLM(str(tiny_model_dir), device="cpu", num_blocks=128, block_size=8, max_model_len=256)


def test_outputs_in_input_order_with_text_and_metrics(llm):
    prompts = ["hello world", [5, 6, 7, 8], "the quick brown fox"]
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    outputs = llm.generate(prompts, params)
    assert [out.prompt for out in outputs] == ["hello world", None, "the quick brown fox"]
    assert outputs[1].prompt_token_ids == [5, 6, 7, 8]
    for out in outputs:
        assert len(out.token_ids) == 6 and out.finish_reason == "length"
        assert out.text == llm.tokenizer.decode(out.token_ids)
        metrics = out.metrics
        assert metrics.ttft is not None and metrics.e2e >= metrics.ttft >= 0
        assert metrics.queue_time is not None and metrics.tpot is not None
        assert len(metrics.itl) == 5


def test_one_params_per_prompt_and_mismatch_error(llm):
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (2, 4)]
    outputs = llm.generate(["a", "b"], params)
    assert [len(out.token_ids) for out in outputs] == [2, 4]
    with pytest.raises(InvalidParameterError):
        llm.generate(["a", "b"], [SamplingParams()])


def test_seeded_sampling_reproducible_across_batches(llm):
    params = SamplingParams(temperature=1.0, top_p=0.9, max_tokens=8, seed=1234, ignore_eos=True)
    alone = llm.generate(["once upon a time"], params)[0].token_ids
    others = SamplingParams(temperature=1.0, max_tokens=5, ignore_eos=True)
    batched = llm.generate(["x y z", "once upon a time", "hello"], [others, params, others])
    assert batched[1].token_ids == alone
    different = SamplingParams(temperature=1.0, top_p=0.9, max_tokens=8, seed=99, ignore_eos=True)
    assert llm.generate(["once upon a time"], different)[0].token_ids != alone


def test_stop_string_excluded_and_generation_ends(llm):
    greedy = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    full = llm.generate(["hello world"], greedy)[0]
    # Pick a stop string from the middle of the greedy text so the match is certain.
    text = full.text
    start = next(i for i in range(len(text) // 2, len(text) - 1) if text[i : i + 2].strip())
    stop = text[start : start + 2]
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True, stop=[stop])
    stopped = llm.generate(["hello world"], params)[0]
    assert stopped.finish_reason == "stop" and stopped.stop_reason == stop
    assert stopped.text == text[: text.index(stop)]
    assert len(stopped.token_ids) < len(full.token_ids) or text.index(stop) + len(stop) == len(text)


def test_logprobs_returned_per_token(llm):
    params = SamplingParams(temperature=0.0, max_tokens=3, logprobs=2, ignore_eos=True)
    out = llm.generate(["hi"], params)[0]
    assert out.logprobs is not None and len(out.logprobs) == 3
    for entry, token_id in zip(out.logprobs, out.token_ids):
        assert entry.token_id == token_id and entry.rank == 1  # greedy: the top token
        assert len(entry.top_token_ids) == 2 and entry.logprob <= 0


def test_chat_applies_template(llm):
    conversation = [{"role": "user", "content": "hi there"}]
    reply = llm.chat(conversation, SamplingParams(max_tokens=3, ignore_eos=True))[0]
    assert reply.prompt_token_ids == llm.tokenizer.apply_chat_template(conversation)
    with pytest.raises(InvalidParameterError):
        llm.chat([{"role": "user"}])


def test_rejections_are_typed_and_leave_engine_clean(llm):
    with pytest.raises(RequestRejectedError):
        llm.generate([[5] * 300], SamplingParams(max_tokens=1))
    with pytest.raises(InvalidParameterError):
        llm.generate([[10**9]], SamplingParams(max_tokens=1))
    assert not llm.engine.has_unfinished_requests()
    assert llm.engine.block_manager.usage().num_used == 0


def test_abandoned_stream_aborts_requests(llm):
    stream = llm.stream(["a b c", "d e f"], SamplingParams(max_tokens=50, ignore_eos=True))
    next(stream)
    stream.close()
    assert not llm.engine.has_unfinished_requests()
    assert llm.engine.block_manager.usage().num_used == 0


def test_cli_generate_streams_one_prompt(tiny_model_dir):
    runner = CliRunner()
    args = ["generate", "--model", str(tiny_model_dir), "--num-blocks", "64", "--max-tokens", "4",
            "--ignore-eos", "--stats", "hello"]  # fmt: skip
    result = runner.invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "finish=length" in result.output and "generated=4" in result.output


def test_cli_reports_typed_errors(tiny_model_dir):
    result = CliRunner().invoke(
        main, ["generate", "--model", str(tiny_model_dir), "--top-p", "2", "hello"]
    )
    assert result.exit_code != 0 and "--top-p" in result.output


def test_structured_outputs_from_the_top_level_package(llm):
    choices = ("left", "right")
    params = SamplingParams(temperature=1.0, seed=2, max_tokens=16,
                            structured_outputs=StructuredOutputs(choice=choices))  # fmt: skip
    outputs = llm.generate(["go", "turn", "walk"], params)
    assert all(out.text in choices and out.finish_reason == "stop" for out in outputs)


def test_stop_token_id_kept_in_ids_not_in_text(llm):
    greedy = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    full = llm.generate(["hello world"], greedy)[0]
    stop_id = full.token_ids[3]
    first = full.token_ids.index(stop_id)
    params = SamplingParams(
        temperature=0.0, max_tokens=8, ignore_eos=True, stop_token_ids=[stop_id],
        skip_special_tokens=False,
    )  # fmt: skip
    stopped = llm.generate(["hello world"], params)[0]
    assert stopped.token_ids == full.token_ids[: first + 1]
    assert stopped.finish_reason == "stop" and stopped.stop_reason == stop_id
    assert stopped.text == llm.tokenizer.decode(full.token_ids[:first], skip_special_tokens=False)


@pytest.fixture(scope="module")
def small_pool_llm(tiny_model_dir):
    """128 blocks of 4 tokens: exactly the tiny model's 512 positions."""
    return LLM(str(tiny_model_dir), device="cpu", num_blocks=128, block_size=4)


@pytest.mark.timeout(120)
def test_prompt_filling_the_whole_pool_finishes_and_unblocks_the_queue(small_pool_llm):
    """Regression: a 511-token prompt fit the pool but was never admitted; generate spun."""
    params = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    outputs = small_pool_llm.generate([[5] * 511, [6, 7, 8]], params)
    assert [len(output.token_ids) for output in outputs] == [1, 1]
    assert small_pool_llm.engine.block_manager.usage().num_used == 0


@pytest.mark.timeout(120)
def test_generate_raises_typed_error_when_the_scheduler_cannot_progress(small_pool_llm):
    """If an idle engine can admit nothing (here: blocks leaked by a bug), generate raises."""
    engine = small_pool_llm.engine
    leaked = Request("leak", [1] * 40, SamplingParams(max_tokens=1))
    assert engine.block_manager.allocate_slots(leaked, 40)  # 10 blocks held by no request
    num_integrity_errors = engine.num_integrity_errors
    with pytest.raises(RequestFailedError, match="cannot be admitted"):
        small_pool_llm.generate([[5] * 500], SamplingParams(max_tokens=1))
    assert not engine.has_unfinished_requests()
    # Idle after failing it, the engine found the leak and rebuilt the pool: it serves again.
    assert engine.num_integrity_errors == num_integrity_errors + 1
    assert engine.block_manager.usage().num_used == 0
    outputs = small_pool_llm.generate([[5] * 500], SamplingParams(max_tokens=1))
    assert len(outputs[0].token_ids) == 1


def test_max_tokens_beyond_the_context_is_rejected_not_capped(llm):
    """Regression: max_tokens=10_000 on a 256-token context was silently capped."""
    with pytest.raises(RequestRejectedError) as error:
        llm.generate([[5, 6, 7]], SamplingParams(max_tokens=10_000))
    assert error.value.code == "request_too_large" and error.value.parameter == "max_tokens"
    assert "10003 tokens" in str(error.value) and "max_model_len is 256" in str(error.value)
    exactly_fits = SamplingParams(max_tokens=6, ignore_eos=True)  # 250 + 6 == 256
    outputs = llm.generate([[5] * 250], exactly_fits)
    assert len(outputs[0].token_ids) == 6 and outputs[0].finish_reason == "length"
    assert not llm.engine.has_unfinished_requests()


@pytest.fixture(scope="module")
def llm_without_tokenizer(tiny_model_dir):
    return LLM(str(tiny_model_dir), device="cpu", num_blocks=64, skip_tokenizer_init=True)


def test_skip_tokenizer_init_generates_from_token_ids(llm, llm_without_tokenizer):
    """Regression: with skip_tokenizer_init, generate failed even for token-id prompts."""
    params = SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True)
    outputs = llm_without_tokenizer.generate([[5, 6, 7], [8, 9]], params)
    with_tokenizer = llm.generate([[5, 6, 7], [8, 9]], params)
    assert [o.token_ids for o in outputs] == [o.token_ids for o in with_tokenizer]
    assert [o.text for o in outputs] == ["", ""] and outputs[0].prompt is None
    deltas = list(llm_without_tokenizer.stream([[5, 6, 7]], params))
    assert sum(len(d.token_ids) for d in deltas) == 5 and all(d.text == "" for d in deltas)


def test_skip_tokenizer_init_refuses_text_with_a_typed_error(llm_without_tokenizer):
    with pytest.raises(InvalidParameterError) as text_prompt:
        llm_without_tokenizer.generate(["hello"], SamplingParams(max_tokens=2))
    assert text_prompt.value.parameter == "prompts" and "token ids" in str(text_prompt.value)
    with pytest.raises(InvalidParameterError) as stop_strings:
        llm_without_tokenizer.generate([[5, 6]], SamplingParams(max_tokens=2, stop=["x"]))
    assert stop_strings.value.parameter == "stop"
    with pytest.raises(InvalidParameterError):
        llm_without_tokenizer.chat([{"role": "user", "content": "hi"}])
    assert not llm_without_tokenizer.engine.has_unfinished_requests()
