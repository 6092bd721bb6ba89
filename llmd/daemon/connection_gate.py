"""The daemon's descriptor budget: a raised soft limit, and a cap on client connections.

Every client connection costs the daemon one file descriptor, and libzmq aborts the whole
process when accepting an ipc connection fails for lack of one. So the soft limit is
raised to the hard limit at start (the hard limit is never raised), and a thread of its
own counts connections from the ROUTER's monitor: at the cap (by default half of the
descriptors still free) it pauses libzmq's accepts (`Listener.pause`) and refuses what
arrives, with a log line; connections accepted past the cap in the meantime are shut down.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import socket
import struct
import threading
import time
from collections.abc import Callable

import zmq

from llmd.daemon.listener import Listener
from llmd.daemon.thread_names import name_os_thread
from llmd.protocol.address import Address

logger = logging.getLogger(__name__)

MAX_DESCRIPTORS = 1 << 20
"""Soft limit used when the hard limit is unlimited."""
MIN_CONNECTIONS = 16
REFUSAL_LOG_INTERVAL_S = 10.0
"""Refusals are logged at most this often (with a count), so a flood cannot fill the log."""
RESUME_FRACTION = 15 / 16
"""Accepting resumes once connections fall below this share of the cap (no flapping)."""


def raise_descriptor_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit; return the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = MAX_DESCRIPTORS if hard == resource.RLIM_INFINITY else hard
    if soft == resource.RLIM_INFINITY or soft >= target:
        return MAX_DESCRIPTORS if soft == resource.RLIM_INFINITY else soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as error:
        logger.warning("cannot raise the descriptor limit from %d to %d: %s", soft, target, error)
        return soft
    return target


def num_open_descriptors() -> int:
    """Descriptors this process has open now."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 64  # no procfs: a typical count for a loaded engine


def default_max_connections(descriptor_limit: int, num_open: int) -> int:
    """Half the descriptors still free: the other half absorbs a burst before it is shed."""
    return max(MIN_CONNECTIONS, (descriptor_limit - num_open) // 2)


class ConnectionGate:
    """Keeps the ROUTER's connections under the cap, from a thread of its own.

    Connections are counted from the monitor's events (its pipe has no high-water mark,
    so none is lost). Its own thread reacts to a burst within one wake-up, where the I/O
    thread could be busy for a whole batch of messages; a connection accepted past the
    cap is shut down only when the descriptors opened since start (read from /proc, only
    then) confirm the count, so a count that drifted could never lock clients out.
    """

    def __init__(
        self,
        router: zmq.Socket[bytes],
        listener: Listener,
        max_connections: int,
        on_disconnect: Callable[[], None],
    ) -> None:
        self.listener = listener
        self.address: Address = listener.address
        self.max_connections = max_connections
        self.num_refused = 0
        self.num_connections = 0
        """Accepted and not yet disconnected, from the monitor's events."""
        self._on_disconnect = on_disconnect
        self._resume_below = max(1, int(max_connections * RESUME_FRACTION))
        """Accepting resumes (after a refusal) only below this many connections."""
        self._is_at_cap = False
        self._baseline = num_open_descriptors()
        endpoint = f"inproc://llmd-monitor-{id(self):x}"
        router.monitor(endpoint, zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
        self._monitor = router.context.socket(zmq.PAIR)
        self._monitor.setsockopt(zmq.RCVHWM, 0)  # inproc: no limit on the pipe, no lost events
        self._monitor.connect(endpoint)
        self._stop_read_fd, self._stop_write_fd = os.pipe()
        self._thread = threading.Thread(target=self._run, name="llmd-gate", daemon=True)
        self._last_log = 0.0
        self._num_unlogged = 0

    def start(self) -> None:
        """Start the gate's thread."""
        self._thread.start()

    def close(self) -> None:
        """Stop the thread and resume accepting; call before the ROUTER is closed."""
        if self._thread.is_alive():
            os.write(self._stop_write_fd, b"\0")
            self._thread.join()
        self.listener.resume()  # libzmq's own descriptor must be the real socket at close
        self._monitor.close(linger=0)
        for fd in (self._stop_read_fd, self._stop_write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)

    def num_descriptors_opened(self) -> int:
        """Descriptors opened since start: the open connections (plus a few files)."""
        return max(0, num_open_descriptors() - self._baseline)

    def _run(self) -> None:
        name_os_thread("llmd-gate")
        poller = zmq.Poller()
        poller.register(self._monitor, zmq.POLLIN)
        poller.register(self._stop_read_fd, zmq.POLLIN)
        is_watching_listener = False
        while True:
            if self.listener.is_paused != is_watching_listener:
                is_watching_listener = self.listener.is_paused
                if is_watching_listener:
                    poller.register(self.listener.real_fd, zmq.POLLIN)
                else:
                    poller.unregister(self.listener.real_fd)
            events = dict(poller.poll())  # no timeout: every change comes as an event
            if self._stop_read_fd in events:
                return
            if self._monitor in events:
                # libzmq accepts faster than events can be read here: accepting pauses
                # while they are counted, so a burst cannot outrun the count.
                self.listener.pause()
                self._on_monitor_events()
            if self.num_connections >= self.max_connections:
                self._is_at_cap = True
            elif self.num_connections < self._resume_below:
                self._is_at_cap = False
            if self._is_at_cap:
                self._count_refusals(self.listener.refuse_waiting())
            else:
                self.listener.resume()

    def _on_monitor_events(self) -> None:
        while True:
            try:
                frames = self._monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            event_id, value = struct.unpack("=HI", frames[0][:6])
            if event_id == zmq.EVENT_ACCEPTED:
                self.num_connections += 1
                is_over = self.num_connections > self.max_connections
                if is_over and self.num_descriptors_opened() > self.max_connections:
                    self._shut_down(value)
            elif event_id == zmq.EVENT_DISCONNECTED:
                self.num_connections = max(0, self.num_connections - 1)
                self._on_disconnect()

    def _shut_down(self, fd: int) -> None:
        """Shut an accepted connection down; libzmq then sees it end and closes the descriptor."""
        with contextlib.suppress(OSError):
            connection = socket.socket(fileno=fd)
            try:
                if self._is_ours(connection.getsockname()):  # not a descriptor reused since
                    connection.shutdown(socket.SHUT_RDWR)
                    self._count_refusals(1)
            finally:
                connection.detach()  # the descriptor stays libzmq's to close

    def _is_ours(self, local_address: object) -> bool:
        if self.address.scheme == "ipc":
            return local_address == self.address.path
        return isinstance(local_address, tuple) and local_address[1] == self.address.port

    def _count_refusals(self, num_refused: int) -> None:
        if num_refused == 0:
            return
        self.num_refused += num_refused
        self._num_unlogged += num_refused
        now = time.monotonic()
        if now - self._last_log >= REFUSAL_LOG_INTERVAL_S:
            logger.warning(
                "refused %d connection(s): about %d are open and the limit is %d "
                "(--max-connections)",
                self._num_unlogged,
                self.num_connections,
                self.max_connections,
            )
            self._last_log = now
            self._num_unlogged = 0
