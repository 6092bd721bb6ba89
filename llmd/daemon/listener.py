"""The daemon's listening socket: created by llmd, lent to libzmq, and pausable.

libzmq aborts the whole process when accepting an ipc connection fails for lack of a
descriptor (4.3.5 asserts on EMFILE in its ipc listener), and a burst of connections is
accepted faster than any monitor can shed them. So llmd creates the listening socket
itself and hands libzmq its descriptor (ZMQ_USE_FD); to stop libzmq accepting, that
descriptor number is pointed (dup2) at a spare listening socket nobody connects to, while
a duplicate keeps the real one alive. Connections that arrive meanwhile are accepted and
closed here, where running out of descriptors is an error, not an abort. Pausing and
resuming open no descriptors, so they work when none are left.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket

from llmd.errors import InvalidParameterError
from llmd.protocol.address import Address

BACKLOG = 16
"""Connections the kernel queues before libzmq (or the refusal) accepts them. Small on
purpose: libzmq accepts everything queued in one loop, before the gate's thread can pause
it, so the backlog bounds a burst's overshoot past the cap (128 let a 400-connection
flood reach a hard limit of 256 in a loaded CI run); a client finding it full retries
(libzmq reconnects after 100 ms)."""


class Listener:
    """A listening socket whose descriptor libzmq accepts on until paused."""

    def __init__(self, address: Address) -> None:
        self.address = address
        self.is_paused = False
        self.is_lent = False
        """True once libzmq took the descriptor: from then on libzmq closes it."""
        self._socket = _listening_socket(address)
        self.fd = self._socket.fileno()
        """The descriptor number libzmq polls and accepts on (ZMQ_USE_FD)."""
        self._real_fd = os.dup(self.fd)
        """A second reference to the real listening socket, which keeps it open while paused."""
        self._idle = _idle_listening_socket()
        self._reserve_fd: int | None = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        """Released to accept (and close) one connection when no descriptor is left."""

    def hand_over(self) -> None:
        """libzmq bound its socket on `fd` (ZMQ_USE_FD): it owns and closes it from now on."""
        self.is_lent = True

    @property
    def real_fd(self) -> int:
        """A descriptor of the real listening socket: readable when a connection waits."""
        return self._real_fd

    def pause(self) -> None:
        """Make libzmq's accepts find nothing (they fail with EAGAIN, which it tolerates)."""
        if not self.is_paused:
            os.dup2(self._idle.fileno(), self.fd, inheritable=False)
            self.is_paused = True

    def resume(self) -> None:
        """Point libzmq's descriptor back at the real listening socket."""
        if self.is_paused:
            os.dup2(self._real_fd, self.fd, inheritable=False)
            self.is_paused = False

    def refuse_waiting(self) -> int:
        """Accept and close every connection waiting on the real socket; return how many."""
        num_refused = 0
        while True:
            try:
                connection_fd = _accept_fd(self._real_fd)
            except BlockingIOError:
                return num_refused
            except OSError as error:
                if error.errno not in (errno.EMFILE, errno.ENFILE) or not self._refuse_one():
                    return num_refused
                num_refused += 1
                continue
            os.close(connection_fd)
            num_refused += 1

    def close(self) -> None:
        """Close llmd's references; call after libzmq closed its socket (resumed before)."""
        for fd in (self._real_fd, self._reserve_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._reserve_fd = None
        self._idle.close()
        if self.is_lent:
            self._socket.detach()  # libzmq closed self.fd with its socket
        else:
            self._socket.close()

    def _refuse_one(self) -> bool:
        """With no descriptor left: free the reserve, accept and close one, take it back."""
        if self._reserve_fd is None:
            return False
        os.close(self._reserve_fd)
        self._reserve_fd = None
        try:
            os.close(_accept_fd(self._real_fd))
            return True
        except OSError:
            return False
        finally:
            with contextlib.suppress(OSError):
                self._reserve_fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)


def _accept_fd(listening_fd: int) -> int:
    """accept(2) on a raw descriptor without wrapping it in a socket object."""
    listening = socket.socket(fileno=listening_fd)
    try:
        connection, _ = listening.accept()
    finally:
        listening.detach()
    return connection.detach()


def _listening_socket(address: Address) -> socket.socket:
    """A non-blocking listening socket on `address` (an ipc file is made mode 0600)."""
    if address.scheme == "ipc":
        listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(address.path)  # a stale file; the instance lock says nobody serves it
        old_umask = os.umask(0o177)  # the file is created 0600, never wider
        try:
            listening.bind(address.path)
        except OSError as error:
            listening.close()
            raise InvalidParameterError(f"cannot listen on {address}: {error}", "address") from None
        finally:
            os.umask(old_umask)
        os.chmod(address.path, 0o600)
    else:
        listening = _tcp_socket(address)
    listening.listen(BACKLOG)
    listening.setblocking(False)
    return listening


def _tcp_socket(address: Address) -> socket.socket:
    host = None if address.host in ("*", "") else address.host
    try:
        family, kind, proto, _, socket_address = socket.getaddrinfo(
            host, address.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as error:
        message = f"cannot listen on {address}: {address.host!r} does not resolve ({error})"
        raise InvalidParameterError(message, "address") from None
    listening = socket.socket(family, kind, proto)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listening.bind(socket_address)
    except OSError as error:
        listening.close()
        raise InvalidParameterError(f"cannot listen on {address}: {error}", "address") from None
    return listening


def _idle_listening_socket() -> socket.socket:
    """A listening socket bound to nothing anyone knows: accept on it always finds nothing."""
    idle = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    idle.bind("")  # Linux autobind: an abstract name nobody is told
    idle.listen(1)
    idle.setblocking(False)
    return idle
