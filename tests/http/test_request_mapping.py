"""Request bodies to sampling params and error statuses, without a daemon."""

from __future__ import annotations

import pytest

from llmd.daemon.serve_options import ServeOptions
from llmd.errors import EngineDeadError, InvalidParameterError, LLMDError, OverloadedError
from llmd.http.chat_messages import wire_messages
from llmd.http.errors import HttpError, from_llmd_error
from llmd.http.logprobs import MIN_LOGPROB, chat_logprobs, completion_logprobs
from llmd.http.metrics_exporter import render
from llmd.http.request_models import ChatCompletionRequest, CompletionRequest, parse_body
from llmd.http.sampling import chat_params, completion_params
from llmd.protocol.engine_sections import KVUsage, QueueCounts
from llmd.protocol.metrics_sections import HistogramData, TotalsSection
from llmd.sampling_params import SamplingParams
from tests.protocol.snapshot_samples import sample_snapshot as stats_snapshot


def test_completion_fields_map_to_sampling_params():
    body = parse_body(
        CompletionRequest,
        {"prompt": "x", "stop": "END", "top_k": 5, "seed": 3, "logprobs": 2, "user": "u"},
    )
    params = completion_params(body)
    assert params == {"top_k": 5, "seed": 3, "stop": ["END"], "max_tokens": 16, "logprobs": 2}


def test_the_speculation_opt_out_reaches_sampling_params_from_both_endpoints():
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    for model, body, to_params in (
        (CompletionRequest, {"prompt": "x"}, completion_params),
        (ChatCompletionRequest, chat, lambda request: chat_params(request, 300)),
    ):
        opted_out = to_params(parse_body(model, {**body, "can_speculate": False}))
        assert SamplingParams.from_dict(opted_out).can_speculate is False
        assert "can_speculate" not in to_params(parse_body(model, body))  # the default: true
        for value in ("false", 0):  # a string or a number is not coerced to a boolean
            with pytest.raises(HttpError) as error:
                parse_body(model, {**body, "can_speculate": value})
            assert (error.value.status, error.value.param) == (400, "can_speculate")


def test_chat_defaults_to_the_context_and_renames_fields_in_errors():
    body = parse_body(ChatCompletionRequest, {"messages": [{"role": "user", "content": "hi"}]})
    assert chat_params(body, max_model_len=300)["max_tokens"] == 300
    bad = parse_body(
        ChatCompletionRequest,
        {"messages": [{"role": "user", "content": "hi"}], "logprobs": True, "top_logprobs": 99},
    )
    with pytest.raises(HttpError) as error:
        chat_params(bad, 300)
    assert (error.value.status, error.value.param) == (400, "top_logprobs")


def test_prompt_shapes():
    assert parse_body(CompletionRequest, {"prompt": [1, 2]}).prompts() == [[1, 2]]
    assert parse_body(CompletionRequest, {"prompt": ["a", "b"]}).prompts() == ["a", "b"]
    assert parse_body(CompletionRequest, {"prompt": [[1], [2, 3]]}).prompts() == [[1], [2, 3]]
    with pytest.raises(HttpError, match="negative"):
        parse_body(CompletionRequest, {"prompt": [[1], [-2]]}).prompts()
    with pytest.raises(HttpError) as error:
        parse_body(CompletionRequest, {"prompt": [1, "a"]})
    assert error.value.param == "prompt"


def test_chat_content_parts_and_roles():
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    messages = [{"role": "developer", "content": "be nice"}, {"role": "user", "content": parts}]
    body = parse_body(ChatCompletionRequest, {"messages": messages})
    assert wire_messages(body.messages) == [
        {"role": "system", "content": "be nice"},
        {"role": "user", "content": "ab"},
    ]
    image = {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}
    with pytest.raises(HttpError) as error:
        wire_messages(parse_body(ChatCompletionRequest, image).messages)
    assert error.value.param == "messages.0.content"
    with pytest.raises(HttpError) as error:
        parse_body(ChatCompletionRequest, {"messages": [], "tools": []})
    assert error.value.param == "messages"


