"""`llmd serve --detach`: start the daemon in its own session and wait until it is healthy.

The child is a fresh interpreter given the validated options as JSON; the parent returns
only once the daemon answers a health check, or prints the end of the child's log.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import llmd
from llmd.daemon.instance_lock import DaemonAlreadyRunningError, InstanceLock
from llmd.daemon.listen_check import check_can_listen
from llmd.daemon.serve_options import ServeOptions
from llmd.errors import LLMDError
from llmd.protocol.address import Address, ensure_private_dir, runtime_dir

POLL_INTERVAL_S = 0.2
NUM_LOG_LINES = 30


class DaemonStartError(LLMDError):
    """A detached daemon exited (or never became healthy) while starting."""

    code = "daemon_start_failed"


def start_detached(options: ServeOptions, address: Address) -> tuple[int, Path]:
    """Spawn the daemon; return (pid, log path) once it is healthy."""
    lock = InstanceLock(address)
    if lock.is_held():
        raise DaemonAlreadyRunningError(
            f"an llmd daemon is already running at {address} (pid {lock.read_pid()})", "address"
        )
    directory = ensure_private_dir(runtime_dir())  # also holds the default socket
    check_can_listen(address)
    log_path = Path(options.log_file or directory / f"{address.instance_name}.log")
    child_options = dataclasses.replace(
        options, detach=False, address=str(address), log_file=str(log_path)
    )
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    log_offset = os.lseek(log_fd, 0, os.SEEK_END)
    env = dict(os.environ)
    package_root = str(Path(llmd.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    if options.api_key is not None:
        env["LLMD_API_KEY"] = options.api_key  # ServeOptions.to_json leaves it out
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "llmd.daemon", "--options-json", child_options.to_json()],
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=log_fd,
            start_new_session=True,
            env=env,
        )
    finally:
        os.close(log_fd)
    _wait_until_healthy(process, address, log_path, log_offset, options.ready_timeout_s)
    return process.pid, log_path


def _wait_until_healthy(
    process: subprocess.Popen[bytes],
    address: Address,
    log_path: Path,
    offset: int,
    timeout_s: float,
) -> None:
    from llmd.client import Client, DaemonNotRunningError

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        exit_code = process.poll()
        if exit_code is not None:
            raise DaemonStartError(
                f"the daemon exited with code {exit_code} while starting; "
                f"end of {log_path}:\n{_log_tail(log_path, offset)}"
            )
        try:
            with Client(str(address), timeout=1.0) as client:
                if client.health()["is_healthy"]:
                    return
        except DaemonNotRunningError:
            pass
        time.sleep(POLL_INTERVAL_S)
    raise DaemonStartError(
        f"the daemon (pid {process.pid}) was not healthy after {timeout_s:.0f}s; "
        f"see {log_path}:\n{_log_tail(log_path, offset)}"
    )


def _log_tail(log_path: Path, offset: int) -> str:
    try:
        with open(log_path, "rb") as file:
            file.seek(offset)
            text = file.read().decode(errors="replace")
    except OSError as error:
        return f"(cannot read the log: {error})"
    return "\n".join(text.splitlines()[-NUM_LOG_LINES:])
