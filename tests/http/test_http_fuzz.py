"""A seeded fuzzer of request bodies against the real HTTP API, counting every answer.

Valid bodies are mutated field by field (wrong types, out-of-range numbers, unknown and
nested values, odd Unicode); every request must get an answer: a well-formed success
(with a [DONE]-terminated stream when streaming) or an OpenAI-shaped 4xx naming a field,
never a 5xx. The daemon's own finished count (read over ZeroMQ, an independent route)
must grow by exactly the number of successes, and it must end idle with every block free.
"""

from __future__ import annotations

import json
import random
from typing import Any

import httpx

from llmd.client import Client

NUM_BODIES = 240
SEED = 20261201

ODD_VALUES: list[Any] = [
    None, True, -1, 0, 1, 2**63, -(2**63), 1e308, -0.0, 0.5, "", "x", "🙂" * 3, "\x00",
    [], [1, 2], [-5], ["a", 1], {}, {"a": {"b": [1]}}, "NaN", 3.5,
]  # fmt: skip
FIELDS = [
    "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop", "n",
    "presence_penalty", "frequency_penalty", "repetition_penalty", "min_tokens",
    "stop_token_ids", "logprobs", "stream", "stream_options", "model", "ignore_eos",
    "skip_special_tokens", "max_completion_tokens", "top_logprobs", "user", "unknown_field",
]  # fmt: skip


def _valid_completion(rng: random.Random) -> dict[str, Any]:
    prompt: Any = rng.choice(["Hello", "a b c", [5, 17, 42], ["x", "y"], "é∑🙂"])
    return {"prompt": prompt, "max_tokens": rng.randint(1, 4), "stream": rng.random() < 0.3}


def _valid_chat(rng: random.Random) -> dict[str, Any]:
    messages = [{"role": "user", "content": rng.choice(["Hi", "2+2?", "🙂"])}]
    if rng.random() < 0.3:
        messages.insert(0, {"role": "system", "content": "Be brief."})
    return {"messages": messages, "max_tokens": rng.randint(1, 4), "stream": rng.random() < 0.3}


def _mutate(rng: random.Random, body: dict[str, Any]) -> dict[str, Any]:
    body = dict(body)
    for _ in range(rng.choice([0, 1, 1, 2, 3])):
        field = rng.choice([*FIELDS, "prompt", "messages"])
        if rng.random() < 0.15:
            body.pop(field, None)
        else:
            body[field] = rng.choice(ODD_VALUES)
    return body


def _check_error(response: httpx.Response) -> None:
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]


def _check_success(body: dict[str, Any], response: httpx.Response, is_stream: bool) -> int:
    """Validate a 200 and return how many choices (daemon requests) it carried."""
    if not is_stream:
        reply = response.json()
        assert reply["choices"] and reply["usage"]["completion_tokens"] >= 0
        return len(reply["choices"])
    events = response.text.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]", response.text[-300:]
    indices = set()
    for event in events[:-2]:
        payload = json.loads(event.removeprefix("data: "))
        assert "error" not in payload, payload
        indices.update(choice["index"] for choice in payload["choices"])
    return len(indices)


def _finished_total(address: str) -> int:
    with Client(address) as client:
        snapshot = client.stats(include_requests=False, include_block_map=False)
    return sum(snapshot.totals.finished.values())


def test_fuzzed_bodies_are_all_answered_and_counted(served_http):
    rng = random.Random(SEED)
    finished_before = _finished_total(served_http.address)
    statuses: dict[int, int] = {}
    num_requests_run = 0
    with httpx.Client(timeout=60) as http:
        for _ in range(NUM_BODIES):
            is_chat = rng.random() < 0.5
            valid = _valid_chat(rng) if is_chat else _valid_completion(rng)
            body = _mutate(rng, valid)
            url = f"{served_http.v1}/{'chat/completions' if is_chat else 'completions'}"
            response = http.post(url, json=body)
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            if response.status_code == 200:
                is_stream = response.headers["content-type"].startswith("text/event-stream")
                num_requests_run += _check_success(body, response, is_stream)
            else:
                _check_error(response)
    # The fuzz really exercised both outcomes.
    assert statuses.get(200, 0) > NUM_BODIES // 5 and sum(statuses.values()) == NUM_BODIES
    assert sum(n for status, n in statuses.items() if status >= 400) > NUM_BODIES // 5
    served_http.wait_idle(timeout_s=30)
    assert _finished_total(served_http.address) - finished_before == num_requests_run
    assert httpx.post(f"{served_http.v1}/completions", json={"prompt": "ok?", "max_tokens": 1},
                      timeout=30).status_code == 200  # fmt: skip
