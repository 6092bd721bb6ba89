"""The acceptance fuzz of structured outputs over HTTP: a real daemon on the default model.

A few hundred seeded temperature-1 requests over the fuzz's 40 bounded constraints
(tests/structured/fuzz_cases.py), sent concurrently so the daemon batches them, on both
routes, streamed and whole, with async scheduling off and on. Every request is answered
with 200, ends by the grammar (finish reason stop) and validates.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from llmd.config import default_model_dir
from tests.http.http_harness import DAEMON_ARGS, http_daemon
from tests.scheduling_mode import MODES, daemon_mode, mode_id, serve_flags
from tests.structured.constraints import check_output
from tests.structured.fuzz_cases import MAX_TOKENS, describe, prompt_of, spec_of

NUM_REQUESTS = 400
"""Per scheduling mode: each (route, streamed) pair gets 100, every case ten times."""
NUM_CLIENTS = 16
"""Requests in flight at once."""


@pytest.fixture(scope="module", params=MODES, ids=mode_id)
def served_default(request, tmp_path_factory):
    """`llmd serve` on the shipped default model in one scheduling mode."""
    runtime = tmp_path_factory.mktemp("fuzz-daemon")
    args = [*DAEMON_ARGS, *serve_flags(request.param)]  # the last mode flag wins
    with http_daemon(default_model_dir(), runtime, args) as served:
        assert daemon_mode(served.address) is request.param
        yield served
        served.wait_idle()
    assert "Traceback" not in served.log_path.read_text()


def _body(index: int) -> tuple[str, dict]:
    """The route and body of request `index`: routes and streaming alternate."""
    route = "chat" if index % 2 else "completions"
    body = {
        "temperature": 1.0,
        "seed": index,
        "max_tokens": MAX_TOKENS,
        "structured_outputs": spec_of(index),
        "stream": index % 4 >= 2,
    }
    if route == "chat":
        return route, {"messages": [{"role": "user", "content": prompt_of(index)}], **body}
    return route, {"prompt": prompt_of(index), **body}


def _answer(client: httpx.Client, index: int) -> tuple[str, str]:
    """(text, finish_reason) of request `index`, from the whole reply or its chunks."""
    route, body = _body(index)
    url = "/v1/chat/completions" if route == "chat" else "/v1/completions"
    if not body["stream"]:
        reply = client.post(url, json=body)
        assert reply.status_code == 200, reply.text
        (choice,) = reply.json()["choices"]
        text = choice["message"]["content"] if route == "chat" else choice["text"]
        return text, choice["finish_reason"]
    texts, finish_reasons = [], []
    with client.stream("POST", url, json=body) as reply:
        assert reply.status_code == 200, reply.read()
        for line in reply.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            (choice,) = json.loads(line[len("data: ") :])["choices"]
            texts.append(choice["delta"].get("content", "") if route == "chat" else choice["text"])
            if choice["finish_reason"] is not None:
                finish_reasons.append(choice["finish_reason"])
    assert len(finish_reasons) == 1, finish_reasons
    return "".join(texts), finish_reasons[0]


def test_every_http_answer_validates(served_default):
    client = httpx.Client(base_url=served_default.url, timeout=120)
    with client, ThreadPoolExecutor(NUM_CLIENTS) as pool:
        answers = list(pool.map(lambda index: _answer(client, index), range(NUM_REQUESTS)))
    assert len(answers) == NUM_REQUESTS  # every request answered
    failures = []
    for index, (text, finish_reason) in enumerate(answers):
        route, body = _body(index)
        try:
            assert finish_reason == "stop", f"finish_reason {finish_reason}"
            check_output(spec_of(index), text)
        except AssertionError as error:
            kind = f"{route} {'streamed' if body['stream'] else 'whole'}"
            failures.append(f"#{index} {kind} {describe(spec_of(index))}: {error}")
    assert not failures, f"{len(failures)} of {NUM_REQUESTS} invalid:\n" + "\n".join(failures)
    assert len({text for text, _ in answers}) > NUM_REQUESTS // 2  # sampled, not one path
