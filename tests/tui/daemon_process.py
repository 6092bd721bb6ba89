"""Running llmd commands in subprocesses: the environment, and waiting for a healthy daemon.

Shared by the real-daemon fixture and the tests that start `llmd chat` and `llmd top` as a
user would, so every subprocess sees the repository and one torch thread.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from llmd.client import Client, DaemonNotRunningError
from tests import scheduling_mode

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 120.0
SCHEDULING_FLAGS = scheduling_mode.serve_flags()
"""This run's scheduling mode, on every `llmd serve` the TUI tests start (tests.scheduling_mode)."""


def subprocess_env() -> dict[str, str]:
    """Environment for daemon and CLI subprocesses: the repo on the path, one torch thread."""
    env = dict(os.environ)
    env.pop("LLMD_ADDRESS", None)
    env.pop("LLMD_API_KEY", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env["OMP_NUM_THREADS"] = "1"
    env["TOKENIZERS_PARALLELISM"] = "false"
    return env


def wait_until_healthy(address: str, process: subprocess.Popen, log_path: Path) -> None:
    """Poll health until the daemon answers (failing at once if the process exits)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"daemon exited with {process.returncode}:\n{log_path.read_text()}")
        try:
            with Client(address, timeout=1.0) as client:
                if client.health()["is_healthy"]:
                    return
        except DaemonNotRunningError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"no healthy daemon at {address}:\n{log_path.read_text()}")
