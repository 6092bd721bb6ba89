"""A failure after an SSE stream began: the client gets one error event, then `data: [DONE]`.

Once the first chunk is out the status is 200 for good, so a runner failure, an engine
death or a daemon-side abort mid-stream can only be told in the stream itself (OpenAI's
SDKs raise such an event as an APIError). Both routes, async scheduling off and on.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from typing import Any

import httpx
import openai
import pytest

from llmd.client import Client
from llmd.http.http_settings import HttpSettings
from llmd.http.server import HttpServer
from tests.daemon.harness import RunnerFault, free_tcp_port, inprocess_daemon
from tests.scheduling_mode import MODES, mode_id

ROUTES = {
    "completions": {"prompt": "stream then fail"},
    "chat/completions": {"messages": [{"role": "user", "content": "stream then fail"}]},
}
LONG = {"max_tokens": 200, "temperature": 0.0, "ignore_eos": True, "stream": True}


@contextlib.contextmanager
def _served(model_dir, address: str, is_async: bool, **options: Any):
    """An in-process daemon in one mode with the HTTP process in front: (daemon, base URL).

    Its steps are slowed to 10 ms, so a 200-token stream outlasts the test's first read.
    """
    engine = {"async_scheduling": is_async, "max_model_len": 256}
    with inprocess_daemon(model_dir, address, engine=engine, **options) as daemon:
        step = daemon.engine.step

        def slow_step():
            time.sleep(0.01)
            return step()

        daemon.engine.step = slow_step
        server = HttpServer(HttpSettings("127.0.0.1", free_tcp_port(), address))
        server.start()
        try:
            server.wait_ready()
            yield daemon, server.url
        finally:
            server.stop()


@pytest.fixture(scope="module", params=MODES, ids=mode_id)
def served(request, tiny_model_dir, tmp_path_factory):
    """One daemon per mode for the failures it survives (runner failures)."""
    address = f"ipc://{tmp_path_factory.mktemp(mode_id(request.param)) / 'f.sock'}"
    with _served(tiny_model_dir, address, request.param) as (daemon, url):
        yield daemon, url, address


def _events(response: httpx.Response) -> list[str]:
    """The stream's `data:` lines, read to the end."""
    return [line for line in response.iter_lines() if line]


def _events_failing_after_the_first(
    response: httpx.Response, daemon: Any, where: str
) -> tuple[list[str], RunnerFault]:
    """The stream's `data:` lines, with a runner fault injected once the first one arrived."""
    lines = response.iter_lines()
    first = next(line for line in lines if line)
    fault = RunnerFault(daemon.engine.runner, nth=2, where=where)
    return [first, *(line for line in lines if line)], fault


