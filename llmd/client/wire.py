"""Pieces both clients share: socket set-up, request encoding and size, liveness.

A client waits on a daemon that may have died; any message resets a silence clock, a
health probe goes out after half the timeout (at most 2 s) of silence, and a full timeout of silence
means the daemon is gone, however long a legitimate generation takes.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
import uuid
from collections.abc import Mapping
from typing import TypeVar

import zmq

from llmd.client.errors import daemon_not_running
from llmd.errors import InvalidParameterError
from llmd.protocol import (
    DuplicateRequestIdError,
    ErrorReply,
    GenerateRequest,
    WireMessage,
    encode,
    pack,
    parse_address,
)

LINGER_MS = 500
"""How long closing waits to deliver queued aborts."""
MAX_REPLY_BYTES = 256 * 1024 * 1024
TCP_PROBE_TIMEOUT_S = 0.5
"""How long the connect-time probe of a tcp address may take before ZeroMQ is left to it."""
SocketT = TypeVar("SocketT", bound="zmq.Socket[object]")
"""A sync or an asyncio socket: `make_socket` returns the kind its context makes."""


def make_socket(context: zmq.Context[SocketT], address: str) -> SocketT:
    """A DEALER connected to `address`; fails fast when nothing is there to connect to.

    That is an ipc socket file that does not exist, or a tcp port that refuses connections
    (ZeroMQ itself would retry silently until the client's timeout).
    """
    parsed = parse_address(address)
    if parsed.scheme == "ipc" and not os.path.exists(parsed.path):
        raise daemon_not_running(address, "its socket file does not exist")
    if parsed.scheme == "tcp":
        _probe_tcp(address, parsed.host, parsed.port)
    dealer = context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, LINGER_MS)
    # No ZMQ_IMMEDIATE: with it, a disconnect discards replies not yet read (a draining
    # daemon's last messages); a daemon that never answers is caught by the liveness check,
    # and a generate queued here while no daemon was up carries `expires_at`, so a daemon
    # that starts after its client gave up refuses it instead of running it.
    dealer.setsockopt(zmq.MAXMSGSIZE, MAX_REPLY_BYTES)
    dealer.connect(address)
    return dealer


def _probe_tcp(address: str, host: str, port: int) -> None:
    """Raise DaemonNotRunningError when `host:port` refuses a TCP connection.

    Any other failure (a slow or filtered host) is left to the client's own timeout.
    """
    try:
        with socket.create_connection((host, port), timeout=TCP_PROBE_TIMEOUT_S):
            pass
    except ConnectionRefusedError:
        raise daemon_not_running(address, f"nothing listens on {host}:{port}") from None
    except OSError:
        return


def new_id_prefix() -> str:
    """A short random prefix that keeps one client's request ids apart from another's."""
    return uuid.uuid4().hex[:8]


def encode_request(message: WireMessage) -> bytes:
    """msgpack bytes of a request; values msgpack cannot carry raise a typed error."""
    try:
        return encode(message)
    except (OverflowError, UnicodeEncodeError, ValueError) as error:
        # msgpack has no integers beyond 64 bits and UTF-8 has no lone surrogates.
        field = unencodable_field(message.to_wire())
        raise InvalidParameterError(f"cannot be sent ({error})", field) from None


def check_size(payload: bytes, max_bytes: int) -> None:
    """Refuse locally a request larger than the daemon accepts (it would answer no more)."""
    if len(payload) > max_bytes:
        raise InvalidParameterError(
            f"the request is {len(payload)} bytes; the daemon accepts at most {max_bytes} "
            "(its --max-message-bytes)",
            "prompt",
        )


def with_expiry(request: GenerateRequest, timeout: float) -> GenerateRequest:
    """The request stamped to expire when its sender gives up waiting for the daemon."""
    return dataclasses.replace(request, expires_at=time.time() + timeout)


def unencodable_field(data: Mapping[str, object]) -> str | None:
    """The field (or sampling parameter) of a message map that msgpack cannot encode."""
    for name, value in data.items():
        try:
            pack({name: value})
        except (OverflowError, UnicodeEncodeError, ValueError):
            if isinstance(value, dict):
                return unencodable_field(value) or name
            return name
    return None


def is_duplicate_refusal(message: object) -> bool:
    """An error refusing a generate that reused an id in flight: not about the live request.

    This client never reuses an id, so such a refusal answers a message it did not send as
    a new request; it must not end the stream that owns the id.
    """
    return isinstance(message, ErrorReply) and message.code == DuplicateRequestIdError.code


MAX_PROBE_SILENCE_S = 2.0
"""Silence after which a health probe goes out even with a long timeout: a daemon with work
for this client sends a keepalive every second, so 2 s of silence means it may have died
or restarted, and a restart is learnt within seconds rather than half a long timeout."""


class Liveness:
    """Tracks silence from the daemon and says when to probe and when to give up."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.last_heard = time.monotonic()
        self.probe_sent_at: float | None = None

    @property
    def probe_after_s(self) -> float:
        """Silence after which a probe goes out: half the timeout, at most 2 s."""
        return min(self.timeout / 2, MAX_PROBE_SILENCE_S)

    def heard(self) -> None:
        """Any message arrived."""
        self.last_heard = time.monotonic()
        self.probe_sent_at = None

    def should_probe(self) -> bool:
        """True once `probe_after_s` passed in silence and no probe is out."""
        silence = time.monotonic() - self.last_heard
        return self.probe_sent_at is None and silence >= self.probe_after_s

    def probe_sent(self) -> None:
        """A health probe went out."""
        self.probe_sent_at = time.monotonic()

    def is_dead(self) -> bool:
        """True after a full timeout of silence."""
        return time.monotonic() - self.last_heard >= self.timeout

    def wait_s(self) -> float:
        """How long to wait before the next check."""
        silence = time.monotonic() - self.last_heard
        next_check = self.probe_after_s if self.probe_sent_at is None else self.timeout
        return max(0.001, min(next_check - silence, self.probe_after_s))
