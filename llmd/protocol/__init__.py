"""The daemon's wire protocol: typed msgpack messages shared by the daemon and its clients.

Pure standard library plus msgpack, so the client and the terminal apps import it without
torch; docs/protocol.md describes every message field by field.
"""

from __future__ import annotations

from typing import cast

import msgpack

from llmd.protocol.address import Address, default_address, parse_address, runtime_dir
from llmd.protocol.client_messages import (
    CLIENT_MESSAGE_TYPES,
    AbortRequest,
    ClientMessage,
    DetokenizeRequest,
    FlushCacheRequest,
    GenerateRequest,
    HealthRequest,
    ShutdownRequest,
    StatsRequest,
    SubscribeRequest,
    TokenizeRequest,
    UnsubscribeRequest,
)
from llmd.protocol.codec import DEFAULT_MAX_MESSAGE_BYTES, pack, unpack
from llmd.protocol.daemon_messages import (
    DAEMON_MESSAGE_TYPES,
    Accepted,
    Ack,
    CacheFlushed,
    DaemonMessage,
    DetokenizeReply,
    ErrorReply,
    Finished,
    HealthReply,
    Keepalive,
    PrefillProgress,
    StatsReply,
    TokenDelta,
    TokenizeReply,
)
from llmd.protocol.errors import (
    DuplicateRequestIdError,
    ProtocolError,
    RequestExpiredError,
    RequestFailedError,
    error_from_code,
)
from llmd.protocol.logprob_entry import LogprobEntry
from llmd.protocol.schema import PROTOCOL_VERSION, MessageT, WireMessage, check_envelope
from llmd.protocol.stats_snapshot import SNAPSHOT_VERSION, StatsSnapshot

__all__ = [
    "CLIENT_MESSAGE_TYPES",
    "DAEMON_MESSAGE_TYPES",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "PROTOCOL_VERSION",
    "SNAPSHOT_VERSION",
    "AbortRequest",
    "Accepted",
    "Ack",
    "Address",
    "CacheFlushed",
    "ClientMessage",
    "DaemonMessage",
    "DetokenizeReply",
    "DetokenizeRequest",
    "DuplicateRequestIdError",
    "ErrorReply",
    "Finished",
    "FlushCacheRequest",
    "GenerateRequest",
    "HealthReply",
    "HealthRequest",
    "Keepalive",
    "LogprobEntry",
    "PrefillProgress",
    "ProtocolError",
    "RequestExpiredError",
    "RequestFailedError",
    "ShutdownRequest",
    "StatsReply",
    "StatsRequest",
    "StatsSnapshot",
    "SubscribeRequest",
    "TokenDelta",
    "TokenizeReply",
    "TokenizeRequest",
    "UnsubscribeRequest",
    "WireMessage",
    "decode_client_message",
    "decode_daemon_message",
    "default_address",
    "encode",
    "error_from_code",
    "message_id",
    "pack",
    "pack_stats_reply",
    "pack_value",
    "parse_address",
    "parse_message",
    "runtime_dir",
]


def encode(message: WireMessage) -> bytes:
    """msgpack bytes of a message."""
    return pack(message.to_wire())


def pack_value(value: object) -> bytes:
    """msgpack bytes of any plain value (a part packed once and spliced into many messages)."""
    return msgpack.packb(value, use_bin_type=True)


def pack_stats_reply(client_id: str, packed_snapshot: bytes) -> bytes:
    """A `stats` message around a snapshot packed once for every subscriber who shares it.

    The same bytes `encode(StatsReply(client_id, snapshot))` gives, without packing the
    snapshot again for each recipient.
    """
    header = msgpack.Packer(use_bin_type=True).pack_map_header(4)
    fields = ("type", StatsReply.TYPE, "v", PROTOCOL_VERSION, "id", client_id, "snapshot")
    return header + b"".join(pack_value(value) for value in fields) + packed_snapshot


def parse_message(
    data: dict[str, object], types: dict[str, type[MessageT]], is_strict: bool = True
) -> MessageT:
    """Turn a decoded map into the message class its "type" names (typed errors otherwise).

    With `is_strict` false, fields the class does not know are ignored (see `from_wire`).
    """
    message_type = check_envelope(data)
    message_class = types.get(message_type)
    if message_class is None:
        raise ProtocolError(f"unknown message type {message_type!r}", "type")
    return message_class.from_wire(data, is_strict)


def decode_client_message(
    payload: bytes, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
) -> ClientMessage:
    """Decode and validate a message sent to the daemon."""
    # The table is derived from the ClientMessage union, so every class it holds is one.
    return cast(ClientMessage, parse_message(unpack(payload, max_bytes), CLIENT_MESSAGE_TYPES))


def decode_daemon_message(
    payload: bytes, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
) -> DaemonMessage:
    """Decode and validate a message sent by the daemon (fields a newer one adds are ignored)."""
    # The table is derived from the DaemonMessage union, so every class it holds is one.
    data = unpack(payload, max_bytes)
    return cast(DaemonMessage, parse_message(data, DAEMON_MESSAGE_TYPES, is_strict=False))


def message_id(data: dict[str, object]) -> str | None:
    """The "id" of a decoded map when it is a usable string (to address an error reply)."""
    value = data.get("id")
    if isinstance(value, str) and 0 < len(value) <= 128:
        return value
    return None
