"""Structured outputs through a real daemon: every answer satisfies its constraint, on both
routes, streamed or not, in every request dialect; bad constraints are 400s the daemon never
sees, and it serves on after them.

The tiny model has random weights: sampled freely (the control test below) its text fails
every check, so each check here fails if the constraint is dropped anywhere on the way.
"""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from tests.structured.constraints import ANSWERS, PERSON, PHONE, check_output

MESSAGES = [{"role": "user", "content": "Describe someone."}]
SAMPLED = {"temperature": 1.0, "seed": 3, "max_tokens": 120}
"""Sampled (so the mask, not an argmax habit, decides) and seeded; 120 tokens always finish
these bounded constraints (a PERSON is at most ~60 characters)."""
JSON_SCHEMA_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "person", "schema": PERSON, "strict": True},
}
GRAMMAR = """
start: pair ("," pair)?
pair: /[a-c]/ "=" /[0-9]/
"""
DIALECTS = [
    ("response_format.json_schema", {"response_format": JSON_SCHEMA_FORMAT}, {"json": PERSON}),
    ("structured_outputs.json", {"structured_outputs": {"json": PERSON}}, {"json": PERSON}),
    ("structured_outputs.regex", {"structured_outputs": {"regex": PHONE}}, {"regex": PHONE}),
    ("guided_regex", {"guided_regex": PHONE}, {"regex": PHONE}),
    ("guided_choice", {"guided_choice": ANSWERS}, {"choice": ANSWERS}),
    ("guided_grammar", {"guided_grammar": GRAMMAR}, {"regex": "[a-c]=[0-9](,[a-c]=[0-9])?"}),
]  # fmt: skip


def _post(served_http, route: str, fields: dict, stream: bool) -> tuple[str, str]:
    """(text, finish_reason) of one choice, read from the whole reply or from its chunks."""
    body = {**SAMPLED, **fields, "stream": stream}
    if route == "chat":
        url, body = f"{served_http.v1}/chat/completions", {"messages": MESSAGES, **body}
    else:
        url, body = f"{served_http.v1}/completions", {"prompt": "Describe someone:", **body}
    if not stream:
        reply = httpx.post(url, json=body, timeout=60)
        assert reply.status_code == 200, reply.text
        (choice,) = reply.json()["choices"]
        text = choice["message"]["content"] if route == "chat" else choice["text"]
        return text, choice["finish_reason"]
    texts, finish_reasons = [], []
    with httpx.stream("POST", url, json=body, timeout=60) as reply:
        assert reply.status_code == 200, reply.read()
        for line in reply.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            (choice,) = json.loads(line[len("data: ") :])["choices"]
            texts.append(choice["delta"].get("content", "") if route == "chat" else choice["text"])
            if choice["finish_reason"] is not None:
                finish_reasons.append(choice["finish_reason"])
    assert len(finish_reasons) == 1
    return "".join(texts), finish_reasons[0]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("route", ["completions", "chat"])
@pytest.mark.parametrize(
    ("fields", "spec"), [d[1:] for d in DIALECTS], ids=[d[0] for d in DIALECTS]
)
def test_every_answer_satisfies_its_constraint(served_http, route, stream, fields, spec):
    text, finish_reason = _post(served_http, route, fields, stream)
    assert finish_reason == "stop", text  # the grammar completed and ended the answer
    check_output(spec, text)


@pytest.mark.parametrize("route", ["completions", "chat"])
def test_json_object_answers_are_objects(served_http, route):
    """Any JSON object is unbounded (a random model may write one key forever), so n seeds:
    each answer that ends is an object, each cut one at least starts as one."""
    fields = {"response_format": {"type": "json_object"}, "n": 16, "max_tokens": 40}
    reply = _raw(served_http, route, {**SAMPLED, **fields})
    assert reply.status_code == 200, reply.text
    choices = reply.json()["choices"]
    texts = [c["message"]["content"] if route == "chat" else c["text"] for c in choices]
    finished = [t for t, c in zip(texts, choices) if c["finish_reason"] == "stop"]
    assert finished, texts
    assert all(isinstance(json.loads(text), dict) for text in finished), finished
    assert all(text.startswith("{") for text in texts), texts


def test_without_the_constraint_the_same_requests_fail_every_check(served_http):
    for _, _, spec in DIALECTS:
        text, _ = _post(served_http, "chat", {}, stream=False)
        with pytest.raises(AssertionError):
            check_output(spec, text)


BAD_SCHEMA = {"type": "object", "properties": {"age": {"type": "integr"}}}
BAD_REQUESTS = [
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": BAD_SCHEMA}}},
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "yaml"}}, "response_format.type"),
    ({"guided_json": BAD_SCHEMA}, "guided_json"),
    ({"structured_outputs": {"json": BAD_SCHEMA}}, "structured_outputs.json"),
    ({"guided_regex": "[0-9"}, "guided_regex"),
    ({"structured_outputs": {"regex": "(a"}}, "structured_outputs.regex"),
    ({"guided_grammar": "start: undefined_rule"}, "guided_grammar"),
    ({"guided_regex": "a", "guided_choice": ["a"]}, "guided_choice"),
    ({"structured_outputs": {"regex": "a", "choice": ["a"]}}, "structured_outputs"),
    ({"response_format": {"type": "json_object"}, "guided_regex": "a"}, "guided_regex"),
]  # fmt: skip


@pytest.mark.parametrize("route", ["completions", "chat"])
def test_bad_constraints_are_400s_and_the_daemon_serves_on(served_http, route):
    for fields, param in BAD_REQUESTS:
        for stream in (False, True):  # refused before a stream starts: a JSON error
            reply = _raw(served_http, route, {**fields, "stream": stream})
            assert reply.status_code == 400, reply.text
            error = reply.json()["error"]
            assert error["param"] == param, error
            assert error["type"] == "invalid_request_error"
    served_http.wait_idle()  # nothing was left running
    text, finish_reason = _post(served_http, route, {"guided_choice": ANSWERS}, stream=False)
    assert text in ANSWERS and finish_reason == "stop"


def _raw(served_http, route: str, fields: dict) -> httpx.Response:
    if route == "chat":
        body = {"messages": MESSAGES, "max_tokens": 4, **fields}
        return httpx.post(f"{served_http.v1}/chat/completions", json=body, timeout=30)
    body = {"prompt": "x", "max_tokens": 4, **fields}
    return httpx.post(f"{served_http.v1}/completions", json=body, timeout=30)


@pytest.fixture(scope="module")
def sdk(served_http):
    with openai.OpenAI(base_url=served_http.v1, api_key="unused", max_retries=0) as client:
        yield client


class Verdict(BaseModel):
    """What `parse` turns the answer into (bounded fields, so the answer always finishes)."""

    answer: str = Field(max_length=8)
    score: int = Field(ge=0, le=9)
    is_final: bool


def test_the_openai_sdk_response_format(sdk):
    model = sdk.models.list().data[0].id
    result = sdk.chat.completions.create(
        model=model, messages=MESSAGES, response_format=JSON_SCHEMA_FORMAT, **SAMPLED
    )
    assert result.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(result.choices[0].message.content), PERSON)
    parsed = sdk.chat.completions.parse(
        model=model, messages=MESSAGES, response_format=Verdict, **SAMPLED
    )
    verdict = parsed.choices[0].message.parsed
    assert isinstance(verdict, Verdict)
    assert verdict == Verdict.model_validate_json(parsed.choices[0].message.content)
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.chat.completions.create(
            model=model, messages=MESSAGES, response_format={"type": "yaml"}, max_tokens=4
        )
    assert caught.value.body["param"] == "response_format.type"
