"""A real daemon on the tiny checkpoint for the TUI tests that talk to one.

One daemon per test session (start-up loads torch and the model, about 10 s on two cores): a
foreground `python -m llmd.cli serve` on a private ipc address, stopped with SIGTERM.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.tui.daemon_process import (
    REPO_ROOT,
    SCHEDULING_FLAGS,
    subprocess_env,
    wait_until_healthy,
)


@pytest.fixture(scope="session")
def daemon_process(tiny_model_dir, tmp_path_factory):
    """A running `llmd serve` on the tiny model (64 blocks, 256 tokens) and its address.

    Yields `(address, process)`: a test may pause the process (SIGSTOP) to order its own
    messages before the daemon's next step, and must resume it before it returns."""
    runtime = tmp_path_factory.mktemp("tui-daemon")
    address = f"ipc://{runtime / 's.sock'}"
    log_path = runtime / "daemon.log"
    command = [
        sys.executable, "-m", "llmd.cli", "serve", "--model", str(tiny_model_dir),
        "--address", address, "--num-blocks", "64", "--max-model-len", "256", "--no-http",
        *SCHEDULING_FLAGS,
    ]  # fmt: skip
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command, env=subprocess_env(), cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=log
        )
    try:
        wait_until_healthy(address, process, log_path)
        yield address, process
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def daemon_address(daemon_process):
    """The address of the session's daemon."""
    return daemon_process[0]
