"""What `llmd top` costs: its CPU share at each refresh interval, and the daemon's cost of
serving it, against a real daemon under load.

Starts `llmd serve` (the shipped model unless --model), keeps it busy with streaming
clients, then runs `llmd top` in a pseudo-terminal of the given size, as a user would,
and reads its CPU time from /proc before and after a window. The daemon's CPU is read
over the same windows with top attached and with no subscriber (the baseline of the same
run), so the cost of serving snapshots shows as a difference. Prints the median of
--repeats windows, as % of one core.

    python scripts/bench_top_cost.py --intervals 1 0.25 --window 20 --repeats 3
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import pty
import select
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used so far by process `pid` (threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("LLMD_ADDRESS", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env["TOKENIZERS_PARALLELISM"] = "false"
    return env


def start_daemon(address: str, model: str | None, log_path: Path) -> subprocess.Popen:
    """`llmd serve` in the foreground on a private address; returns once it is healthy.

    ZeroMQ only (--no-http): a busy port 8000 must not stop a benchmark.
    """
    from llmd.client import Client, DaemonNotRunningError

    command = [sys.executable, "-m", "llmd.cli", "serve", "--address", address, "--no-http"]
    if model:
        command += ["--model", model]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, env=environment(), stdout=log, stderr=log)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the daemon exited:\n{log_path.read_text()}")
        with contextlib.suppress(DaemonNotRunningError), Client(address, timeout=1.0) as client:
            if client.health()["is_healthy"]:
                return process
        time.sleep(0.2)
    process.kill()
    raise TimeoutError(f"the daemon was not healthy in time:\n{log_path.read_text()}")


class Load:
    """Streaming clients that keep the daemon busy until stopped."""

    def __init__(self, address: str, num_clients: int, max_tokens: int) -> None:
        self.address = address
        self.max_tokens = max_tokens
        self.is_stopped = threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(num_clients)]
        self.num_requests = 0

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.is_stopped.set()
        for thread in self.threads:
            thread.join(30)

    def _run(self) -> None:
        from llmd.client import Client

        params = {"max_tokens": self.max_tokens, "ignore_eos": True, "temperature": 0.8}
        with Client(self.address, timeout=30.0) as client:
            while not self.is_stopped.is_set():
                for _ in client.stream("Tell me a story about a cat.", params=params):
                    if self.is_stopped.is_set():
                        break
                self.num_requests += 1


class TopInTerminal:
    """`llmd top` in a pseudo-terminal whose screen updates are read and thrown away."""

    def __init__(
        self, address: str, interval: float, columns: int, rows: int, profile: Path | None = None
    ) -> None:
        self.leader, follower = pty.openpty()
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        env = {**environment(), "TERM": "xterm-256color"}
        profiler = [] if profile is None else ["-m", "cProfile", "-o", str(profile)]
        command = [sys.executable, *profiler, "-m", "llmd.cli", "top", "--address", address,
                   "--interval", str(interval)]  # fmt: skip
        self.process = subprocess.Popen(
            command, stdin=follower, stdout=follower, stderr=follower, env=env
        )
        os.close(follower)
        self.num_bytes = 0
        self.is_stopped = threading.Event()
        self.reader = threading.Thread(target=self._drain, daemon=True)
        self.reader.start()

    def _drain(self) -> None:
        while not self.is_stopped.is_set():
            if select.select([self.leader], [], [], 0.1)[0]:
                try:
                    self.num_bytes += len(os.read(self.leader, 1 << 16))
                except OSError:
                    return

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self.leader, b"q")
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.is_stopped.set()
        self.reader.join(5)
        os.close(self.leader)


def measure(pids: list[int], window_s: float) -> list[float]:
    """Each process's CPU use over `window_s`, as a fraction of one core."""
    before = [cpu_seconds(pid) for pid in pids]
    start = time.monotonic()
    time.sleep(window_s)
    elapsed = time.monotonic() - start
    return [(cpu_seconds(pid) - b) / elapsed for pid, b in zip(pids, before)]