def _assert_error_then_done(lines: list[str], code: str, message: str) -> dict[str, Any]:
    """Chunks, then exactly one error event, then [DONE] and nothing else; the error."""
    assert lines[-1] == "data: [DONE]", lines[-3:]
    payloads = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    errors = [p for p in payloads if "error" in p]
    assert len(errors) == 1 and payloads[-1] is errors[0], payloads[-3:]
    assert any(p.get("choices") for p in payloads[:-1]), "the failure came before any chunk"
    error = errors[0]["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code and message in error["message"], error
    return error


def _wait_idle(address: str) -> None:
    deadline = time.monotonic() + 20
    with Client(address) as client:
        while True:
            snapshot = client.stats(include_requests=False, include_block_map=False)
            assert snapshot.queue is not None and snapshot.kv is not None, "the engine died"
            if snapshot.queue.running == snapshot.kv.num_used == 0:
                return
            assert time.monotonic() < deadline, snapshot.queue
            time.sleep(0.02)


@pytest.mark.parametrize("where", ["launch", "resolve"])
@pytest.mark.parametrize("route", list(ROUTES))
def test_a_runner_failure_mid_stream_is_an_error_event_then_done(served, route, where):
    daemon, url, address = served
    body = {**ROUTES[route], **LONG}
    with httpx.stream("POST", f"{url}/v1/{route}", json=body, timeout=60) as response:
        assert response.status_code == 200
        lines, fault = _events_failing_after_the_first(response, daemon, where)
    assert fault.fired.is_set()
    error = _assert_error_then_done(lines, "request_failed", f"injected {where} failure")
    assert error["type"] == "internal_server_error"
    _wait_idle(address)
    after = httpx.post(f"{url}/v1/{route}", json={**body, "max_tokens": 4, "stream": False})
    assert after.status_code == 200, after.text  # the daemon serves on


def test_a_failure_in_one_of_n_streamed_choices_ends_the_stream_once(served):
    daemon, url, address = served
    body = {**ROUTES["completions"], **LONG, "n": 3}
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as response:
        assert response.status_code == 200
        lines, _ = _events_failing_after_the_first(response, daemon, "launch")
    _assert_error_then_done(lines, "request_failed", "injected launch failure")
    _wait_idle(address)  # the choices the failure did not reach were aborted, not left running


def test_the_openai_sdk_raises_the_mid_stream_error(served):
    daemon, url, _ = served
    sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
    stream = sdk.completions.create(
        model=daemon.engine.model_name, prompt="sdk", max_tokens=200, stream=True,
        extra_body={"ignore_eos": True},
    )  # fmt: skip
    chunks = []
    with pytest.raises(openai.APIError, match="injected launch failure"):
        for chunk in stream:
            if not chunks:  # it fails mid-stream, not before
                RunnerFault(daemon.engine.runner, nth=2, where="launch")
            chunks.append(chunk)


@pytest.mark.parametrize("is_async", MODES, ids=mode_id)
def test_an_engine_death_mid_stream_is_an_error_event_then_done(tiny_model_dir, tmp_path, is_async):
    address = f"ipc://{tmp_path / 'e.sock'}"
    with _served(tiny_model_dir, address, is_async) as (daemon, url):
        step = daemon.engine.step
        num_steps = 0

        def dying_step():
            nonlocal num_steps
            num_steps += 1
            if num_steps > 5:
                raise RuntimeError("scheduler bug")
            return step()

        daemon.engine.step = dying_step
        body = {**ROUTES["chat/completions"], **LONG}
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as response:
            assert response.status_code == 200
            lines = _events(response)
        _assert_error_then_done(lines, "engine_dead", "scheduler bug")
        health = httpx.get(f"{url}/health", timeout=10)
        assert health.status_code == 503 and health.json()["status"] == "dead"


@pytest.mark.parametrize("is_async", MODES, ids=mode_id)
def test_a_daemon_side_abort_mid_stream_is_an_error_event_then_done(
    tiny_model_dir, tmp_path, is_async
):
    """`llmd stop --now` while a stream runs: the request is aborted, and the client told."""
    address = f"ipc://{tmp_path / 'a.sock'}"
    with _served(tiny_model_dir, address, is_async) as (daemon, url):
        body = {**ROUTES["completions"], **LONG}
        with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as response:
            lines = response.iter_lines()
            first = next(line for line in lines if line)
            assert first.startswith("data: {")
            stopper = threading.Thread(target=lambda: daemon.request_drain(now=True))
            stopper.start()
            rest = [line for line in lines if line]
            stopper.join(10)
        _assert_error_then_done([first, *rest], "shutting_down", "aborted this request")


async def test_a_bug_mid_stream_is_still_an_error_event_then_done(served, monkeypatch):
    """Regression: only typed llmd errors became an error event; any other exception cut the
    stream off with neither the event nor [DONE] (the SDKs then fail on a truncated body)."""
    from llmd.http import completions
    from llmd.http.app import create_app
    from llmd.http.context import HttpContext

    _, _, address = served
    real = completions.completion_logprobs
    num_calls = 0

    def broken(entries, text_offset):
        nonlocal num_calls
        num_calls += 1
        if num_calls > 2:
            raise ValueError("a bug in the chunk formatting")
        return real(entries, text_offset)

    monkeypatch.setattr(completions, "completion_logprobs", broken)
    context = HttpContext(address, None, 1 << 20)
    transport = httpx.ASGITransport(app=create_app(context), raise_app_exceptions=False)
    body = {**ROUTES["completions"], **LONG, "max_tokens": 20, "logprobs": 0}
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://llmd") as client,
        client.stream("POST", "/v1/completions", json=body, timeout=60) as response,
    ):
        assert response.status_code == 200
        lines = [line async for line in response.aiter_lines() if line]
    await context.close()
    error = _assert_error_then_done(lines, "internal", "ValueError: a bug in the chunk formatting")
    assert error["type"] == "internal_server_error"
    _wait_idle(address)  # the request was aborted on the daemon
