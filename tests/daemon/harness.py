"""Helpers to run daemons in tests: a real daemon process, an in-process one, raw sockets.

End-to-end tests start `python -m llmd.cli serve` exactly as a user would; in-process
daemons (the same Daemon class on a thread) make failure injection cheap.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import zmq

from llmd.client import Client, DaemonNotRunningError
from llmd.protocol import Keepalive, StatsSnapshot, decode_daemon_message, pack
from tests import scheduling_mode

REPO_ROOT = Path(__file__).resolve().parents[2]
ENGINE_ARGS = [
    "--num-blocks", "512", "--max-model-len", "256", "--block-size", "16", "--no-http",
    *scheduling_mode.serve_flags(),
]  # fmt: skip
"""Every test daemon's engine flags, this run's scheduling mode included (tests.scheduling_mode)."""
START_TIMEOUT_S = 120.0


def daemon_env(runtime_dir: Path | None = None) -> dict[str, str]:
    """Environment for a daemon or CLI subprocess: one torch thread, repo on the path."""
    env = dict(os.environ)
    env.pop("LLMD_ADDRESS", None)
    env.pop("LLMD_API_KEY", None)  # a user's exported key would make every test daemon ask for it
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env["OMP_NUM_THREADS"] = "1"
    env["TOKENIZERS_PARALLELISM"] = "false"
    if runtime_dir is not None:
        env["XDG_RUNTIME_DIR"] = str(runtime_dir)
    return env


def run_cli(args: list[str], env: dict[str, str], timeout: float = 60.0):
    """Run `python -m llmd.cli ARGS` and return the CompletedProcess."""
    return subprocess.run(
        [sys.executable, "-m", "llmd.cli", *args],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_daemon(
    model_dir: Path,
    address: str | None,
    env: dict[str, str],
    log_path: Path,
    *extra: str,
    preexec_fn: Any = None,
):
    """Start a foreground daemon process logging to `log_path`; wait until it is healthy.

    `preexec_fn` runs in the child before it starts (to set resource limits, say).
    """
    command = [sys.executable, "-m", "llmd.cli", "serve", "--model", str(model_dir)]
    command += ENGINE_ARGS + (["--address", address] if address else []) + list(extra)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            command,
            env=env,
            cwd=REPO_ROOT,
            stdout=subprocess.DEVNULL,
            stderr=log,
            preexec_fn=preexec_fn,
        )
    process.log_path = log_path  # type: ignore[attr-defined]
    wait_healthy(address or _default_address(env), process)
    return process


def _default_address(env: dict[str, str]) -> str:
    return f"ipc://{Path(env['XDG_RUNTIME_DIR']) / 'llmd' / 'llmd.sock'}"


def wait_healthy(address: str, process: subprocess.Popen | None = None) -> dict[str, Any]:
    """Poll health until the daemon answers healthy (fail fast if the process exits)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            log_path = getattr(process, "log_path", None)
            log = Path(log_path).read_text() if log_path else ""
            raise RuntimeError(f"daemon exited with {process.returncode}:\n{log}")
        try:
            with Client(address, timeout=1.0) as client:
                health = client.health()
                if health["is_healthy"]:
                    return health
        except DaemonNotRunningError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"no healthy daemon at {address}")


def is_alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            return file.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_dead(pid: int, timeout: float = 15.0) -> bool:
    """Wait until `pid` has exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_alive(pid):
            return True
        time.sleep(0.05)
    return False


def free_tcp_port() -> int:
    """A port nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RawPeer:
    """A bare DEALER for sending arbitrary bytes to a daemon (and reading every frame of
    each reply message: the daemon sends a burst of replies as one message)."""

    def __init__(self, address: str, options: dict[int, int] | None = None) -> None:
        self.context = zmq.Context.instance()
        self.socket = self.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        for option, value in (options or {}).items():  # set before connecting
            self.socket.setsockopt(option, value)
        self.socket.connect(address)
        self.pending: deque[bytes] = deque()
        """Frames of a message already read and not yet returned."""

    def send(self, *frames: bytes) -> None:
        """Send one message of the given frames."""
        self.socket.send_multipart(list(frames))

    def send_map(self, data: dict[str, Any]) -> None:
        """Send a msgpack map."""
        self.send(pack(data))

    def receive(self, timeout: float = 5.0, skip_keepalives: bool = True):
        """The next decoded daemon message (keepalives skipped), or None on timeout."""
        deadline = time.monotonic() + timeout
        while self.pending or self.socket.poll(max(0, int((deadline - time.monotonic()) * 1000))):
            if not self.pending:
                self.pending.extend(self.socket.recv_multipart())
            message = decode_daemon_message(self.pending.popleft())
            if not (skip_keepalives and isinstance(message, Keepalive)):
                return message
        return None

    def close(self) -> None:
        """Close at once (unsent messages are dropped)."""
        self.socket.close(linger=0)


