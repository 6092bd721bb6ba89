"""msgpack framing with hard limits: bytes in, a plain dict out, nothing ever executed.

Every payload comes from an untrusted peer, so decoding refuses extension types (and
msgpack timestamps), non-string map keys, oversize input and deep nesting, and reports
each as a ProtocolError instead of raising whatever msgpack raised.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import NoReturn

import msgpack

from llmd.protocol.errors import ProtocolError

DEFAULT_MAX_MESSAGE_BYTES = 8 * 1024 * 1024
"""Largest payload a peer may send (a 100k-token prompt is well under 1 MiB)."""
MAX_NESTING_DEPTH = 16
"""Messages are at most four levels deep; anything deeper is refused."""

_PLAIN_SCALARS = (type(None), bool, int, float, str)


def _refuse_extension(code: int, data: bytes) -> NoReturn:
    raise ProtocolError(f"msgpack extension type {code} is not allowed")


def pack(data: Mapping[str, object]) -> bytes:
    """Encode a plain dict (strings, numbers, lists, maps) as msgpack."""
    return msgpack.packb(data, use_bin_type=True)


def unpack(payload: bytes, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> dict[str, object]:
    """Decode one message; raises ProtocolError unless it is a plain map within the limits."""
    if len(payload) > max_bytes:
        raise ProtocolError(f"message of {len(payload)} bytes exceeds the limit of {max_bytes}")
    try:
        data = msgpack.unpackb(
            payload,
            raw=False,
            strict_map_key=True,
            use_list=True,
            ext_hook=_refuse_extension,
        )
    except ProtocolError:
        raise
    except (ValueError, msgpack.UnpackException) as error:  # every malformed-input error
        raise ProtocolError(f"not a valid msgpack message ({type(error).__name__})") from None
    if not isinstance(data, dict):
        raise ProtocolError(f"a message must be a map, got {type(data).__name__}")
    check_plain(data)
    return data


def peek_id(payload: bytes) -> str | None:
    """The "id" of a message too large to decode, read from its first few keys, if there.

    Messages put "type", "v" and "id" first, so an oversize request can still be refused
    under its own id (its sender would otherwise wait for an answer that never comes).
    """
    unpacker = msgpack.Unpacker(
        io.BytesIO(payload), raw=False, ext_hook=_refuse_extension, max_buffer_size=0
    )
    try:
        num_entries = unpacker.read_map_header()
        for _ in range(min(num_entries, 4)):
            key = unpacker.unpack()
            if key != "id":
                unpacker.skip()
                continue
            value = unpacker.unpack()
            return value if isinstance(value, str) and 0 < len(value) <= 128 else None
    except Exception:  # anything malformed: no id to answer under
        return None
    return None


def check_plain(value: object, depth: int = 0) -> None:
    """Raise ProtocolError unless `value` is built only of plain types with string map keys."""
    if depth > MAX_NESTING_DEPTH:
        raise ProtocolError(f"message is nested deeper than {MAX_NESTING_DEPTH} levels")
    if isinstance(value, _PLAIN_SCALARS):
        return
    if isinstance(value, list):
        for item in value:
            if not isinstance(item, _PLAIN_SCALARS):
                check_plain(item, depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ProtocolError("map keys must be strings")
            if not isinstance(item, _PLAIN_SCALARS):
                check_plain(item, depth + 1)
        return
    raise ProtocolError(f"values of type {type(value).__name__} are not allowed")