def idle_cost(
    address: str,
    daemon_pid: int,
    interval: float,
    args: argparse.Namespace,
    columns: int,
    rows: int,
) -> None:
    """The daemon's cost of serving top alone: idle daemon with and without a subscriber."""
    time.sleep(args.warmup)
    alone = statistics.median(measure([daemon_pid], args.window)[0] for _ in range(args.repeats))
    top = TopInTerminal(address, interval, columns, rows)
    try:
        time.sleep(args.warmup)
        watched = [measure([top.process.pid, daemon_pid], args.window) for _ in range(args.repeats)]
    finally:
        top.close()
    served = statistics.median(sample[1] for sample in watched)
    print(f"idle daemon: {alone:6.1%} of a core alone, {served:6.1%} while top --interval "
          f"{interval:g} subscribes ({served - alone:+.1%} to serve its snapshots); top itself "
          f"{statistics.median(sample[0] for sample in watched):6.1%}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="Model to serve (default: the shipped one).")
    parser.add_argument("--intervals", type=float, nargs="+", default=[1.0, 0.25])
    parser.add_argument("--window", type=float, default=20.0, help="Seconds per measurement.")
    parser.add_argument("--warmup", type=float, default=5.0, help="Seconds before measuring.")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clients", type=int, default=4, help="Concurrent streaming clients.")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--size", default="120x40", help="Terminal COLUMNSxROWS.")
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="Run top under cProfile under load and write DIR/top_<interval>s.prof "
        "(its CPU figures then include the profiler's overhead).",
    )
    parser.add_argument("--skip-idle", action="store_true", help="Skip the idle-daemon part.")
    args = parser.parse_args()
    columns, rows = (int(part) for part in args.size.split("x"))

    with tempfile.TemporaryDirectory(prefix="llmd-top-bench-") as directory:
        address = f"ipc://{directory}/d.sock"
        daemon = start_daemon(address, args.model, Path(directory) / "daemon.log")
        try:
            if not args.skip_idle:
                idle_cost(address, daemon.pid, min(args.intervals), args, columns, rows)
            with Load(address, args.clients, args.max_tokens) as load:
                time.sleep(args.warmup)
                baseline = [measure([daemon.pid], args.window)[0] for _ in range(args.repeats)]
                print(f"load: {args.clients} streaming clients, {args.max_tokens} tokens each; "
                      f"top in a {columns}x{rows} terminal; {args.repeats} x {args.window:g}s "
                      "windows, medians")  # fmt: skip
                print(f"daemon without top:      {statistics.median(baseline):6.1%} of a core")
                for interval in args.intervals:
                    profile = None
                    if args.profile is not None:
                        args.profile.mkdir(parents=True, exist_ok=True)
                        profile = args.profile / f"top_{interval:g}s.prof"
                    top = TopInTerminal(address, interval, columns, rows, profile)
                    try:
                        time.sleep(args.warmup)
                        if top.process.poll() is not None:
                            raise RuntimeError(f"llmd top exited with {top.process.returncode}")
                        samples = [
                            measure([top.process.pid, daemon.pid], args.window)
                            for _ in range(args.repeats)
                        ]
                    finally:
                        top.close()
                    top_share = statistics.median(s[0] for s in samples)
                    daemon_share = statistics.median(s[1] for s in samples)
                    print(f"top --interval {interval:<5g}   {top_share:6.1%} of a core; daemon "
                          f"{daemon_share:6.1%} ({daemon_share - statistics.median(baseline):+.1%}"
                          " for serving top)")  # fmt: skip
                print(f"requests finished during the run: {load.num_requests}")
        finally:
            daemon.terminate()
            try:
                daemon.wait(30)
            except subprocess.TimeoutExpired:
                daemon.kill()


if __name__ == "__main__":
    main()