@contextlib.contextmanager
def inprocess_daemon(model_dir: Path, address: str, **kwargs: Any) -> Iterator[Any]:
    """A Daemon serving a fresh tiny engine on a thread; stopped on exit.

    `engine` holds EngineConfig overrides (this run's scheduling mode unless it names one);
    the other keyword arguments are ServeOptions.
    """
    from llmd.config import EngineConfig
    from llmd.daemon.serve_options import ServeOptions
    from llmd.daemon.server import Daemon
    from llmd.llm_engine import LLMEngine
    from llmd.protocol import parse_address

    engine_kwargs = {
        "num_blocks": 256,
        "max_model_len": 256,
        **scheduling_mode.engine_kwargs(),
        **kwargs.pop("engine", {}),
    }
    engine = LLMEngine(EngineConfig(model=str(model_dir), **engine_kwargs))
    daemon = Daemon(engine, ServeOptions(address=address, **kwargs), parse_address(address))
    daemon.bind()
    thread = threading.Thread(target=daemon.serve_forever, daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while daemon.state == "warming" and time.monotonic() < deadline:
        time.sleep(0.01)  # tests patch the engine after the warm-up's own steps
    try:
        yield daemon
    finally:
        daemon.request_drain(now=True)
        thread.join(20)


class FinishedRequests:
    """Records the engine's Request of every request that finishes, in or outside a step.

    Wraps the in-process engine's `step`, `finish_request` and `abort_request` (called on the
    engine thread), so a test can check what the engine really holds for a finished request.
    """

    def __init__(self, engine: Any) -> None:
        self._lock = threading.Lock()
        self._requests: dict[str, Any] = {}
        """Request by engine id, in the order they finished."""
        step, finish, abort = engine.step, engine.finish_request, engine.abort_request

        def recording_step():
            result = step()
            for update in result.updates:
                if update.request.is_finished:
                    self._record(update.request)
            return result

        def recording_finish(request_id, *args, **kwargs):
            return self._record(finish(request_id, *args, **kwargs))

        def recording_abort(request_id):
            return self._record(abort(request_id))

        engine.step = recording_step
        engine.finish_request = recording_finish
        engine.abort_request = recording_abort

    def _record(self, request: Any) -> Any:
        if request is not None:
            with self._lock:
                self._requests.setdefault(request.request_id, request)
        return request

    def __len__(self) -> int:
        with self._lock:
            return len(self._requests)

    def get(self, request_id: str, timeout_s: float = 20.0) -> Any:
        """The finished request (waiting for the engine thread to have finished it)."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                if request_id in self._requests:
                    return self._requests[request_id]
            assert time.monotonic() < deadline, f"request {request_id} never finished"
            time.sleep(0.01)

    def since(self, num_before: int) -> list[Any]:
        """The requests finished after the first `num_before` (a `len()` taken earlier)."""
        with self._lock:
            return list(self._requests.values())[num_before:]


class RunnerFault:
    """Makes the runner's `nth` launch from now raise, or its samples' `resolve` raise or
    stall for `stall_s`; once. Sync steps are launch + resolve too, so both modes meet it."""

    def __init__(self, runner: Any, nth: int, where: str, stall_s: float | None = None) -> None:
        assert where in ("launch", "resolve")
        self.fired = threading.Event()
        """Set when the fault happens (a stall: when it begins)."""
        self.stall_ended = threading.Event()
        launch = runner.launch
        count = 0

        def faulty_launch(plan):
            nonlocal count
            count += 1
            if count != nth:
                return launch(plan)
            if where == "launch":
                self.fired.set()
                raise RuntimeError("injected launch failure")
            return _FaultyPending(launch(plan), self, stall_s)

        runner.launch = faulty_launch


class _FaultyPending:
    """A launched step whose `resolve` raises, or stalls and then resolves."""

    def __init__(self, pending: Any, fault: RunnerFault, stall_s: float | None) -> None:
        self._pending = pending
        self._fault = fault
        self._stall_s = stall_s

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pending, name)

    def resolve(self) -> Any:
        self._fault.fired.set()
        if self._stall_s is None:
            raise RuntimeError("injected resolve failure")
        time.sleep(self._stall_s)
        self._fault.stall_ended.set()
        return self._pending.resolve()


def stop_string_in(text: str) -> str | None:
    """Three printable ASCII characters from the second half of `text`, if any are: a stop
    string a greedy rerun of the same prompt is sure to meet."""
    for start in range(len(text) // 2, len(text) - 3):
        candidate = text[start : start + 3]
        if candidate.isascii() and candidate.isprintable() and candidate.strip() == candidate:
            return candidate
    return None


def idle_snapshot(address: str, timeout_s: float = 20.0) -> StatsSnapshot:
    """The first stats snapshot with nothing queued or running and no KV block in use."""
    deadline = time.monotonic() + timeout_s
    with Client(address) as client:
        while True:
            snapshot = client.stats(include_block_map=False)
            queue, kv = snapshot.queue, snapshot.kv
            if queue.running == queue.waiting == kv.num_used == 0:
                return snapshot
            assert time.monotonic() < deadline, (queue, kv.num_used)
            time.sleep(0.02)
