"""Every dialect of output constraint maps to one StructuredOutputs, and each bad one is a
400 naming the field the client sent (no daemon: the body, the mapping and the grammar check)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from llmd.http import structured_fields
from llmd.http.errors import HttpError
from llmd.http.request_models import ChatCompletionRequest, CompletionRequest, parse_body
from llmd.http.sampling import chat_params, completion_params
from llmd.http.structured_fields import checked_outputs
from llmd.protocol import GenerateRequest, decode_client_message, encode
from llmd.sampling_params import SamplingParams
from llmd.structured_outputs import StructuredOutputs
from tests.structured.constraints import PERSON, PHONE

MESSAGES = [{"role": "user", "content": "hi"}]
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
SCHEMA_TEXT = '{"properties":{"a":{"type":"integer"}},"required":["a"],"type":"object"}'


def _chat(**fields) -> ChatCompletionRequest:
    return parse_body(ChatCompletionRequest, {"messages": MESSAGES, **fields})


def _checked(body) -> dict | None:
    return asyncio.run(checked_outputs(body))


@pytest.mark.parametrize(
    ("fields", "wire"),
    [
        ({}, None),
        ({"response_format": {"type": "text"}}, None),
        ({"response_format": {"type": "json_object"}}, {"json_object": True}),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "a", "schema": SCHEMA, "strict": True},
                }
            },
            {"json": SCHEMA_TEXT},
        ),
        ({"structured_outputs": {"regex": PHONE}}, {"regex": PHONE}),
        ({"structured_outputs": {"json": SCHEMA}}, {"json": SCHEMA_TEXT}),
        ({"structured_outputs": {"choice": ["x", "y"], "regex": None}}, {"choice": ["x", "y"]}),
        ({"guided_json": SCHEMA}, {"json": SCHEMA_TEXT}),
        ({"guided_json": SCHEMA_TEXT}, {"json": SCHEMA_TEXT}),
        ({"guided_regex": PHONE, "guided_decoding_backend": "xgrammar"}, {"regex": PHONE}),
        ({"guided_choice": ["x", "y"]}, {"choice": ["x", "y"]}),
        ({"guided_grammar": 'start: "a" | "b"'}, {"grammar": 'start: "a" | "b"'}),
    ],
)
def test_each_dialect_maps_to_one_constraint(fields, wire):
    body = _chat(**fields)
    structured = _checked(body)
    assert structured == wire
    params = chat_params(body, 300, structured)
    assert params.get("structured_outputs") == wire
    if wire is not None:  # the daemon reads back the constraint the client asked for
        assert SamplingParams.from_dict(params).structured_outputs == StructuredOutputs(**wire)


def test_completions_take_the_same_fields():
    body = parse_body(CompletionRequest, {"prompt": "x", "guided_choice": ["yes", "no"]})
    params = completion_params(body, _checked(body))
    assert params == {"max_tokens": 16, "structured_outputs": {"choice": ["yes", "no"]}}
    body = parse_body(
        CompletionRequest, {"prompt": "x", "response_format": {"type": "json_object"}}
    )
    assert _checked(body) == {"json_object": True}


BAD_SCHEMA = {"type": "object", "properties": {"a": {"type": "wat"}}}


@pytest.mark.parametrize(
    ("fields", "param", "words"),
    [
        ({"response_format": {"type": "xml"}}, "response_format.type", "json_schema"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema", "required"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "a"}}},
            "response_format.json_schema.schema",
            "required",
        ),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"schema": 5}}},
            "response_format.json_schema.schema",
            "dictionary",
        ),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"schema": BAD_SCHEMA}}},
            "response_format.json_schema.schema",
            "wat",
        ),
        ({"guided_json": BAD_SCHEMA}, "guided_json", "wat"),
        ({"guided_json": "{not json"}, "guided_json", "not valid JSON"),
        ({"guided_regex": "a(b"}, "guided_regex", "unclosed"),
        ({"guided_grammar": "start: nothing_here"}, "guided_grammar", "nothing_here"),
        ({"guided_choice": []}, "guided_choice", "at least one"),
        ({"guided_choice": "yes"}, "guided_choice", "list"),
        ({"structured_outputs": {"regex": "a(b"}}, "structured_outputs.regex", "unclosed"),
        ({"structured_outputs": {"json": BAD_SCHEMA}}, "structured_outputs.json", "wat"),
        ({"structured_outputs": {"regexp": "a"}}, "structured_outputs", "regexp"),
        ({"structured_outputs": {}}, "structured_outputs", "exactly one"),
        (
            {"structured_outputs": {"regex": "a", "choice": ["a"]}},
            "structured_outputs",
            "got regex, choice",
        ),
        ({"guided_regex": "a", "guided_choice": ["a"]}, "guided_choice", "guided_regex, guided_"),
        (
            {"response_format": {"type": "json_object"}, "structured_outputs": {"regex": "a"}},
            "structured_outputs",
            "got response_format, structured_outputs",
        ),
        ({"guided_regex": "a", "ignore_eos": True}, "ignore_eos", "structured_outputs"),
    ],
)
def test_bad_constraints_are_400s_naming_the_field(fields, param, words):
    with pytest.raises(HttpError) as caught:
        body = _chat(**fields)
        chat_params(body, 300, _checked(body))
    assert (caught.value.status, caught.value.param) == (400, param)
    assert words in caught.value.message
    assert caught.value.message.startswith(param) or "output constraint" in caught.value.message


def test_the_constraint_round_trips_through_the_wire_protocol():
    body = _chat(response_format={"type": "json_schema", "json_schema": {"schema": PERSON}})
    params = chat_params(body, 300, _checked(body))
    message = GenerateRequest("g", messages=MESSAGES, sampling_params=params)
    decoded = decode_client_message(encode(message))
    assert decoded == message
    assert decoded.params().structured_outputs == StructuredOutputs(json=PERSON)
    free = GenerateRequest("f", prompt="p", sampling_params=SamplingParams().to_dict())
    assert "structured_outputs" not in free.sampling_params  # omitted when there is none


def test_the_grammar_is_checked_on_a_worker_thread_not_the_event_loop(monkeypatch):
    checked_on = []
    monkeypatch.setattr(
        structured_fields, "check_grammar", lambda spec: checked_on.append(threading.get_ident())
    )

    async def check() -> int:
        await checked_outputs(_chat(guided_regex="a+"))
        return threading.get_ident()

    loop_thread = asyncio.run(check())
    assert len(checked_on) == 1 and checked_on[0] != loop_thread
