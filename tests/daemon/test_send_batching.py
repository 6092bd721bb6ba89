"""The I/O thread sends each peer's burst of replies as one multipart message, in order.

Driven as the I/O loop drives it (outbox drained, `batched`, `InFlightRequests.deliver`)
over a socket that records what it is handed; no engine and no real socket are needed.
"""

from __future__ import annotations

import pytest
import zmq

from llmd.daemon.in_flight_requests import InFlightRequests
from llmd.daemon.outbox import EngineWarm, Outbox, Send, SendBatch, batched
from llmd.daemon.peer_transport import MAX_FRAMES_PER_MESSAGE, PeerTransport
from llmd.daemon.routes import RouteTable
from llmd.daemon.text_worker import AbortJob

PEER_A = b"peer-a"
PEER_B = b"peer-b"


class RecordingSocket:
    """Stands in for the ROUTER: records each multipart message, or refuses some peers."""

    def __init__(self, refused: dict[bytes, int] | None = None) -> None:
        self.sent: list[list[bytes]] = []
        self.refused = refused or {}
        """Peer -> the errno its sends fail with."""

    def send_multipart(self, frames: list[bytes], flags: int = 0) -> None:
        assert flags == zmq.NOBLOCK  # the I/O thread never blocks on a peer
        errno = self.refused.get(frames[0])
        if errno is not None:
            raise zmq.ZMQError(errno)
        self.sent.append(list(frames))


class IoSide:
    """The daemon's outgoing path: routes, transport on a recording socket, in-flight."""

    def __init__(self, socket: RecordingSocket) -> None:
        self.routes = RouteTable()
        self.submitted: list[object] = []
        self.gone: list[bytes] = []
        self.transport = PeerTransport("instance", 1 << 20, self._on_peer_gone)
        self.transport.socket = socket  # type: ignore[assignment]
        self.in_flight = InFlightRequests(self.routes, self.transport, self.submitted.append)
        self.outbox = Outbox()

    def _on_peer_gone(self, peer: bytes) -> None:
        self.gone.append(peer)
        self.in_flight.on_peer_gone(peer)

    def run_once(self) -> list[object]:
        """Drain the outbox as the I/O loop does; returns the items other than sends."""
        others: list[object] = []
        for item in batched(self.outbox.drain()):
            if isinstance(item, SendBatch):
                self.in_flight.deliver(item)
            else:
                others.append(item)
        return others

    def close(self) -> None:
        self.outbox.close()


@pytest.fixture
def io_side():
    side = IoSide(RecordingSocket())
    yield side
    side.close()


def test_a_burst_to_two_peers_is_one_message_per_peer_in_order_and_releases(io_side):
    io_side.routes.add(PEER_A, "a1")
    io_side.routes.add(PEER_B, "b1")
    io_side.routes.add(PEER_B, "b2")
    for send in [
        Send(PEER_A, b"a1-token-1"),
        Send(PEER_B, b"b1-token-1"),
        Send(PEER_B, b"b2-token-1"),
        Send(PEER_A, b"a1-token-2"),
        Send(PEER_B, b"b1-finished", (PEER_B, "b1")),
        Send(PEER_A, b"a1-finished", (PEER_A, "a1")),
        Send(PEER_B, b"b2-token-2"),
    ]:
        io_side.outbox.post(send)
    assert io_side.run_once() == []
    assert io_side.transport.socket.sent == [
        [PEER_A, b"a1-token-1", b"a1-token-2", b"a1-finished"],
        [PEER_B, b"b1-token-1", b"b2-token-1", b"b1-finished", b"b2-token-2"],
    ]
    assert io_side.routes.engine_id(PEER_A, "a1") is None  # released once sent
    assert io_side.routes.engine_id(PEER_B, "b1") is None
    assert io_side.routes.engine_id(PEER_B, "b2") is not None  # its last message is to come
    assert io_side.gone == []


def test_another_item_ends_a_run_so_it_is_handled_after_what_was_posted_before_it():
    warm = EngineWarm(1.0)
    items = [Send(PEER_A, b"1"), Send(PEER_B, b"2"), warm, Send(PEER_A, b"3")]
    assert list(batched(items)) == [  # type: ignore[arg-type]
        SendBatch(PEER_A, (Send(PEER_A, b"1"),)),
        SendBatch(PEER_B, (Send(PEER_B, b"2"),)),
        warm,
        SendBatch(PEER_A, (Send(PEER_A, b"3"),)),
    ]


def test_a_long_burst_is_split_at_the_frame_cap_in_order(io_side):
    payloads = [f"token-{index}".encode() for index in range(2 * MAX_FRAMES_PER_MESSAGE + 5)]
    for payload in payloads:
        io_side.outbox.post(Send(PEER_A, payload))
    io_side.run_once()
    sent = io_side.transport.socket.sent
    assert [len(message) - 1 for message in sent] == [
        MAX_FRAMES_PER_MESSAGE, MAX_FRAMES_PER_MESSAGE, 5
    ]  # fmt: skip
    assert all(message[0] == PEER_A for message in sent)
    assert [frame for message in sent for frame in message[1:]] == payloads


@pytest.mark.parametrize("errno", [zmq.EHOSTUNREACH, zmq.EAGAIN])
def test_an_unreachable_peer_is_gone_once_and_the_other_peer_is_served(errno):
    side = IoSide(RecordingSocket({PEER_A: errno}))
    try:
        engine_id = side.routes.add(PEER_A, "a1")
        side.routes.add(PEER_A, "a2")
        for send in [
            Send(PEER_A, b"a1-token"),
            Send(PEER_B, b"b-health"),
            Send(PEER_A, b"a1-finished", (PEER_A, "a1")),
        ]:
            side.outbox.post(send)
        side.run_once()
        assert side.gone == [PEER_A]  # reported once for the whole burst
        assert side.transport.socket.sent == [[PEER_B, b"b-health"]]
        assert side.routes.engine_id(PEER_A, "a1") is None  # released all the same
        assert AbortJob(engine_id) in side.submitted  # its requests were aborted
        assert PEER_A in side.transport.gone_peers  # "a2" still has its last message to come
        side.outbox.post(Send(PEER_A, b"a2-finished", (PEER_A, "a2")))
        side.run_once()
        assert side.gone == [PEER_A]  # skipped, not tried again
        assert PEER_A not in side.transport.gone_peers  # its last request ended
    finally:
        side.close()


def test_single_sends_such_as_keepalives_are_one_frame_messages(io_side):
    io_side.transport.send(PEER_A, b"error-reply")
    io_side.transport.on_disconnect()  # a connection closed: probe the busy ones now
    io_side.transport.send_keepalives({PEER_B})
    sent = io_side.transport.socket.sent
    assert sent[0] == [PEER_A, b"error-reply"]
    assert len(sent) == 2 and sent[1][0] == PEER_B and len(sent[1]) == 2
