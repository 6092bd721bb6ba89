"""Two or more `llmd serve` daemons behind SMG (Shepherd Model Gateway), for the fleet test.

The router is installed once into its own virtual environment under llmd's cache
directory (never the project's), so the test needs the network only the first time; a
machine where it cannot be installed or started skips the test with the reason.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.daemon.harness import REPO_ROOT, daemon_env, free_tcp_port, wait_dead
from tests.http.http_harness import wait_http_ready

ROUTER_PACKAGE = "smg==1.13.0"
"""SMG, not vllm-router 0.1.17: the latter routed text prompts by load alone here (its
prefix input 'render_unavailable' for llmd's workers), see docs/scale-out.md."""
INSTALL_TIMEOUT_S = 600
LOAD_MONITOR_INTERVAL_S = 1
"""How often SMG polls each worker's load (its default is 10 s)."""
ROUTER_ARGS = ["--policy", "cache_aware", "--retry-max-retries", "3",
               "--health-check-interval-secs", "1", "--health-failure-threshold", "1",
               "--health-success-threshold", "1",
               "--load-monitor-interval", str(LOAD_MONITOR_INTERVAL_S),
               "--worker-warmup-secs", "0", "--worker-warmup-divert-every", "0"]  # fmt: skip
"""Cache-aware routing, retried on another worker, a dead worker seen within a second.

SMG places a cache miss on the worker with the least expected wait, from each worker's
last load report plus what it sent there since. Its monitor polls when a worker registers
and then every interval; the workers register one after the other, so at 10 s the second
one had no report for the first 10 s and scored as if busy. Polled each second, both have
one before the router is used (`Router.start` waits for it).

SMG's warm-up slice is off: by default it sends one cache miss in four to a worker that
became routable in the last minute, and one cache hit in eight to a worker whose index is
thin, whatever the load. Both workers start thin, so with it on, a group's first request
may land on the busy worker and a later one on the worker that does not hold its prefix:
the test would measure SMG's warm-up dice, not whether it sees llmd's load and cache."""


def cache_root() -> Path:
    """llmd's cache directory ($LLMD_CACHE_DIR, else $XDG_CACHE_HOME/llmd, else ~/.cache/llmd)."""
    if os.environ.get("LLMD_CACHE_DIR"):
        return Path(os.environ["LLMD_CACHE_DIR"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "llmd"


def router_binary() -> Path:
    """`smg` from its test-only venv, installed on first use, or skip with why."""
    venv = cache_root() / "smg-venv"
    binary = venv / "bin" / "smg"
    if binary.exists():
        return binary
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120,
                       capture_output=True)  # fmt: skip
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", ROUTER_PACKAGE], check=True,
                       timeout=INSTALL_TIMEOUT_S, capture_output=True)  # fmt: skip
    except (subprocess.SubprocessError, OSError) as error:
        stderr = getattr(error, "stderr", b"") or b""
        pytest.skip(f"cannot install {ROUTER_PACKAGE} into {venv}: {error} {stderr[-300:]!r}")
    if not binary.exists():
        pytest.skip(f"{ROUTER_PACKAGE} installed no smg into {venv}")
    return binary


@dataclass
class Worker:
    """One `llmd serve` daemon on a fixed HTTP port (so a restart comes back on it)."""

    model_dir: Path
    runtime: Path
    port: int = field(default_factory=free_tcp_port)
    process: subprocess.Popen | None = None
    serve_args: tuple[str, ...] = ("--max-model-len", "512", "--num-blocks", "256")
    """Flags of `llmd serve` besides the model, thread count, name and addresses."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start the daemon (one forward thread) and wait until its HTTP API is healthy."""
        self.runtime.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "llmd.cli", "serve", "--model", str(self.model_dir),
                   "--num-threads", "1", *self.serve_args,
                   "--served-model-name", "tiny",
                   "--address", f"ipc://{self.runtime / 'd.sock'}",
                   "--http-port", str(self.port)]  # fmt: skip
        with open(self.runtime / "daemon.log", "ab") as log:
            self.process = subprocess.Popen(command, env=daemon_env(self.runtime), cwd=REPO_ROOT,
                                            stdout=subprocess.DEVNULL, stderr=log)  # fmt: skip
        wait_http_ready(self.url, self.process)

    def kill(self) -> None:
        """SIGKILL the daemon (its HTTP process follows through the lifeline pipe)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # wait until the port is closed
            try:
                httpx.get(f"{self.url}/health", timeout=0.5)
            except httpx.TransportError:
                return
            time.sleep(0.1)

    def stop(self) -> None:
        """Drain and stop the daemon if it runs."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            if not wait_dead(self.process.pid, 20):
                self.process.kill()
            self.process.wait(5)

    def num_running(self) -> int:
        """Requests this worker is running now (its vllm:num_requests_running gauge)."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "vllm:num_requests_running":
                    return int(sample.value)
        raise AssertionError("no vllm:num_requests_running on the worker's /metrics")

    def counters(self) -> dict[str, float]:
        """This worker's own vllm: counters: finished requests, prompt and hit tokens."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        values = {"requests": 0.0}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "vllm:request_success_total":
                    values["requests"] += sample.value
                elif sample.name in ("vllm:prefix_cache_hits_total",
                                     "vllm:prefix_cache_queries_total"):  # fmt: skip
                    values[sample.name.removeprefix("vllm:").removesuffix("_total")] = sample.value
        return values


@dataclass
class Router:
    """The router (`smg launch`) in front of `workers`, on its own ports."""

    binary: Path
    worker_urls: list[str]
    log_path: Path
    subcommand: tuple[str, ...] = ("launch",)
    """Words before the options."""
    metrics_port: int = field(default_factory=free_tcp_port)
    port: int = field(default_factory=free_tcp_port)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start the router; wait until every worker is routable and load-polled, or skip."""
        command = [str(self.binary), *self.subcommand,
                   "--host", "127.0.0.1", "--port", str(self.port),
                   "--prometheus-host", "127.0.0.1", "--prometheus-port", str(self.metrics_port),
                   "--worker-urls", *self.worker_urls, *ROUTER_ARGS]  # fmt: skip
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.skip(f"the router exited with {self.process.returncode}: "
                            f"{self.log_path.read_text()[-500:]}")  # fmt: skip
            try:
                if self.ready_worker_urls() >= set(self.worker_urls):
                    time.sleep(2 * LOAD_MONITOR_INTERVAL_S)  # a load poll covering all
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        pytest.skip(f"the router did not route to every worker in 60 s: "
                    f"{self.log_path.read_text()[-500:]}")  # fmt: skip

    def ready_worker_urls(self) -> set[str]:
        """The workers the router lists as ready (`GET /workers`)."""
        response = httpx.get(f"{self.url}/workers", timeout=2)
        if response.status_code != 200:
            return set()
        return {w["url"] for w in response.json().get("workers", []) if w.get("status") == "ready"}

    def stop(self) -> None:
        """Stop the router."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
