"""The ROUTER socket's two ends for the I/O thread: framed messages in, payloads out.

Incoming frames are checked (one frame per message, the size limit) before they are
unpacked; outgoing payloads go several to a message, one per frame (a client reads one
message per burst instead of one per reply), never block, and a peer that cannot be
reached is reported gone once and then skipped until it speaks again. Busy peers that
heard nothing lately get a keepalive, so a killed client is found within a second.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence

import zmq

from llmd.daemon.keepalive import KeepaliveSchedule
from llmd.errors import LLMDError
from llmd.protocol import ErrorReply, Keepalive, ProtocolError, WireMessage, encode, unpack
from llmd.protocol.codec import peek_id

logger = logging.getLogger("llmd.daemon.server")

MAX_MESSAGES_PER_WAKE = 256
"""Most messages read per wake-up, so the outbox and the drain are never starved."""
MAX_FRAMES_PER_MESSAGE = 256
"""Most replies sent in one message, so one message (queued whole by ZeroMQ) stays small."""


class FrameRefused(Exception):
    """A message refused before it was parsed: `error` is sent back under `client_id`
    (its id when one was readable, else None)."""

    def __init__(self, error: LLMDError, client_id: str | None) -> None:
        super().__init__(error.message)
        self.error = error
        self.client_id = client_id


def unpack_frames(body: list[bytes], max_message_bytes: int) -> dict[str, object]:
    """The message map in a peer's frames (after the identity frame), or FrameRefused."""
    if len(body) == 2 and body[0] == b"":
        body = body[1:]  # a REQ-style empty delimiter
    if len(body) != 1:
        raise FrameRefused(ProtocolError("expected one frame per message"), None)
    if len(body[0]) > max_message_bytes:  # refused under its id when it has one
        error = ProtocolError(
            f"message of {len(body[0])} bytes exceeds the limit of {max_message_bytes}"
        )
        raise FrameRefused(error, peek_id(body[0]))
    try:
        return unpack(body[0], max_message_bytes)
    except ProtocolError as error:
        raise FrameRefused(error, None) from error


class PeerTransport:
    """Reads and writes the ROUTER socket; knows which peers are gone."""

    def __init__(
        self, instance_id: str, max_message_bytes: int, on_peer_gone: Callable[[bytes], None]
    ) -> None:
        self.max_message_bytes = max_message_bytes
        self.socket: zmq.Socket[bytes] | None = None
        """Set once the daemon is bound; sends before that are dropped."""
        self.gone_peers: set[bytes] = set()
        """Peers found unreachable that still have requests to end; nothing is sent to them."""
        self._keepalive = encode(Keepalive(instance_id))
        self._keepalives = KeepaliveSchedule()
        self._on_peer_gone = on_peer_gone

    def receive(self) -> Iterator[tuple[bytes, dict[str, object]]]:
        """(peer, message map) of each message waiting now, at most MAX_MESSAGES_PER_WAKE;
        badly framed or oversized ones are answered with a protocol error and skipped."""
        assert self.socket is not None  # only called while serving
        for _ in range(MAX_MESSAGES_PER_WAKE):
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            peer = frames[0]
            self.gone_peers.discard(peer)  # it speaks: reachable again
            try:
                data = unpack_frames(frames[1:], self.max_message_bytes)
            except FrameRefused as refused:
                self.reply_error(peer, refused.client_id, refused.error)
                continue
            yield peer, data

    def send(self, peer: bytes, payload: bytes) -> None:
        """Send one payload without blocking; an unreachable peer is reported gone instead."""
        self.send_frames(peer, (payload,))

    def send_frames(self, peer: bytes, payloads: Sequence[bytes]) -> None:
        """Send `payloads` in order, one frame each, up to MAX_FRAMES_PER_MESSAGE a message;
        never blocks: an unreachable peer is reported gone and the rest is dropped."""
        for start in range(0, len(payloads), MAX_FRAMES_PER_MESSAGE):
            if peer in self.gone_peers or self.socket is None:
                return
            frames = [peer, *payloads[start : start + MAX_FRAMES_PER_MESSAGE]]
            try:
                self.socket.send_multipart(frames, zmq.NOBLOCK)
            except zmq.ZMQError as error:
                if error.errno not in (zmq.EHOSTUNREACH, zmq.EAGAIN):
                    raise
                self._on_peer_gone(peer)
                return
            self._keepalives.on_sent(peer)

    def send_message(self, peer: bytes, message: WireMessage) -> None:
        """Encode and send one wire message."""
        self.send(peer, encode(message))

    def reply_error(self, peer: bytes, client_id: str | None, error: LLMDError) -> None:
        """Send a typed error under `client_id`."""
        self.send_message(peer, ErrorReply.from_error(client_id, error))

    def send_keepalives(self, busy_peers: set[bytes]) -> None:
        """Probe each busy connection that heard nothing lately."""
        due = self._keepalives.due(busy_peers - self.gone_peers)
        for peer in due:
            self.send(peer, self._keepalive)

    def on_disconnect(self) -> None:
        """A connection closed: probe the busy ones now to find whose."""
        self._keepalives.on_disconnect()
