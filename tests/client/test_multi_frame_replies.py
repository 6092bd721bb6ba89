"""Both clients deliver every frame of a multi-frame daemon message to its request.

The daemon sends a burst of replies to one connection (one engine step's token of each
stream) as one message, one reply per frame; a fake daemon here sends two interleaved
streams' replies that way, and each stream must get exactly its own, in order.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
import zmq

from llmd.client import Accepted, AsyncClient, Client, Finished, TokenDelta
from llmd.client.client_core import ClientCore
from llmd.client.deadline import Wakeups
from llmd.protocol import (
    GenerateRequest,
    HealthReply,
    HealthRequest,
    Keepalive,
    decode_client_message,
    encode,
)


class BurstDaemon:
    """A ROUTER on a thread: accepts the first generate alone, then answers both streams
    (the rest of the first and all of the second) in one multi-frame message."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.num_messages: list[int] = []
        """Frames per message sent after the handshake."""
        self._socket = zmq.Context.instance().socket(zmq.ROUTER)
        self._socket.bind(address)
        self._is_stopped = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        generates: list[str] = []
        while not self._is_stopped:
            if not self._socket.poll(20):
                continue
            peer, payload = self._socket.recv_multipart()
            message = decode_client_message(payload)
            if isinstance(message, HealthRequest):  # a handshake (or a probe)
                reply = HealthReply(message.id, "ok", True, 1, "fake", self.address, 0.0, 0, "0", 1)
                self._socket.send_multipart([peer, encode(reply)])
            elif isinstance(message, GenerateRequest):
                generates.append(message.id)
                replies = _burst(*generates) if len(generates) == 2 else [_accepted(message.id)]
                self.num_messages.append(len(replies))  # before the client can see it
                self._socket.send_multipart([peer, *map(encode, replies)])

    def close(self) -> None:
        self._is_stopped = True
        self._thread.join()
        self._socket.close(linger=0)


def _accepted(request_id: str) -> Accepted:
    return Accepted(request_id, f"req-{request_id}", 3)


def _burst(first: str, second: str) -> list:
    return [
        _accepted(second),
        TokenDelta(first, "a", [1]),
        TokenDelta(second, "x", [7]),
        Keepalive("fake"),  # no request's: reaches none
        TokenDelta(first, "b", [2]),
        Finished(first, "length", None, [1, 2], {}, {}),
        TokenDelta(second, "y", [8]),
        Finished(second, "length", None, [7, 8], {}, {}),
    ]


def _texts(events: list) -> list[str]:
    return [type(e).__name__ if not isinstance(e, TokenDelta) else e.text for e in events]


@pytest.fixture
def burst_daemon(tmp_path):
    daemon = BurstDaemon(f"ipc://{tmp_path / 'burst.sock'}")
    yield daemon
    daemon.close()


def test_the_sync_client_delivers_every_frame_to_its_stream(burst_daemon):
    with Client(burst_daemon.address, timeout=5.0) as client:
        first = client.stream("one")
        assert isinstance(next(first), Accepted)
        second = client.stream("two")
        assert isinstance(next(second), Accepted)  # one read took the whole burst
        assert _texts(list(first)) == ["a", "b", "Finished"]
        assert _texts(list(second)) == ["x", "y", "Finished"]
    assert burst_daemon.num_messages == [1, 8]


async def test_the_async_client_delivers_every_frame_to_its_stream(burst_daemon, monkeypatch):
    woken: list[str] = []
    real_wake = Wakeups.wake
    monkeypatch.setattr(Wakeups, "wake", lambda self, i: (woken.append(i), real_wake(self, i)))
    async with AsyncClient(burst_daemon.address, timeout=5.0) as client:
        first = client.stream("one")
        accepted = await anext(first)
        assert isinstance(accepted, Accepted)
        second = client.stream("two")

        async def rest(stream) -> list:
            return [event async for event in stream]

        first_rest, second_all = await asyncio.wait_for(
            asyncio.gather(rest(first), rest(second)), 10
        )
    assert _texts(first_rest) == ["a", "b", "Finished"]
    assert _texts(second_all) == ["Accepted", "x", "y", "Finished"]
    assert burst_daemon.num_messages == [1, 8]
    # The handshake, the first accepted, then the burst: each stream woken once, not per frame.
    assert len(woken) == 4 and woken[1] == accepted.id
    assert sorted(woken[2:]) == sorted([accepted.id, second_all[0].id])


def test_the_core_routes_frames_in_order_and_names_each_request_reached_once():
    core = ClientCore("ipc:///nowhere.sock", 5.0)
    core.open("r1", is_stream=True)
    core.open("r2", is_stream=True)
    reached = core.receive_frames([encode(m) for m in _burst("r1", "r2")])
    assert reached == ["r2", "r1"]
    assert [core.take("r1") for _ in range(3)] == [
        TokenDelta("r1", "a", [1]), TokenDelta("r1", "b", [2]),
        Finished("r1", "length", None, [1, 2], {}, {}),
    ]  # fmt: skip
    assert core.take("r2") == _accepted("r2")
