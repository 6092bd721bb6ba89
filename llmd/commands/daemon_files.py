"""What the runtime directory says about a daemon: its pid file, its lock, its log file.

`llmd status` and `llmd logs` read these without a round trip, so a daemon killed with
-9 (its pid file left behind, its lock released by the kernel) is reported at once.
"""

from __future__ import annotations

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
    def has_crashed(self) -> bool:
        """A pid file is left and nobody holds the lock: the daemon died without cleaning up.

        The lock alone decides: the kernel drops it when its process dies, and a stopping
        daemon removes its pid file before releasing it. Whether the recorded pid still
        names a process says nothing (an unreaped zombie, or the pid reused).
        """
        return self.pid is not None and not self.is_lock_held

    def log_path(self, reported: str | None = None) -> Path | None:
        """The daemon's log: the path it reported, else the default one if it exists."""
        if reported:
            return Path(reported)
        return self.default_log_path if self.default_log_path.exists() else None


def read_daemon_files(address: Address) -> DaemonFiles:
    """The pid, lock state and default log path of the daemon at `address`."""
    from llmd.daemon.instance_lock import InstanceLock

    lock = InstanceLock(address)
    return DaemonFiles(
        pid=lock.read_pid(),
        is_lock_held=lock.is_held(),
        default_log_path=runtime_dir() / f"{address.instance_name}.log",
    )


def raise_if_crashed(address: str) -> None:
    """Raise DaemonNotRunningError at once when the daemon at `address` died (kill -9).

    Without this a client would wait its whole timeout on a socket file nobody serves.
    """
    from llmd.client import DaemonNotRunningError
    from llmd.protocol import default_address, parse_address

    files = read_daemon_files(parse_address(address))
    if not files.has_crashed:
        return
    log = files.log_path()
    where = f"log: {log}" if log else "its log is where `llmd serve` wrote it"
    command = "llmd serve" if address == default_address() else f"llmd serve --address {address}"
    raise DaemonNotRunningError(
        f"the llmd daemon at {address} crashed (pid {files.pid} is gone); {where}; "
        f"restart it with: {command}",
        "address",
    )
