"""A real `llmd serve` process with its HTTP API on a free port, shared by the HTTP tests.

The daemon runs the tiny checkpoint exactly as a user would start it; tests reach it with
the official openai package, raw httpx, and the ZeroMQ client for independent counts.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.daemon.harness import REPO_ROOT, daemon_env, free_tcp_port, wait_dead, wait_healthy
from tests.http.http_harness import DAEMON_ARGS, ServedHttp, wait_http_ready


@pytest.fixture(scope="session")
def served_http(tiny_model_dir, tmp_path_factory):
    """`llmd serve --http-port PORT` on the tiny model; terminated (drained) at the end."""
    runtime = tmp_path_factory.mktemp("http-daemon")
    address = f"ipc://{runtime / 'd.sock'}"
    port = free_tcp_port()
    log_path = runtime / "daemon.log"
    command = [sys.executable, "-m", "llmd.cli", "serve", "--model", str(tiny_model_dir)]
    command += [*DAEMON_ARGS, "--address", address, "--http-port", str(port)]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command, env=daemon_env(runtime), cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=log
        )
    process.log_path = log_path  # type: ignore[attr-defined]
    try:
        wait_healthy(address, process)
        url = f"http://127.0.0.1:{port}"
        wait_http_ready(url, process)
        yield ServedHttp(url, address, process, log_path, Path(tiny_model_dir))
    finally:
        process.terminate()
        if not wait_dead(process.pid, 20):
            process.kill()
        process.wait(5)
    with pytest.raises(httpx.TransportError):  # the drained daemon stopped its HTTP process
        httpx.get(f"http://127.0.0.1:{port}/version", timeout=2)
    log = log_path.read_text()
    assert "Traceback" not in log, log
