"""DaemonProcess: one real `llmd serve` process under test, started exactly as a user would.

The soak must see what users see, so it runs the daemon as its own process (its own GIL,
its own descriptor limit) and reads its memory from /proc; kill -9 and restarts act on
that process only.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from llmd.client import Client, DaemonNotRunningError
from llmd.protocol import StatsSnapshot

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = REPO_ROOT / "llmd" / "default_model"
ENGINE_ARGS = ("--num-blocks", "1024", "--max-model-len", "256", "--block-size", "16")
START_TIMEOUT_S = 180.0
DEFAULT_SOFT_NOFILE = 1024
"""The usual soft descriptor limit of a login shell; the daemon must cope with it."""


def daemon_env(runtime_dir: Path) -> dict[str, str]:
    """Environment of a daemon: one torch thread, the checkout on the path, its own runtime dir."""
    env = dict(os.environ)
    env.pop("LLMD_ADDRESS", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env["OMP_NUM_THREADS"] = "1"
    env["TOKENIZERS_PARALLELISM"] = "false"
    env["XDG_RUNTIME_DIR"] = str(runtime_dir)
    return env


class DaemonProcess:
    """Starts, kills and restarts `llmd serve` on one ipc address; reads its stats and RSS."""

    def __init__(
        self,
        runtime_dir: Path,
        model: str | Path = DEFAULT_MODEL,
        extra_args: tuple[str, ...] = (),
        soft_nofile: int | None = DEFAULT_SOFT_NOFILE,
        hard_nofile: int | None = None,
    ) -> None:
        self.runtime_dir = Path(runtime_dir)
        self.runtime_dir.mkdir(parents=True, exist_ok=True)
        self.address = f"ipc://{self.runtime_dir / 'llmd.sock'}"
        self.model = str(model)
        self.extra_args = tuple(extra_args)
        self.soft_nofile = soft_nofile
        """Soft RLIMIT_NOFILE the daemon starts with (None: inherit ours)."""
        self.hard_nofile = hard_nofile
        """Hard RLIMIT_NOFILE the daemon starts with, which it cannot raise (None: ours)."""
        self.log_path = self.runtime_dir / "daemon.log"
        self.http_port = _free_tcp_port()
        """The HTTP API's port, kept across restarts as a user's would be (never 8000,
        which another daemon on this machine may hold)."""
        self.process: subprocess.Popen | None = None
        self.num_starts = 0

    @property
    def pid(self) -> int:
        """The running daemon's process id."""
        assert self.process is not None, "the daemon was never started"
        return self.process.pid

    def command(self) -> list[str]:
        """The exact `llmd serve` command line."""
        return [
            sys.executable, "-m", "llmd.cli", "serve", "--model", self.model,
            "--address", self.address, "--http-port", str(self.http_port),
            *ENGINE_ARGS, *self.extra_args,
        ]  # fmt: skip

    def start(self, wait: bool = True) -> None:
        """Start a daemon (with the lowered descriptor limits) and wait until healthy."""
        soft_nofile, hard_nofile = self.soft_nofile, self.hard_nofile

        def lower_nofile() -> None:
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            hard = hard if hard_nofile is None else hard_nofile
            soft = soft if soft_nofile is None else soft_nofile
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, hard), hard))

        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command(),
                env=daemon_env(self.runtime_dir),
                cwd=REPO_ROOT,
                stdout=subprocess.DEVNULL,
                stderr=log,
                preexec_fn=lower_nofile,
            )
        self.num_starts += 1
        if wait:
            self.wait_healthy()

    def wait_healthy(self, timeout_s: float = START_TIMEOUT_S) -> dict[str, Any]:
        """Poll health until healthy; raise with the log tail if the process exits."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.is_running():
                raise RuntimeError(f"daemon exited with {self.returncode()}:\n{self.log_tail()}")
            try:
                with Client(self.address, timeout=1.0) as client:
                    health = client.health()
                if health["is_healthy"]:
                    return health
            except DaemonNotRunningError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"no healthy daemon at {self.address}:\n{self.log_tail()}")

    def is_running(self) -> bool:
        """True while the process has not exited."""
        return self.process is not None and self.process.poll() is None

    def returncode(self) -> int | None:
        """The exit status (negative: killed by that signal), None while running."""
        return None if self.process is None else self.process.poll()

    def kill9(self) -> None:
        """SIGKILL the daemon and reap it."""
        if self.is_running():
            os.kill(self.pid, signal.SIGKILL)
            self.process.wait(30)  # type: ignore[union-attr]

    def stop(self, timeout_s: float = 30.0) -> None:
        """Graceful stop (SIGTERM), then SIGKILL if it does not exit in time."""
        if not self.is_running():
            return
        self.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        try:
            self.process.wait(timeout_s)  # type: ignore[union-attr]
        except subprocess.TimeoutExpired:
            self.kill9()

    def rss_kb(self) -> int:
        """Resident memory of the daemon (VmRSS, KiB)."""
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS line")

    def num_fds(self) -> int:
        """Open descriptors of the daemon."""
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def stats(self, timeout_s: float = 10.0) -> StatsSnapshot:
        """A stats snapshot without per-request rows or the block map."""
        with Client(self.address, timeout=timeout_s) as client:
            return client.stats(include_requests=False, include_block_map=False)

    def wait_idle(self, timeout_s: float = 30.0) -> StatsSnapshot:
        """Wait until nothing is in flight, waiting or running; return that snapshot."""
        deadline = time.monotonic() + timeout_s
        snapshot = self.stats()
        while time.monotonic() < deadline:
            if is_idle(snapshot):
                return snapshot
            time.sleep(0.05)
            snapshot = self.stats()
        return snapshot

    def log_tail(self, num_chars: int = 3000) -> str:
        """The end of the daemon's log."""
        try:
            return self.log_path.read_text(errors="replace")[-num_chars:]
        except FileNotFoundError:
            return ""

    def __enter__(self) -> DaemonProcess:
        self.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()


def is_idle(snapshot: StatsSnapshot) -> bool:
    """No request in flight, waiting or running (a dead engine has no queues)."""
    queue = snapshot.queue
    return snapshot.daemon.num_in_flight == 0 and (
        queue is None or queue.waiting == queue.running == 0
    )


def used_blocks(snapshot: StatsSnapshot) -> int:
    """KV blocks referenced by live requests."""
    if snapshot.kv is None:
        raise RuntimeError("the daemon's engine is dead: it has no KV pool to count")
    return snapshot.kv.num_used


def raise_own_nofile(minimum: int) -> None:
    """Raise this process's soft descriptor limit to at least `minimum` (up to the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = minimum if hard == resource.RLIM_INFINITY else min(minimum, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def _free_tcp_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
