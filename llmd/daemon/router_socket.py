"""The daemon's ROUTER socket: its options, llmd's own listening socket, the connection gate.

Binding is where the descriptor budget is set (the soft limit raised, the connection cap
chosen) and where libzmq is handed the listening socket llmd created (`Listener`), so
that accepting can be paused before descriptors run out.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

import zmq

from llmd.daemon.connection_gate import (
    ConnectionGate,
    default_max_connections,
    num_open_descriptors,
    raise_descriptor_limit,
)
from llmd.daemon.listener import Listener
from llmd.daemon.serve_options import ServeOptions
from llmd.errors import InvalidParameterError
from llmd.protocol import Address

logger = logging.getLogger(__name__)

SEND_HIGH_WATER_MARK = 100_000
"""Messages queued per peer before a send fails and the peer is treated as gone (ZeroMQ
counts a multipart message once, however many of its up to 256 replies it carries)."""
HEARTBEAT_IVL_MS = 2_000
HEARTBEAT_TIMEOUT_MS = 6_000
"""ZMTP heartbeats drop a connection whose peer machine stopped answering."""
LINGER_MS = 2_000


@dataclass(frozen=True)
class BoundRouter:
    """A bound ROUTER with the listening socket it accepts on and the gate watching it."""

    socket: zmq.Socket[bytes]
    listener: Listener
    gate: ConnectionGate


def bind_router(
    context: zmq.Context[zmq.Socket[bytes]],
    options: ServeOptions,
    address: Address,
    on_connection_closed: Callable[[], None],
) -> BoundRouter:
    """Create the ROUTER, bind it on llmd's own listening socket; typed error naming address."""
    socket = context.socket(zmq.ROUTER)
    socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
    # zmq drops larger messages (and that peer's connection) before they reach us; up to
    # this size a message is read and refused with a typed error.
    socket.setsockopt(zmq.MAXMSGSIZE, 2 * options.max_message_bytes)
    socket.setsockopt(zmq.SNDHWM, SEND_HIGH_WATER_MARK)
    socket.setsockopt(zmq.LINGER, LINGER_MS)
    socket.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
    socket.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
    descriptor_limit = raise_descriptor_limit()
    max_connections = options.max_connections or default_max_connections(
        descriptor_limit, num_open_descriptors()
    )
    try:
        listener = Listener(address)
    except InvalidParameterError:
        socket.close(linger=0)
        raise
    gate = ConnectionGate(socket, listener, max_connections, on_connection_closed)
    socket.setsockopt(zmq.USE_FD, listener.fd)
    try:
        socket.bind(str(address))
    except zmq.ZMQError as error:
        gate.close()
        socket.close(linger=0)
        listener.close()
        raise InvalidParameterError(f"cannot listen on {address}: {error}", "address") from None
    listener.hand_over()
    logger.info(
        "descriptor limit %d: accepting at most %d connections", descriptor_limit, max_connections
    )
    return BoundRouter(socket, listener, gate)


def close_router(
    router: BoundRouter | None, context: zmq.Context[zmq.Socket[bytes]], address: Address
) -> None:
    """Close what `bind_router` made (if it ran) and the context, in the order libzmq needs;
    an ipc socket file is removed, so clients fail fast instead of timing out."""
    if router is not None:
        router.gate.close()  # resumes accepting: libzmq must close the real socket
        router.socket.close(linger=LINGER_MS)
    context.term()
    if router is not None:
        router.listener.close()
    if address.scheme == "ipc":
        with contextlib.suppress(FileNotFoundError):
            os.unlink(address.path)
