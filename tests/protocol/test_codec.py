"""The msgpack codec refuses anything but plain maps within limits, as ProtocolError."""

from __future__ import annotations

import contextlib
import datetime
import pickle
import random

import msgpack
import pytest

from llmd.protocol import ProtocolError
from llmd.protocol.codec import MAX_NESTING_DEPTH, check_plain, pack, unpack


def test_round_trip_of_plain_data():
    data = {"a": 1, "b": [1.5, "x", None, True], "c": {"d": [], "e": {}}, "f": -(2**40)}
    assert unpack(pack(data)) == data


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"\xc1",  # a byte msgpack never uses
        pack({"a": "b"})[:-1],  # truncated
        pack({"a": 1}) + b"\x00",  # trailing bytes
        msgpack.packb([1, 2]),  # not a map
        msgpack.packb("text"),
        msgpack.packb({1: "int key"}, strict_types=False),
        msgpack.packb({"k": msgpack.ExtType(5, b"data")}),
        msgpack.packb({"k": datetime.datetime.now(datetime.timezone.utc)}, datetime=True),
        msgpack.packb({"k": b"raw bytes"}, use_bin_type=True),
        pickle.dumps({"type": "health", "v": 1, "id": "x"}),
    ],
    ids=[
        "empty",
        "reserved",
        "truncated",
        "trailing",
        "list",
        "str",
        "int-key",
        "ext",
        "timestamp",
        "bin",
        "pickle",
    ],
)
def test_malformed_payloads_raise_protocol_errors(payload):
    with pytest.raises(ProtocolError) as error:
        unpack(payload)
    assert error.value.code == "protocol_error"


def test_size_limit_is_checked_before_decoding():
    payload = pack({"prompt": "x" * 1000})
    assert unpack(payload, max_bytes=len(payload))["prompt"] == "x" * 1000
    with pytest.raises(ProtocolError, match="exceeds the limit"):
        unpack(payload, max_bytes=len(payload) - 1)


def test_deep_nesting_is_refused():
    value: object = 1
    for _ in range(MAX_NESTING_DEPTH + 2):
        value = [value]
    with pytest.raises(ProtocolError, match="nested"):
        unpack(pack({"k": value}))
    check_plain({"k": [[[1]]]})  # shallow is fine


def test_random_bytes_never_escape_as_other_exceptions():
    rng = random.Random(1)
    for _ in range(3000):
        payload = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 48)))
        with contextlib.suppress(ProtocolError):  # anything else fails the test
            unpack(payload)


def test_peek_id_reads_the_id_of_an_oversize_message_without_decoding_it():
    from llmd.protocol import GenerateRequest, encode
    from llmd.protocol.codec import peek_id

    assert peek_id(encode(GenerateRequest("big-1", prompt="x" * 100_000))) == "big-1"
    late = {"type": "generate", "v": 1, "prompt": "x", "stream": True, "id": "late"}
    assert peek_id(pack(late)) is None  # only the first four keys are looked at
    assert peek_id(pack({"id": 7})) is None
    assert peek_id(b"\xc1 not msgpack") is None
    assert peek_id(pack({"id": "x" * 129})) is None
