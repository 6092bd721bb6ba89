"""Overload, drain and engine death seen over HTTP, on in-process daemons (cheap injection).

The HTTP server runs on its own thread against the daemon's address, as in `llmd serve`.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time

import httpx
import openai
import pytest

from llmd.client import Client
from llmd.http.http_settings import HttpSettings
from llmd.http.server import HttpServer
from tests.daemon.harness import REPO_ROOT, daemon_env, free_tcp_port, inprocess_daemon

LONG = {"prompt": "long", "max_tokens": 240, "ignore_eos": True, "stream": True}


@contextlib.contextmanager
def _http_in_front_of(address: str):
    server = HttpServer(HttpSettings("127.0.0.1", free_tcp_port(), address))
    server.start()
    server.wait_ready()
    try:
        yield server.url
    finally:
        server.stop()


def test_overload_is_429_with_retry_after_and_drain_is_503(tiny_model_dir, tmp_path):
    address = f"ipc://{tmp_path / 'o.sock'}"
    with (
        inprocess_daemon(tiny_model_dir, address, max_queued_requests=1) as daemon,
        _http_in_front_of(address) as url,
    ):
        _slow_down(daemon.engine, step_s=0.01)  # the long request outlasts the checks below
        with httpx.stream("POST", f"{url}/v1/completions", json=LONG, timeout=60) as running:
            lines = running.iter_lines()
            assert next(lines).startswith("data: {")  # the one allowed request is running
            refused = httpx.post(f"{url}/v1/completions", json={"prompt": "x"}, timeout=10)
            assert refused.status_code == 429
            assert refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["code"] == "overloaded"
            sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
            with pytest.raises(openai.RateLimitError):
                sdk.completions.create(model=str(tiny_model_dir), prompt="x")

            daemon.request_drain(timeout_s=60)
            health = httpx.get(f"{url}/health", timeout=10)
            assert health.status_code == 503 and health.json()["status"] == "draining", health.text
            late = httpx.post(f"{url}/v1/completions", json={"prompt": "x"}, timeout=10)
            assert late.status_code == 503 and late.json()["error"]["code"] == "shutting_down"
            assert "retry-after" in late.headers
            rest = [line for line in lines if line]  # the in-flight stream still finishes
        assert rest[-1] == "data: [DONE]"
        assert '"finish_reason":"length"' in rest[-2]


def test_a_refused_choice_aborts_the_accepted_ones(tiny_model_dir, tmp_path):
    address = f"ipc://{tmp_path / 'n.sock'}"
    with (
        inprocess_daemon(tiny_model_dir, address, max_queued_requests=2) as daemon,
        _http_in_front_of(address) as url,
        Client(address) as client,
    ):
        _slow_down(daemon.engine, step_s=0.01)  # 100 tokens: about 1-2 s if left to run
        body = {"prompt": "n", "n": 3, "max_tokens": 100, "ignore_eos": True}
        refused = httpx.post(f"{url}/v1/completions", json=body, timeout=60)
        assert refused.status_code == 429, refused.text
        # Left running, the accepted choices would finish by length well within 6 s; aborted
        # (in the engine, or before it while tokenizing), they never do.
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            snapshot = client.stats(include_requests=False, include_block_map=False)
            if snapshot.totals.finished.get("length"):
                break
            time.sleep(0.05)
        assert not snapshot.totals.finished.get("length"), snapshot.totals
        assert snapshot.queue is not None and snapshot.kv is not None, snapshot.daemon.error
        assert snapshot.queue.running == snapshot.queue.waiting == 0
        assert snapshot.kv.num_used == 0


def _slow_down(engine, step_s: float) -> None:
    step = engine.step

    def slow_step():
        time.sleep(step_s)
        return step()

    engine.step = slow_step


def test_engine_death_is_a_500_and_unhealthy(tiny_model_dir, tmp_path):
    address = f"ipc://{tmp_path / 'e.sock'}"
    with (
        inprocess_daemon(tiny_model_dir, address) as daemon,
        _http_in_front_of(address) as url,
    ):
        died = threading.Event()

        def broken_step():
            died.set()
            raise RuntimeError("scheduler bug")

        daemon.engine.step = broken_step
        response = httpx.post(f"{url}/v1/completions", json={"prompt": "x"}, timeout=30)
        assert died.is_set()
        assert response.status_code == 500
        error = response.json()["error"]
        assert error["code"] == "engine_dead" and "scheduler bug" in error["message"]
        health = httpx.get(f"{url}/health", timeout=10)
        assert health.status_code == 503 and health.json()["status"] == "dead"
        sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.InternalServerError):
            sdk.chat.completions.create(
                model=str(tiny_model_dir), messages=[{"role": "user", "content": "hi"}]
            )


def test_http_layer_imports_no_torch():
    code = (
        "import sys, llmd.http.server, llmd.http.app, llmd.daemon.serve\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=daemon_env(), capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
