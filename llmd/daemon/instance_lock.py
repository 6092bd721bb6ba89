"""One daemon per address: an flock'ed lock file, a pid file, and clean-up of leftovers.

The kernel drops an flock when its process dies, even by kill -9, so a held lock always
means a live daemon and a free one means any socket or pid file left behind is stale and
can be removed: a restart after a crash works the first time.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from llmd.errors import LLMDError
from llmd.protocol.address import Address, ensure_private_dir, runtime_dir


class DaemonAlreadyRunningError(LLMDError):
    """Another daemon holds this address's lock."""

    code = "already_running"


class InstanceLock:
    """The lock, pid file and (for ipc) socket file of one address."""

    def __init__(self, address: Address, directory: Path | None = None) -> None:
        self.address = address
        self.directory = directory or runtime_dir()
        base = str(self.directory / address.instance_name)
        self.lock_path = Path(base + ".lock")
        self.pid_path = Path(base + ".pid")
        self.socket_path = Path(address.path) if address.scheme == "ipc" else None
        self._fd: int | None = None

    def read_pid(self) -> int | None:
        """The pid recorded by the daemon that holds (or held) this address."""
        try:
            return int(self.pid_path.read_text().strip())
        except (OSError, ValueError):
            return None

    def is_held(self) -> bool:
        """True while some process holds the lock (a daemon is running)."""
        try:
            fd = os.open(self.lock_path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # closing releases a shared lock we may have taken
        return False

    def acquire(self) -> None:
        """Take the lock or raise DaemonAlreadyRunningError; then clear stale leftovers."""
        ensure_private_dir(self.directory)
        for _ in range(5):
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                pid = self.read_pid()
                running = f"pid {pid}" if pid is not None else "pid unknown"
                raise DaemonAlreadyRunningError(
                    f"an llmd daemon is already running at {self.address} ({running})", "address"
                ) from None
            if self._is_current_file(fd):
                break
            os.close(fd)  # a stopping daemon removed the file we locked; lock the new one
        else:
            raise DaemonAlreadyRunningError(f"could not lock {self.lock_path}", "address")
        self._fd = fd
        self._remove_leftovers()
        self._write_pid()

    def release(self) -> None:
        """Remove the socket, pid and lock files, then drop the lock."""
        if self._fd is None:
            return
        for path in (self.socket_path, self.pid_path, self.lock_path):
            if path is not None:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        os.close(self._fd)
        self._fd = None

    def _is_current_file(self, fd: int) -> bool:
        try:
            return os.fstat(fd).st_ino == os.stat(self.lock_path).st_ino
        except FileNotFoundError:
            return False

    def _remove_leftovers(self) -> None:
        """A socket file without a lock holder belongs to a dead daemon."""
        if self.socket_path is not None and os.path.lexists(self.socket_path):
            self.socket_path.unlink()

    def _write_pid(self) -> None:
        temporary = self.pid_path.with_name(self.pid_path.name + ".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as file:
            file.write(f"{os.getpid()}\n")
        os.replace(temporary, self.pid_path)
