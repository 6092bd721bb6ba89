"""Tool calling end to end on a real daemon (the tiny random model, its real tokenizer).

A forced call (`required`, a named tool) is grammar-enforced, so even random weights must
answer with calls whose arguments validate against the tool's schema, whole and streamed.
The tiny template ignores tools, so the daemon writes them into the prompt itself.
"""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest

from llmd.engine.tokenizer import load_tokenizer
from tests.http.http_harness import DAEMON_ARGS, MAX_MODEL_LEN, http_daemon
from tests.tiny_model import make_tiny_model

TOOLS_MODEL_LEN = 2048
"""The tools' system prompt alone takes ~700 tokens of the tiny 400-token vocabulary."""

WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {
        "city": {"enum": ["Paris", "Oslo", "Lima"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 9},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
TIME_PARAMETERS = {
    "type": "object",
    "properties": {"zone": {"enum": ["UTC", "CET"]}},
    "required": ["zone"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_PARAMETERS}},
    {"type": "function", "function": {"name": "get_time", "parameters": TIME_PARAMETERS}},
]
SCHEMAS = {"get_weather": WEATHER_PARAMETERS, "get_time": TIME_PARAMETERS}
MESSAGES = [{"role": "user", "content": "Weather?"}]
NAMED = {"type": "function", "function": {"name": "get_time"}}


@pytest.fixture(scope="module")
def served_http(tmp_path_factory):
    """A daemon on a tiny model with a longer context than the shared one's."""
    model_dir = make_tiny_model(
        tmp_path_factory.mktemp("tiny-tools"), "llama", max_position_embeddings=TOOLS_MODEL_LEN
    )
    args = [str(TOOLS_MODEL_LEN) if a == str(MAX_MODEL_LEN) else a for a in DAEMON_ARGS]
    with http_daemon(model_dir, tmp_path_factory.mktemp("tools-daemon"), args) as served:
        yield served
    assert "Traceback" not in served.log_path.read_text()


def _post(served_http, **body) -> httpx.Response:
    payload = {"messages": MESSAGES, "tools": TOOLS, "max_tokens": 80, "seed": 3, **body}
    return httpx.post(f"{served_http.v1}/chat/completions", json=payload, timeout=60)


def _check_calls(calls: list[dict], expected_names: set[str] | None = None) -> None:
    assert calls, "no tool call"
    for call in calls:
        assert call["type"] == "function" and call["id"].startswith("call_")
        name = call["function"]["name"]
        assert name in (expected_names or SCHEMAS)
        jsonschema.validate(json.loads(call["function"]["arguments"]), SCHEMAS[name])


def _streamed_calls(response: httpx.Response) -> tuple[list[dict], str, str | None]:
    """The calls the SSE deltas reassemble into, the streamed content, the finish reason."""
    calls: dict[int, dict] = {}
    content, finish = "", None
    for line in response.text.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        (choice,) = json.loads(line[len("data: ") :])["choices"]
        finish = choice["finish_reason"] or finish
        content += choice["delta"].get("content") or ""
        for piece in choice["delta"].get("tool_calls", []):
            if "id" in piece:
                calls[piece["index"]] = {"id": piece["id"], "type": piece["type"],
                    "function": {"name": piece["function"]["name"], "arguments": ""}}  # fmt: skip
            calls[piece["index"]]["function"]["arguments"] += piece["function"]["arguments"]
    return [calls[i] for i in sorted(calls)], content, finish


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_required_gives_one_valid_call(served_http, temperature):
    response = _post(
        served_http, tool_choice="required", parallel_tool_calls=False, temperature=temperature
    )
    assert response.status_code == 200, response.text
    (choice,) = response.json()["choices"]
    assert choice["finish_reason"] == "tool_calls", choice
    assert choice["message"]["content"] is None
    assert len(choice["message"]["tool_calls"]) == 1
    _check_calls(choice["message"]["tool_calls"])


def test_required_streamed_reassembles_into_the_same_call(served_http):
    body = {"tool_choice": "required", "parallel_tool_calls": False, "temperature": 0.0}
    whole = _post(served_http, **body).json()["choices"][0]["message"]["tool_calls"]
    response = _post(served_http, **body, stream=True)
    assert response.status_code == 200, response.text
    calls, content, finish = _streamed_calls(response)
    assert finish == "tool_calls" and content == ""
    _check_calls(calls)
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in whole
    ]  # greedy: the same call


@pytest.mark.parametrize("stream", [False, True])
def test_a_named_tool_is_called_with_valid_arguments(served_http, stream):
    response = _post(served_http, tool_choice=NAMED, temperature=1.0, stream=stream)
    assert response.status_code == 200, response.text
    if stream:
        calls, content, finish = _streamed_calls(response)
        assert content == ""
    else:
        (choice,) = response.json()["choices"]
        calls, finish = choice["message"]["tool_calls"], choice["finish_reason"]
    assert finish == "tool_calls" and len(calls) == 1
    _check_calls(calls, {"get_time"})


def test_the_openai_sdk_gets_tool_calls(served_http):
    with openai.OpenAI(base_url=served_http.v1, api_key="unused", max_retries=0) as sdk:
        model = sdk.models.list().data[0].id
        result = sdk.chat.completions.create(
            model=model, messages=MESSAGES, tools=TOOLS, tool_choice="required",
            parallel_tool_calls=False, max_tokens=80, temperature=1.0, seed=5,
        )  # fmt: skip
        (call,) = result.choices[0].message.tool_calls
        assert result.choices[0].finish_reason == "tool_calls"
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
        with sdk.chat.completions.stream(
            model=model, messages=MESSAGES, tools=TOOLS, tool_choice=NAMED, max_tokens=80
        ) as stream:
            for _ in stream:
                pass
            final = stream.get_final_completion()
        (streamed,) = final.choices[0].message.tool_calls
        assert streamed.function.name == "get_time"
        jsonschema.validate(json.loads(streamed.function.arguments), TIME_PARAMETERS)


def test_a_history_with_tool_results_renders_with_the_tools(served_http):
    history = [
        *MESSAGES,
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Oslo", "days": 2}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": -3}'},
    ]  # fmt: skip
    response = _post(served_http, messages=history, max_tokens=4, temperature=0.0)
    assert response.status_code == 200, response.text
    without_tools = httpx.post(
        f"{served_http.v1}/chat/completions",
        json={"messages": history, "max_tokens": 4},
        timeout=60,
    )
    assert without_tools.status_code == 200, without_tools.text
    tokenizer = load_tokenizer(str(served_http.model_dir))
    wired = [
        MESSAGES[0],
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "id": "call_1",
            "function": {"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}}]},
        {"role": "tool", "content": '{"temp": -3}', "tool_call_id": "call_1",
         "name": "get_weather"},
    ]  # fmt: skip
    expected = tokenizer.apply_chat_template(wired, tools=TOOLS)
    prompt_text = tokenizer.decode(expected)
    assert "<tools>" in prompt_text and "<tool_response>" in prompt_text
    assert response.json()["usage"]["prompt_tokens"] == len(expected)
    assert without_tools.json()["usage"]["prompt_tokens"] == len(
        tokenizer.apply_chat_template(wired)
    )
    assert without_tools.json()["usage"]["prompt_tokens"] < len(expected)


def test_status_shows_the_resolved_parser(served_http):
    from llmd.client import Client

    with Client(served_http.address) as client:
        snapshot = client.stats(include_requests=False, include_block_map=False)
    assert snapshot.daemon.tool_call_parser == "hermes"  # the tiny template names no format
