"""Raw HTTP against a real daemon: SSE framing, error shapes, auth, bad bodies, disconnects."""

from __future__ import annotations

import json
import select
import socket
import time

import httpx
import openai
import pytest

from llmd.client import Client
from llmd.http.http_settings import HttpSettings
from llmd.http.server import HttpServer
from tests.daemon.harness import free_tcp_port

NO_EOS = {"ignore_eos": True}
IDLE_LIMIT_S = 10.0
"""Time a loaded 2-core machine gets to start or free a request (the soak holds the 1 s)."""


def _error(response: httpx.Response) -> dict:
    """The OpenAI error object, checking the shape on the way."""
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"]
    return body["error"]


def test_sse_framing_ends_with_done(served_http):
    body = {"prompt": "Hi", "max_tokens": 5, "stream": True, **NO_EOS}
    with httpx.stream("POST", f"{served_http.v1}/completions", json=body, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        raw = response.read().decode()
    events = raw.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    payloads = [json.loads(event.removeprefix("data: ")) for event in events[:-2]]
    assert all(event.startswith("data: {") for event in events[:-2])
    assert {p["object"] for p in payloads} == {"text_completion"}
    assert len({p["id"] for p in payloads}) == 1
    assert payloads[-1]["choices"][0]["finish_reason"] == "length"
    assert "usage" not in payloads[-1]  # no stream_options.include_usage


def test_error_shapes_and_statuses(served_http):
    url = f"{served_http.v1}/completions"
    cases = [
        ({"prompt": "x", "top_p": 2}, 400, "top_p"),
        ({"prompt": "x", "max_tokens": "many"}, 400, "max_tokens"),
        ({"prompt": "x", "stop_token_ids": [-1]}, 400, "stop_token_ids"),
        ({"max_tokens": 3}, 400, "prompt"),
        ({"prompt": []}, 400, "prompt"),
        ({"prompt": "x", "best_of": 3}, 400, "best_of"),
        ({"prompt": "x", "model": "gpt-4"}, 404, "model"),
    ]
    for body, status, param in cases:
        response = httpx.post(url, json=body, timeout=10)
        assert response.status_code == status, (body, response.text)
        assert _error(response)["param"] == param, body
    chat = httpx.post(
        f"{served_http.v1}/chat/completions",
        json={"messages": [{"role": "robot", "content": "x"}]},
        timeout=10,
    )
    assert chat.status_code == 400 and _error(chat)["param"] == "messages.0.role"
    missing = httpx.get(f"{served_http.url}/v2/anything", timeout=10)
    assert missing.status_code == 404 and _error(missing)["type"] == "not_found_error"


def test_bad_bodies_get_a_clear_4xx_and_the_server_keeps_serving(served_http):
    url = f"{served_http.v1}/completions"
    malformed = httpx.post(url, content=b'{"prompt": ', headers=_json(), timeout=10)
    assert malformed.status_code == 400 and "not valid JSON" in _error(malformed)["message"]
    not_object = httpx.post(url, content=b"[1, 2]", headers=_json(), timeout=10)
    assert not_object.status_code == 400
    wrong_type = httpx.post(url, content=b"prompt=x", timeout=10)
    assert wrong_type.status_code == 415 and "application/json" in _error(wrong_type)["message"]
    binary = httpx.post(url, content=b"\xff\xfe\x00", headers=_json(), timeout=10)
    assert binary.status_code == 400
    huge = b'{"prompt": "' + b"a" * (50 * 1024 * 1024) + b'"}'
    too_large = httpx.post(url, content=huge, headers=_json(), timeout=60)
    assert too_large.status_code == 413 and "limit" in _error(too_large)["message"]
    ok = httpx.post(url, json={"prompt": "still here?", "max_tokens": 2}, timeout=10)
    assert ok.status_code == 200


def _json() -> dict[str, str]:
    return {"Content-Type": "application/json"}


def test_health_version_and_models(served_http):
    health = httpx.get(f"{served_http.url}/health", timeout=10)
    assert health.status_code == 200 and health.json()["status"] == "ok"
    version = httpx.get(f"{served_http.url}/version", timeout=10).json()
    assert version["version"] and version["protocol_version"] >= 1
    models = httpx.get(f"{served_http.v1}/models", timeout=10).json()
    assert models["object"] == "list" and models["data"][0]["owned_by"] == "vllm"
    with Client(served_http.address) as client:  # the daemon's own figure, over ZeroMQ
        daemon = client.stats(include_requests=False, include_block_map=False).daemon
    assert daemon.weight_bytes > 0 and daemon.quantization == ""
    assert models["data"][0]["weight_bytes"] == daemon.weight_bytes
    assert models["data"][0]["quantization"] is None


def test_disconnect_mid_stream_aborts_and_frees_kv(served_http):
    served_http.wait_idle(timeout_s=IDLE_LIMIT_S)  # whatever ran before has finished
    with Client(served_http.address) as client:
        aborts_before = client.stats().totals.finished.get("abort", 0)
    body = {"prompt": "Go on", "max_tokens": 480, "stream": True, **NO_EOS}
    with httpx.stream("POST", f"{served_http.v1}/completions", json=body, timeout=30) as response:
        lines = response.iter_lines()
        num_chunks = 0
        while num_chunks < 3:  # the request is generating
            num_chunks += next(lines).startswith("data: {")
        assert served_http.kv_used_and_running()[0] > 0
    # Leaving the block closed the connection mid-stream. KV freed within 1 s is the soak's
    # promise (tests/soak, scripts/soak.py); here a loaded machine gets slack: all is freed.
    served_http.wait_idle(timeout_s=IDLE_LIMIT_S)
    with Client(served_http.address) as client:
        finished = client.stats().totals.finished
    assert finished.get("abort", 0) == aborts_before + 1


def test_disconnect_of_a_blocking_request_aborts_it(served_http):
    """Hang up once the daemon runs the request: no client timeout to race the generation."""
    served_http.wait_idle(timeout_s=IDLE_LIMIT_S)  # so the one running is this one
    with Client(served_http.address) as client:
        aborts_before = client.stats().totals.finished.get("abort", 0)
    body = json.dumps({"prompt": "Wait", "max_tokens": 480, **NO_EOS}).encode()
    head = (
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    port = int(served_http.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(head.encode() + body)
        deadline = time.monotonic() + IDLE_LIMIT_S
        while served_http.kv_used_and_running()[1] == 0:
            assert time.monotonic() < deadline, "the request never ran"
            if select.select([connection], [], [], 0.005)[0]:
                pytest.fail(f"answered before it ran: {connection.recv(4096)!r}")
        # Closed with no byte of the reply read: the request is still generating.
        assert not select.select([connection], [], [], 0)[0], connection.recv(4096)
    served_http.wait_idle(timeout_s=IDLE_LIMIT_S)
    with Client(served_http.address) as client:
        assert client.stats().totals.finished.get("abort", 0) == aborts_before + 1


@pytest.fixture(scope="module")
def keyed_url(served_http):
    """A second HTTP front end on the same daemon, requiring an API key."""
    settings = HttpSettings("127.0.0.1", free_tcp_port(), served_http.address, api_key="s3cret")
    server = HttpServer(settings)
    server.start()
    server.wait_ready()
    try:
        yield server.url
    finally:
        server.stop()


def test_api_key_guards_the_v1_routes(keyed_url):
    body = {"prompt": "x", "max_tokens": 2}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
        response = httpx.post(f"{keyed_url}/v1/completions", json=body, headers=headers, timeout=10)
        assert response.status_code == 401
        assert _error(response)["type"] == "authentication_error"
        assert response.headers["www-authenticate"] == "Bearer"
    assert httpx.get(f"{keyed_url}/v1/models", timeout=10).status_code == 401
    good = {"Authorization": "Bearer s3cret"}
    assert httpx.post(f"{keyed_url}/v1/completions", json=body, headers=good).status_code == 200
    assert httpx.get(f"{keyed_url}/health", timeout=10).status_code == 200  # probes need no key
    wrong = openai.OpenAI(base_url=f"{keyed_url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()
    right = openai.OpenAI(base_url=f"{keyed_url}/v1", api_key="s3cret", max_retries=0)
    assert len(right.models.list().data) == 1


def test_non_loopback_http_host_needs_allow_remote(served_http):
    from llmd.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="--allow-remote") as error:
        HttpServer(HttpSettings("0.0.0.0", free_tcp_port(), served_http.address))
    assert error.value.parameter == "http_host"


def test_busy_port_fails_with_a_clear_error(served_http):
    from llmd.errors import InvalidParameterError

    port = int(served_http.url.rsplit(":", 1)[1])
    with pytest.raises(InvalidParameterError, match=f"127.0.0.1:{port}"):
        HttpServer(HttpSettings("127.0.0.1", port, served_http.address))


def test_server_answers_while_a_slow_stream_runs(served_http):
    body = {"prompt": "slow", "max_tokens": 200, "stream": True, **NO_EOS}
    started = time.monotonic()
    with httpx.stream("POST", f"{served_http.v1}/completions", json=body, timeout=30) as response:
        lines = response.iter_lines()
        assert next(lines).startswith("data: {")
        assert httpx.get(f"{served_http.url}/health", timeout=10).status_code == 200
        assert [line for line in lines if line][-1] == "data: [DONE]"
    assert time.monotonic() - started < 30
