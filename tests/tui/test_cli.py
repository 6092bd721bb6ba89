"""`llmd chat` in a terminal with no daemon: a clear message and the command that fixes it."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

from tests.tui.daemon_process import REPO_ROOT, subprocess_env


def test_interactive_chat_without_a_daemon_says_how_to_start_one(tmp_path):
    address = f"ipc://{tmp_path / 'nobody.sock'}"
    leader, follower = pty.openpty()  # a terminal, so chat does not fall back to one-shot
    try:
        process = subprocess.run(
            [sys.executable, "-m", "llmd.cli", "chat", "--address", address],
            stdin=follower,
            stdout=follower,
            stderr=subprocess.PIPE,
            env=subprocess_env(),
            cwd=REPO_ROOT,
            timeout=60,
        )
    finally:
        os.close(follower)
        os.close(leader)
    assert process.returncode == 1
    message = process.stderr.decode()
    assert message.startswith(f"Error: no llmd daemon is answering at {address}")
    assert f"start one with: llmd serve --address {address}" in message


def test_invalid_chat_flags_are_typed_errors():
    process = subprocess.run(
        [sys.executable, "-m", "llmd.cli", "chat", "--top-p", "2", "-p", "hi"],
        env=subprocess_env(),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert process.returncode == 1
    assert "Error: --top-p: must be in (0, 1], got 2.0" in process.stderr
