"""Stop strings, n > 1, logprobs and disconnects over HTTP, with async scheduling off and on
(both in every run), checked against the engine's own finished requests.

The HTTP process runs in front of an in-process daemon (as `llmd serve` runs it), so the
engine's Request of each finished request can be read: no placeholder (-1) may be left in
it, the daemon's stats rows count exactly its tokens, and `usage` counts the tokens the
client got (one logprob entry each).
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from llmd.client import Client
from llmd.engine.request import PENDING_TOKEN_ID
from llmd.engine.step_result import StepResult
from llmd.http.http_settings import HttpSettings
from llmd.http.server import HttpServer
from llmd.protocol import StatsSnapshot
from tests.daemon.harness import (
    FinishedRequests,
    free_tcp_port,
    idle_snapshot,
    inprocess_daemon,
    stop_string_in,
)
from tests.scheduling_mode import MODES, mode_id

GREEDY = {"temperature": 0.0, "ignore_eos": True}
IDLE_TIMEOUT_S = 20.0
HOLD_AT = 100
"""Tokens a disconnect test's requests generate before the engine holds them (`_held_at`)."""
MAX_HOLD_S = 15.0
"""Past it a held request runs on (within engine_requests_since's wait, to end by length)."""


@dataclass
class Front:
    """The HTTP API in front of an in-process daemon in one scheduling mode."""

    url: str
    address: str
    daemon: Any
    finished: FinishedRequests

    @property
    def v1(self) -> str:
        return f"{self.url}/v1"

    def wait_idle(self) -> dict[str, Any]:
        """The first stats snapshot with nothing queued or running and no KV block in use."""
        return idle_snapshot(self.address, IDLE_TIMEOUT_S)

    def engine_requests_since(self, mark: int, count: int) -> list[Any]:
        """The `count` requests the engine finished after `mark`, checked: no placeholder
        left, and the stats row of each counts exactly its sampled tokens."""
        deadline = time.monotonic() + IDLE_TIMEOUT_S
        while len(self.finished) < mark + count:
            assert time.monotonic() < deadline, f"{len(self.finished) - mark} of {count} ended"
            time.sleep(0.01)
        snapshot = self.wait_idle()
        requests = self.finished.since(mark)
        assert len(requests) == count
        for request in requests:
            assert PENDING_TOKEN_ID not in request.all_token_ids, request.all_token_ids
            [row] = [r for r in snapshot.recent or () if r.request_id == request.request_id]
            assert row.num_generated_tokens == len(request.output_token_ids)
        return requests


