"""The daemon's descriptor budget: a raised soft limit, and a cap on client connections.

Every client connection costs the daemon one file descriptor, and libzmq aborts the whole
process when accepting an ipc connection fails for lack of one. So the soft limit is
raised to the hard limit at start, and connections beyond a cap (by default half of the
descriptors still free) are shut down as soon as the ROUTER's monitor reports them, with
a log line, long before the process could run out.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import socket
import time

import zmq
from zmq.utils.monitor import recv_monitor_message

from llmd.protocol.address import Address

logger = logging.getLogger(__name__)

MAX_DESCRIPTORS = 1 << 20
"""Soft limit used when the hard limit is unlimited."""
MIN_CONNECTIONS = 16
REFUSAL_LOG_INTERVAL_S = 10.0
"""Refusals are logged at most this often (with a count), so a flood cannot fill the log."""


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
    """Watches the ROUTER's new connections and sheds those beyond the cap.

    Connections are counted from the monitor's events (its pipe has no high-water mark,
    so none is lost); a connection is refused only when the descriptors opened since
    start (read from /proc, only then) confirm the count, so a count that drifted could
    never lock clients out.
    """

    def __init__(self, router: zmq.Socket, address: Address, max_connections: int) -> None:
        self.address = address
        self.max_connections = max_connections
        self.num_refused = 0
        self.num_connections = 0
        """Accepted and not yet disconnected, from the monitor's events."""
        self._baseline = num_open_descriptors()
        endpoint = f"inproc://llmd-monitor-{id(self):x}"
        router.monitor(endpoint, zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
        self.monitor = router.context.socket(zmq.PAIR)
        self.monitor.setsockopt(zmq.RCVHWM, 0)  # inproc: no limit on the pipe, no lost events
        self.monitor.connect(endpoint)
        self._last_log = 0.0
        self._num_unlogged = 0

    def num_descriptors_opened(self) -> int:
        """Descriptors opened since start: the open connections (plus a few files)."""
        return max(0, num_open_descriptors() - self._baseline)

    def on_events(self) -> bool:
        """Handle queued monitor events; True when some connection closed."""
        has_disconnect = False
        while True:
            try:
                event = recv_monitor_message(self.monitor, zmq.NOBLOCK)
            except zmq.Again:
                return has_disconnect
            if event["event"] == zmq.EVENT_ACCEPTED:
                self.num_connections += 1
                is_over = self.num_connections > self.max_connections
                if is_over and self.num_descriptors_opened() > self.max_connections:
                    self._refuse(event["value"])
            elif event["event"] == zmq.EVENT_DISCONNECTED:
                self.num_connections = max(0, self.num_connections - 1)
                has_disconnect = True

    def close(self) -> None:
        """Close the monitor socket."""
        self.monitor.close(linger=0)

    def _refuse(self, fd: int) -> None:
        """Shut the connection down; libzmq then sees it end and closes the descriptor."""
        with contextlib.suppress(OSError):
            connection = socket.socket(fileno=fd)
            try:
                if self._is_ours(connection.getsockname()):  # not a descriptor reused since
                    connection.shutdown(socket.SHUT_RDWR)
                    self.num_refused += 1
                    self._log_refusal()
            finally:
                connection.detach()  # the descriptor stays libzmq's to close

    def _is_ours(self, local_address: object) -> bool:
        if self.address.scheme == "ipc":
            return local_address == self.address.path
        return isinstance(local_address, tuple) and local_address[1] == self.address.port

    def _log_refusal(self) -> None:
        self._num_unlogged += 1
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
