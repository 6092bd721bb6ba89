"""Publishes the engine's KV-cache events over a ZeroMQ PUB socket in vLLM's wire format.

Routers and indexers written for vLLM (llm-d's KV index, SMG's event-fed tree) subscribe
to `--kv-events`; matching vLLM's framing and msgpack layout lets them read llmd as they
read vLLM: each message is three frames (topic, an 8-byte big-endian sequence number, the
batch), the batch `[timestamp, [event, ...]]` and each event an array tagged by its type:
`["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium]`,
`["BlockRemoved", block_hashes, medium]`, `["AllBlocksCleared"]`.
"""

from __future__ import annotations

import contextlib
import time

import msgpack
import zmq

from llmd.engine.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent
from llmd.errors import InvalidParameterError
from llmd.protocol import parse_address

TOPIC = b""
"""vLLM's default topic: subscribers that filter on nothing receive every batch."""
MEDIUM = "GPU"
"""vLLM's name for the device tier holding the blocks; llmd's KV lives in one tier."""


def check_kv_events_address(text: str, allow_remote: bool) -> str:
    """`text` as a bindable address; a non-loopback one needs `allow_remote`."""
    try:
        address = parse_address(text)
    except InvalidParameterError as error:
        raise InvalidParameterError(error.message, "kv_events") from None
    if not address.is_loopback and not allow_remote:
        raise InvalidParameterError(
            f"{address} is reachable from other machines; bind the KV events to 127.0.0.1 or "
            "an ipc:// socket, or pass --allow-remote",
            "kv_events",
        )
    return str(address)


def encode_event(event: KVEvent) -> list[object]:
    """One event as vLLM's tagged array."""
    if isinstance(event, BlockStored):
        return [
            "BlockStored", event.block_hashes, event.parent_block_hash, event.token_ids,
            event.block_size, None, MEDIUM,
        ]  # fmt: skip
    if isinstance(event, BlockRemoved):
        return ["BlockRemoved", event.block_hashes, MEDIUM]
    if isinstance(event, AllBlocksCleared):
        return ["AllBlocksCleared"]
    raise TypeError(f"not a KV event: {event!r}")


def encode_batch(events: list[KVEvent], now: float) -> bytes:
    """A batch of events, as the third frame of a message."""
    return msgpack.packb([now, [encode_event(event) for event in events]], use_bin_type=True)


class KVEventPublisher:
    """A PUB socket bound on the engine thread; `publish` sends one batch per call."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._socket: zmq.Socket[bytes] | None = None
        self._sequence = 0

    def open(self) -> None:
        """Bind (on the thread that will publish: zmq sockets are not thread-safe)."""
        socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.PUB)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.SNDHWM, 100_000)  # a slow subscriber drops, never blocks us
        socket.bind(self.address)
        self._socket = socket

    def publish(self, events: list[KVEvent]) -> None:
        """Send `events` (nothing when empty) as one numbered batch."""
        if not events or self._socket is None:
            return
        frames = [TOPIC, self._sequence.to_bytes(8, "big"), encode_batch(events, time.time())]
        self._sequence += 1
        with contextlib.suppress(zmq.Again):  # no room for a slow subscriber: batch dropped
            self._socket.send_multipart(frames, flags=zmq.NOBLOCK)

    def close(self) -> None:
        """Unbind."""
        if self._socket is not None:
            self._socket.close()
            self._socket = None
