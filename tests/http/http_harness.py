"""Helpers for the HTTP tests: a served daemon's handle, readiness and idleness checks.

Idleness is read from the daemon's own stats over ZeroMQ, an independent route from the
HTTP responses under test.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from llmd.client import Client
from tests import scheduling_mode
from tests.daemon.harness import REPO_ROOT, daemon_env, free_tcp_port, wait_dead, wait_healthy

MAX_MODEL_LEN = 512
"""The tiny checkpoint's position limit: long enough to outlive a disconnect by a second."""
DAEMON_ARGS = [
    "--num-blocks", "512", "--block-size", "16", "--max-model-len", str(MAX_MODEL_LEN),
    *scheduling_mode.serve_flags(),
]  # fmt: skip
"""The HTTP tests' daemon flags, this run's scheduling mode included (tests.scheduling_mode)."""


@dataclass(frozen=True)
class ServedHttp:
    """A running daemon: its HTTP base URL, ZeroMQ address, process and log."""

    url: str
    address: str
    process: subprocess.Popen
    log_path: Path
    model_dir: Path

    @property
    def v1(self) -> str:
        """The OpenAI base URL."""
        return f"{self.url}/v1"

    def kv_used_and_running(self) -> tuple[int, int]:
        """Blocks in use and running requests, from the daemon's own stats (over ZeroMQ)."""
        with Client(self.address) as client:
            snapshot = client.stats(include_requests=False, include_block_map=False)
        assert snapshot.kv is not None and snapshot.queue is not None, snapshot.daemon.error
        return snapshot.kv.num_used, snapshot.queue.running

    def wait_idle(self, timeout_s: float = 10.0) -> float:
        """Seconds until no block is used and nothing runs (raises after `timeout_s`)."""
        started = time.monotonic()
        while self.kv_used_and_running() != (0, 0):
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"still busy: {self.kv_used_and_running()}")
            time.sleep(0.02)
        return time.monotonic() - started


def wait_http_ready(url: str, process: subprocess.Popen | None = None) -> None:
    """Poll GET /health until it answers 200."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"daemon exited with {process.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"no HTTP API at {url}")


@contextlib.contextmanager
def http_daemon(
    model_dir: Path, runtime: Path, args: list[str], preexec_fn: Any = None
) -> Iterator[ServedHttp]:
    """`llmd serve --http-port PORT` with `args` (DAEMON_ARGS or the like, with the run's
    scheduling mode) on a free port, socket and log in `runtime`; drained on exit.
    `preexec_fn` runs in the child before it starts (to restrict its cores, say)."""
    address = f"ipc://{runtime / 'd.sock'}"
    port = free_tcp_port()
    log_path = runtime / "daemon.log"
    command = [sys.executable, "-m", "llmd.cli", "serve", "--model", str(model_dir)]
    command += [*args, "--address", address, "--http-port", str(port)]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command,
            env=daemon_env(runtime),
            cwd=REPO_ROOT,
            stdout=subprocess.DEVNULL,
            stderr=log,
            preexec_fn=preexec_fn,
        )
    process.log_path = log_path  # type: ignore[attr-defined]
    try:
        wait_healthy(address, process)
        url = f"http://127.0.0.1:{port}"
        wait_http_ready(url, process)
        yield ServedHttp(url, address, process, log_path, Path(model_dir))
    finally:
        process.terminate()
        if not wait_dead(process.pid, 20):
            process.kill()
        process.wait(5)
