"""Tool calling in the HTTP layer without a model: field checks (400s naming the field), the
history's tool turns, and `auto` replies parsed from scripted text through the real routes."""

from __future__ import annotations

import json

import openai
import pytest
from starlette.testclient import TestClient

from llmd.http.app import create_app
from llmd.http.chat_messages import wire_messages
from llmd.http.errors import HttpError
from llmd.http.request_models import ChatCompletionRequest, parse_body
from tests.http.fake_daemon_client import MODEL_ID, FakeContext, FakeDaemonClient

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
USER = [{"role": "user", "content": "Weather in Paris and Oslo?"}]
HERMES_REPLY = (
    "Checking.\n<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n'
    '{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
)
LLAMA3_REPLY = '{"name": "get_weather", "parameters": {"city": "Paris"}}'


def _pieces(text: str, size: int = 3) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _app(pieces: list[str], parser_name: str = "hermes") -> tuple[TestClient, FakeDaemonClient]:
    client = FakeDaemonClient(pieces)
    return TestClient(create_app(FakeContext(client, parser_name))), client


def _post(http: TestClient, **body):
    return http.post("/v1/chat/completions", json={"messages": USER, **body})


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tools": [{"type": "code_interpreter"}]}, "tools.0.type"),
        ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools.0.function.name"),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]},
            "tools.0.function.parameters",
        ),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {
                "type": "object", "properties": {"x": {"type": "nonsense"}}}}}]},
            "tools.0.function.parameters",
        ),
        ({"tools": [WEATHER], "tool_choice": "always"}, "tool_choice"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "x"}}},
            "tool_choice.function.name",
        ),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": [], "tool_choice": "auto"}, "tools"),
        ({"tools": [WEATHER], "tool_choice": "required", "ignore_eos": True}, "tool_choice"),
        ({"tools": [WEATHER], "parallel_tool_calls": "maybe"}, "parallel_tool_calls"),
    ],
)  # fmt: skip
def test_bad_tool_fields_are_400s_naming_the_field(body, param):
    http, fake = _app(["x"])
    response = _post(http, **body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
    assert fake.requests == []  # nothing reached the daemon


def test_history_tool_turns_reach_the_daemon_in_template_shape():
    messages = [
        *USER,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_9", "type": "function", "function": {
                "name": "get_weather", "arguments": '{"city": "Paris"}'}}],
        },
        {"role": "tool", "tool_call_id": "call_9", "content": "sunny"},
    ]  # fmt: skip
    body = parse_body(ChatCompletionRequest, {"messages": messages})
    assert wire_messages(body.messages)[1:] == [
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "id": "call_9",
            "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "sunny", "tool_call_id": "call_9", "name": "get_weather"},
    ]  # fmt: skip
    bad_arguments = json.loads(json.dumps(messages))
    bad_arguments[1]["tool_calls"][0]["function"]["arguments"] = "{not json"
    with pytest.raises(HttpError) as error:
        wire_messages(parse_body(ChatCompletionRequest, {"messages": bad_arguments}).messages)
    assert error.value.param == "messages.1.tool_calls.0.function.arguments"
    no_id = [*USER, {"role": "tool", "content": "x"}]
    with pytest.raises(HttpError) as error:
        wire_messages(parse_body(ChatCompletionRequest, {"messages": no_id}).messages)
    assert error.value.param == "messages.1.tool_call_id"


def test_auto_reply_with_hermes_calls_becomes_tool_calls():
    http, fake = _app(_pieces(HERMES_REPLY))
    response = _post(http, tools=[WEATHER])
    assert response.status_code == 200, response.text
    (choice,) = response.json()["choices"]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["content"] == "Checking."
    calls = message["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["get_weather", "get_weather"]
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [
        {"city": "Paris"},
        {"city": "Oslo"},
    ]
    assert all(c["id"].startswith("call_") and c["type"] == "function" for c in calls)
    (request,) = fake.requests
    assert request["tools"] == [WEATHER]
    assert "structured_outputs" not in request["params"]  # auto is not constrained


def test_auto_reply_without_a_call_is_plain_content():
    http, _ = _app(_pieces("Just text."))
    (choice,) = _post(http, tools=[WEATHER]).json()["choices"]
    assert choice["finish_reason"] == "stop"
    assert choice["message"]["content"] == "Just text." and "tool_calls" not in choice["message"]


def test_tool_choice_none_sends_no_tools_and_parses_nothing():
    http, fake = _app(_pieces(HERMES_REPLY))
    (choice,) = _post(http, tools=[WEATHER], tool_choice="none").json()["choices"]
    assert choice["message"]["content"] == HERMES_REPLY and choice["finish_reason"] == "stop"
    assert fake.requests[0]["tools"] is None


def test_llama3_parser_is_used_when_the_daemon_serves_it():
    http, _ = _app(_pieces(LLAMA3_REPLY), parser_name="llama3")
    (choice,) = _post(http, tools=[WEATHER]).json()["choices"]
    assert choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}


def _sse_chunks(response) -> list[dict]:
    lines = [line for line in response.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line[len("data: ") :]) for line in lines[:-1]]


@pytest.mark.parametrize("size", [1, 2, 5, 64])
def test_streamed_auto_reply_sends_call_deltas_and_no_tag_text(size):
    http, _ = _app(_pieces(HERMES_REPLY, size))
    response = _post(http, tools=[WEATHER], stream=True)
    assert response.status_code == 200, response.text
    chunks = _sse_chunks(response)
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks]
    content = "".join(d.get("content") or "" for d in deltas)
    assert content == "Checking."
    calls: dict[int, dict] = {}
    for delta in deltas:
        for piece in delta.get("tool_calls", []):
            if "id" in piece:
                assert piece["index"] not in calls and piece["type"] == "function"
                calls[piece["index"]] = {"id": piece["id"], "name": piece["function"]["name"],
                                         "arguments": ""}  # fmt: skip
            calls[piece["index"]]["arguments"] += piece["function"]["arguments"]
    assert [json.loads(calls[i]["arguments"]) for i in sorted(calls)] == [
        {"city": "Paris"},
        {"city": "Oslo"},
    ]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    if size == 1:
        assert sum(1 for d in deltas if d.get("tool_calls")) > 10  # arguments streamed


def test_the_openai_sdk_reads_parsed_calls_whole_and_streamed():
    http, _ = _app(_pieces(HERMES_REPLY, 4))
    with openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=http) as sdk:
        result = sdk.chat.completions.create(model=MODEL_ID, messages=USER, tools=[WEATHER])
        message = result.choices[0].message
        assert result.choices[0].finish_reason == "tool_calls"
        assert [json.loads(c.function.arguments)["city"] for c in message.tool_calls] == [
            "Paris",
            "Oslo",
        ]
        with sdk.chat.completions.stream(model=MODEL_ID, messages=USER, tools=[WEATHER]) as stream:
            for _ in stream:
                pass
            final = stream.get_final_completion()
        streamed = final.choices[0].message.tool_calls
        assert [(c.function.name, json.loads(c.function.arguments)) for c in streamed] == [
            (c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls
        ]
