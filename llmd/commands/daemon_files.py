"""What the runtime directory says about a daemon: its pid file, its lock, its log file.

`llmd status` and `llmd logs` read these without a round trip, so a daemon killed with
-9 (its pid file left behind, its lock released by the kernel) is reported at once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from llmd.protocol.address import Address, runtime_dir


@dataclass(frozen=True)
class DaemonFiles:
    """The leftovers of the daemon at one address, read from the runtime directory."""

    pid: int | None
    """The pid the daemon recorded, if its pid file exists."""
    is_lock_held: bool
    default_log_path: Path
    """Where a detached daemon logs unless --log-file said otherwise."""

    @property
    def is_pid_alive(self) -> bool:
        """True when the recorded pid names a running process."""
        return self.pid is not None and pid_is_alive(self.pid)

    @property
    def has_crashed(self) -> bool:
        """A pid file names a dead process and nobody holds the lock: the daemon died."""
        return self.pid is not None and not self.is_lock_held and not self.is_pid_alive

    def log_path(self, reported: str | None = None) -> Path | None:
        """The daemon's log: the path it reported, else the default one if it exists."""
        if reported:
            return Path(reported)
        return self.default_log_path if self.default_log_path.exists() else None


def pid_is_alive(pid: int) -> bool:
    """True when a process with this pid exists (ours or not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_daemon_files(address: Address) -> DaemonFiles:
    """The pid, lock state and default log path of the daemon at `address`."""
    from llmd.daemon.instance_lock import InstanceLock

    lock = InstanceLock(address)
    return DaemonFiles(
        pid=lock.read_pid(),
        is_lock_held=lock.is_held(),
        default_log_path=runtime_dir() / f"{address.instance_name}.log",
    )