@pytest.fixture(scope="module", params=MODES, ids=mode_id)
def front(request, tiny_model_dir, tmp_path_factory):
    is_async = request.param
    address = f"ipc://{tmp_path_factory.mktemp(mode_id(is_async)) / 'h.sock'}"
    engine = {"async_scheduling": is_async, "max_model_len": 512}
    with inprocess_daemon(tiny_model_dir, address, engine=engine) as daemon:
        assert daemon.engine.async_scheduling is is_async
        finished = FinishedRequests(daemon.engine)
        server = HttpServer(HttpSettings("127.0.0.1", free_tcp_port(), address))
        server.start()
        try:
            server.wait_ready()
            yield Front(server.url, address, daemon, finished)
        finally:
            server.stop()


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(url, json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def _stream(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON payloads of a streamed response (checked to end with [DONE])."""
    with httpx.stream("POST", url, json={**body, "stream": True}, timeout=60) as response:
        assert response.status_code == 200, response.read()
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]", lines[-3:]
    payloads = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert not any("error" in payload for payload in payloads), payloads
    return payloads


def _num_running(snapshot: StatsSnapshot) -> int:
    """Requests in the running batch (a dead engine has no queue: a failure here)."""
    assert snapshot.queue is not None, snapshot.daemon.error
    return snapshot.queue.running


def _free_and_stop(front: Front, prompts: list[str]) -> tuple[str, str, str]:
    """A prompt, its free greedy text and a stop string from that text's middle."""
    for prompt in prompts:
        free = _post(f"{front.v1}/completions", {"prompt": prompt, "max_tokens": 40, **GREEDY})
        text = free["choices"][0]["text"]
        stop = stop_string_in(text)
        if stop is not None:
            return prompt, text, stop
    pytest.fail(f"no stop string in the free outputs of {prompts}")


# ------------------------------------------------------------------ stop strings


def test_a_completion_stopped_by_a_string_ends_before_it(front):
    prompt, free_text, stop = _free_and_stop(front, ["Once upon a time", "Hello there"])
    expected = free_text[: free_text.index(stop)]
    body = {"prompt": prompt, "max_tokens": 40, "stop": stop, "logprobs": 0, **GREEDY}
    mark = len(front.finished)

    blocking = _post(f"{front.v1}/completions", body)
    choice = blocking["choices"][0]
    assert (choice["text"], choice["finish_reason"]) == (expected, "stop")
    num_blocking = len(choice["logprobs"]["tokens"])
    assert blocking["usage"]["completion_tokens"] == num_blocking

    payloads = _stream(
        f"{front.v1}/completions", {**body, "stream_options": {"include_usage": True}}
    )
    choices = [c for p in payloads for c in p["choices"]]
    assert "".join(c["text"] for c in choices) == expected
    assert [c["finish_reason"] for c in choices if c["finish_reason"]] == ["stop"]
    num_streamed = sum(len(c["logprobs"]["tokens"]) for c in choices if c["logprobs"])
    assert payloads[-1]["usage"]["completion_tokens"] == num_streamed == num_blocking

    for request in front.engine_requests_since(mark, 2):  # it may have run on past the stop
        assert len(request.output_token_ids) >= num_blocking


def test_a_chat_reply_stopped_by_a_string_ends_before_it(front):
    messages = [{"role": "user", "content": "Tell me a story"}]
    body = {"messages": messages, "max_tokens": 40, "logprobs": True, **GREEDY}
    free = _post(f"{front.v1}/chat/completions", body)["choices"][0]["message"]["content"]
    stop = stop_string_in(free)
    if stop is None:
        pytest.skip(f"no stop string in {free!r}")
    expected = free[: free.index(stop)]
    mark = len(front.finished)

    blocking = _post(f"{front.v1}/chat/completions", {**body, "stop": [stop]})
    choice = blocking["choices"][0]
    assert (choice["message"]["content"], choice["finish_reason"]) == (expected, "stop")
    num_tokens = len(choice["logprobs"]["content"])
    assert blocking["usage"]["completion_tokens"] == num_tokens

    payloads = _stream(
        f"{front.v1}/chat/completions",
        {**body, "stop": [stop], "stream_options": {"include_usage": True}},
    )
    choices = [c for p in payloads for c in p["choices"]]
    assert "".join(c["delta"].get("content") or "" for c in choices) == expected
    assert [c["finish_reason"] for c in choices if c["finish_reason"]] == ["stop"]
    num_streamed = sum(len(c["logprobs"]["content"]) for c in choices if c["logprobs"])
    assert payloads[-1]["usage"]["completion_tokens"] == num_streamed == num_tokens
    front.engine_requests_since(mark, 2)


# ------------------------------------------------------------------ n > 1


def test_n_choices_each_end_once_and_usage_sums_them(front):
    body = {
        "prompt": "Three ways",
        "n": 3,
        "max_tokens": 24,
        "temperature": 0.9,
        "seed": 7,
        "logprobs": 0,
        "stop": ["e", "a"],  # most choices stop early, at different steps
    }
    mark = len(front.finished)
    blocking = _post(f"{front.v1}/completions", body)
    assert [c["index"] for c in blocking["choices"]] == [0, 1, 2]
    counts = [len(c["logprobs"]["tokens"]) for c in blocking["choices"]]
    assert blocking["usage"]["completion_tokens"] == sum(counts)
    for choice in blocking["choices"]:
        assert choice["finish_reason"] in ("stop", "length")
        assert "e" not in choice["text"] and "a" not in choice["text"]

    payloads = _stream(
        f"{front.v1}/completions", {**body, "stream_options": {"include_usage": True}}
    )
    choices = [c for p in payloads for c in p["choices"]]
    reasons = {c["index"]: c["finish_reason"] for c in choices if c["finish_reason"]}
    assert sorted(reasons) == [0, 1, 2]
    assert len([c for c in choices if c["finish_reason"]]) == 3  # one finish per choice
    num_streamed = sum(len(c["logprobs"]["tokens"]) for c in choices if c["logprobs"])
    texts = {i: "".join(c["text"] for c in choices if c["index"] == i) for i in range(3)}
    assert texts == {c["index"]: c["text"] for c in blocking["choices"]}  # seeded: the same
    assert payloads[-1]["usage"]["completion_tokens"] == num_streamed == sum(counts)
    front.engine_requests_since(mark, 6)


def test_n_chat_choices_with_logprobs(front):
    body = {
        "messages": [{"role": "user", "content": "Pick two"}],
        "n": 2,
        "max_tokens": 16,
        "temperature": 0.8,
        "seed": 3,
        "logprobs": True,
        "top_logprobs": 2,
        "ignore_eos": True,
    }
    mark = len(front.finished)
    blocking = _post(f"{front.v1}/chat/completions", body)
    assert [c["index"] for c in blocking["choices"]] == [0, 1]
    for choice in blocking["choices"]:
        content = choice["logprobs"]["content"]
        assert len(content) == 16 and choice["finish_reason"] == "length"
        assert all(len(entry["top_logprobs"]) == 2 for entry in content)
    assert blocking["usage"]["completion_tokens"] == 32
    payloads = _stream(f"{front.v1}/chat/completions", body)
    choices = [c for p in payloads for c in p["choices"]]
    for index in (0, 1):
        mine = [c for c in choices if c["index"] == index]
        tokens = [e["token"] for c in mine if c["logprobs"] for e in c["logprobs"]["content"]]
        expected = blocking["choices"][index]["logprobs"]["content"]
        assert tokens == [entry["token"] for entry in expected]
        assert [c["finish_reason"] for c in mine if c["finish_reason"]] == ["length"]
    front.engine_requests_since(mark, 4)


# ------------------------------------------------------------------ logprobs


def test_completion_logprobs_streamed_equal_blocking(front):
    body = {"prompt": "Log this", "max_tokens": 12, "logprobs": 2, **GREEDY}
    mark = len(front.finished)
    blocking = _post(f"{front.v1}/completions", body)["choices"][0]["logprobs"]
    payloads = _stream(f"{front.v1}/completions", body)
    chunks = [c["logprobs"] for p in payloads for c in p["choices"] if c["logprobs"]]
    streamed = {
        key: [value for chunk in chunks for value in chunk[key]]
        for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset")
    }
    assert streamed["tokens"] == blocking["tokens"] and len(blocking["tokens"]) == 12
    assert streamed["text_offset"] == blocking["text_offset"]
    assert streamed["token_logprobs"] == pytest.approx(blocking["token_logprobs"], abs=1e-4)
    for logprob, top in zip(blocking["token_logprobs"], blocking["top_logprobs"], strict=True):
        assert 1 <= len(top) <= 2 and logprob <= 0  # fewer: two top tokens share a text
        assert logprob >= max(top.values()) - 1e-6  # greedy: the top token
    front.engine_requests_since(mark, 2)


# ------------------------------------------------------------------ disconnects


@contextlib.contextmanager
def _held_at(engine: Any, num_tokens: int) -> Iterator[None]:
    """While inside, once a running request has generated `num_tokens`, the engine steps no
    more until no running request has (an abort took it), for at most MAX_HOLD_S.

    So a disconnect test does not race generation: on a loaded machine the requests could
    otherwise reach max_tokens before the disconnect is noticed. Held, the engine thread
    still runs its commands between (empty) steps: adds, aborts, stats. A daemon that never
    aborts gets its requests back after the hold, and they end by length.
    """
    step = engine.step
    held_since: float | None = None

    def holding_step() -> Any:
        nonlocal held_since
        if any(r.num_output_tokens >= num_tokens for r in engine.scheduler.running):
            held_since = time.monotonic() if held_since is None else held_since
            if time.monotonic() - held_since < MAX_HOLD_S:
                time.sleep(0.005)
                return StepResult(updates=[], stats=None)
        return step()

    engine.step = holding_step
    try:
        yield
    finally:
        engine.step = step


def test_a_streaming_client_that_disconnects_is_aborted(front):
    mark = len(front.finished)
    body = {"prompt": "Going away", "n": 2, "max_tokens": 400, "stream": True, **GREEDY}
    with _held_at(front.daemon.engine, HOLD_AT):
        with httpx.stream("POST", f"{front.v1}/completions", json=body, timeout=60) as response:
            lines = response.iter_lines()
            received = [line for line, _ in zip(lines, range(6), strict=False) if line]
            assert received and all(line.startswith("data: {") for line in received)
        requests = front.engine_requests_since(mark, 2)
    for request in requests:
        assert request.finish_reason.value == "abort"
        assert len(request.output_token_ids) < 400


def test_a_blocking_client_that_disconnects_is_aborted(front):
    mark = len(front.finished)
    body = json.dumps({"prompt": "Hanging up", "max_tokens": 400, **GREEDY}).encode()
    host, port = front.url.removeprefix("http://").split(":")
    with _held_at(front.daemon.engine, HOLD_AT):
        with socket.create_connection((host, int(port)), timeout=10) as raw:
            raw.sendall(
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            deadline = time.monotonic() + IDLE_TIMEOUT_S
            with Client(front.address) as client:
                while _num_running(client.stats(include_requests=False)) == 0:
                    assert time.monotonic() < deadline, "the request never ran"
                    time.sleep(0.01)
            with contextlib.suppress(OSError):
                raw.shutdown(socket.SHUT_RDWR)
        [request] = front.engine_requests_since(mark, 1)
    assert request.finish_reason.value == "abort"
    assert len(request.output_token_ids) < 400
