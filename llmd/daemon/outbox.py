"""Hands work from the engine and text threads to the I/O thread, which owns the socket.

ZeroMQ sockets are not thread-safe, so other threads never touch the ROUTER: they put
items on a queue and write one byte to a pipe whose read end the I/O thread polls
together with the socket (a self-pipe; safe to call even from a signal handler).
Draining groups each run of sends per peer, so a burst (one engine step's tokens for
every stream of one client) leaves as one message.
"""

from __future__ import annotations

import contextlib
import os
import queue
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmd.engine.engine_snapshot import EngineSnapshot


@dataclass(frozen=True)
class Send:
    """Send `payload` to `peer`; `release_key` marks the last message of an in-flight request."""

    peer: bytes
    payload: bytes
    release_key: tuple[bytes, str] | None = None


@dataclass(frozen=True)
class SnapshotReady:
    """The engine thread's part of the stats snapshot in collection (None: it failed or died)."""

    engine_snapshot: EngineSnapshot | None


@dataclass(frozen=True)
class EngineDied:
    """The engine thread has stopped with an error."""

    message: str


@dataclass(frozen=True)
class EngineWarm:
    """The engine thread finished its warm-up: the daemon is ready."""

    seconds: float


@dataclass(frozen=True)
class ConnectionClosed:
    """Some client connection closed (seen by the connection gate's thread)."""


@dataclass(frozen=True)
class Drain:
    """Stop accepting requests and exit once in-flight ones end (or are aborted, if `now`)."""

    now: bool = False
    timeout_s: float | None = None
    requester: tuple[bytes, str] | None = None
    """Peer and message id of a shutdown request, to acknowledge when stopped."""


@dataclass(frozen=True)
class SendGroup:
    """Sends posted at once (one engine step's replies): drained as its sends, in order, so
    the I/O thread never wakes between them and sends each peer's share as one message."""

    sends: tuple[Send, ...]


OutboxItem = Send | SnapshotReady | EngineDied | EngineWarm | ConnectionClosed | Drain
"""Everything another thread may hand the I/O thread; `Daemon` dispatches on the class."""


@dataclass(frozen=True)
class SendBatch:
    """Consecutive sends to one peer, in the order they were posted, sent as one message."""

    peer: bytes
    sends: tuple[Send, ...]


DrainedItem = SendBatch | SnapshotReady | EngineDied | EngineWarm | ConnectionClosed | Drain
"""What the I/O thread handles: the outbox's items with its sends grouped (`batched`)."""


def batched(items: list[OutboxItem]) -> Iterator[DrainedItem]:
    """`items` with each run of sends grouped per peer (each peer's order kept); any other
    item ends a run, so it is handled after every send posted before it went out."""
    run: dict[bytes, list[Send]] = {}
    for item in items:
        if isinstance(item, Send):
            run.setdefault(item.peer, []).append(item)
            continue
        yield from (SendBatch(peer, tuple(sends)) for peer, sends in run.items())
        run = {}
        yield item
    yield from (SendBatch(peer, tuple(sends)) for peer, sends in run.items())


class Outbox:
    """A thread-safe queue whose arrivals wake a zmq.Poller through a pipe."""

    def __init__(self) -> None:
        self._items: queue.SimpleQueue[OutboxItem | SendGroup] = queue.SimpleQueue()
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)
        self._is_closed = False

    def fileno(self) -> int:
        """The descriptor to poll for readability."""
        return self._read_fd

    def post(self, item: OutboxItem | SendGroup) -> None:
        """Queue `item` and wake the I/O thread (never blocks)."""
        self._items.put(item)
        if self._is_closed:
            return  # the descriptor numbers may already belong to other files
        # A full pipe means a wake-up is pending anyway; a closed one means we are exiting.
        with contextlib.suppress(OSError):
            os.write(self._write_fd, b"\0")

    def drain(self) -> list[OutboxItem]:
        """Everything posted so far, in order (a group's sends in its place)."""
        try:
            while os.read(self._read_fd, 4096):
                pass
        except BlockingIOError:
            pass
        items: list[OutboxItem] = []
        while True:
            try:
                item = self._items.get_nowait()
            except queue.Empty:
                return items
            if isinstance(item, SendGroup):
                items.extend(item.sends)
            else:
                items.append(item)

    def close(self) -> None:
        """Close the pipe; later posts are queued but wake nobody."""
        if self._is_closed:
            return
        self._is_closed = True
        for fd in (self._read_fd, self._write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