def test_llmd_errors_map_to_statuses():
    assert from_llmd_error(InvalidParameterError("bad", "top_p")).status == 400
    overloaded = from_llmd_error(OverloadedError("busy"))
    assert overloaded.status == 429 and overloaded.headers == {"Retry-After": "1"}
    assert from_llmd_error(EngineDeadError("dead")).status == 500
    unknown = LLMDError("odd")
    unknown.code = "something_new"
    assert from_llmd_error(unknown).body()["error"]["code"] == "something_new"


def test_logprob_layouts_replace_minus_infinity():
    entry = {"token": "hé", "logprob": float("-inf"), "top_tokens": ["a"], "top_logprobs": [-0.5]}
    completion = completion_logprobs([entry, entry], text_offset=10)
    assert completion["text_offset"] == [10, 12]
    assert completion["token_logprobs"] == [MIN_LOGPROB, MIN_LOGPROB]
    chat = chat_logprobs([entry])["content"][0]
    assert chat["bytes"] == list("hé".encode()) and chat["top_logprobs"][0]["logprob"] == -0.5


def test_metrics_render_of_a_dead_engine_snapshot_has_no_queue_gauges():
    text = render(stats_snapshot(totals=TotalsSection(finished={"stop": 2}))).decode()
    assert 'llmd:request_success_total{finished_reason="stop",model_name="m"} 2.0' in text
    assert "num_requests_running" not in text and "kv_cache_usage_perc" not in text


def test_metrics_render_the_queue_and_kv_of_a_live_engine():
    queue = QueueCounts(waiting=3, running=2, preempted=1, preemptions_total=4)
    kv = KVUsage(block_size=16, num_total=64, num_used=16, num_cached=8, num_free=40,
                 prefix_query_tokens=100, prefix_hit_tokens=25)  # fmt: skip
    text = render(stats_snapshot(queue=queue, kv=kv)).decode()
    assert 'llmd:num_requests_waiting{model_name="m"} 3.0' in text
    assert 'llmd:kv_cache_usage_perc{model_name="m"} 0.25' in text
    assert 'llmd:prefix_cache_hits_total{model_name="m"} 25.0' in text


def test_metrics_render_moe_gauges_for_an_moe_model_only():
    from llmd.protocol.metrics_sections import HardwareSection
    from llmd.protocol.moe_section import MoeSection

    hardware = HardwareSection(experts_touched_per_step=2.5, num_expert_slots=8)
    moe = MoeSection(((2, 0, 0, 2),))  # busiest 2 tokens against a mean of 1
    text = render(stats_snapshot(hardware=hardware, moe=moe)).decode()
    assert 'llmd:moe_experts_touched_per_step{model_name="m"} 2.5' in text
    assert 'llmd:moe_expert_load_imbalance{model_name="m"} 2.0' in text
    assert "moe_" not in render(stats_snapshot()).decode()


def test_metrics_render_the_histograms_as_cumulative_buckets():
    histogram = HistogramData(bounds=(0.1, 1.0), counts=(2, 3, 1), sum=4.5, count=6)
    text = render(stats_snapshot(histograms={"ttft": histogram})).decode()
    assert 'llmd:time_to_first_token_seconds_bucket{le="1.0",model_name="m"} 5.0' in text
    assert 'llmd:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 6.0' in text
    assert 'llmd:time_to_first_token_seconds_sum{model_name="m"} 4.5' in text


def test_metrics_render_the_wait_seconds_by_reason():
    wait_s = {"queue": 0.5, "kv_blocks": 3.0}
    text = render(stats_snapshot(totals=TotalsSection(wait_s=wait_s))).decode()
    assert 'llmd:request_wait_seconds_total{model_name="m",reason="kv_blocks"} 3.0' in text
    assert 'llmd:request_wait_seconds_total{model_name="m",reason="token_budget"} 0.0' in text


def test_serve_options_keep_the_api_key_off_the_command_line():
    options = ServeOptions(api_key="s3cret", http_port=9000)
    assert "s3cret" not in options.to_json() and "s3cret" not in repr(options)
    assert ServeOptions.from_json(options.to_json()).http_port == 9000
    with pytest.raises(InvalidParameterError):
        ServeOptions(http_port=70000)
    with pytest.raises(InvalidParameterError):
        ServeOptions(api_key="")
