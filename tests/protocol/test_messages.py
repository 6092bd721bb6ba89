"""Every message round-trips, and every validation failure names the offending field."""

from __future__ import annotations

import pytest

from llmd.errors import InvalidParameterError
from llmd.protocol import (
    CLIENT_MESSAGE_TYPES,
    DAEMON_MESSAGE_TYPES,
    PROTOCOL_VERSION,
    AbortRequest,
    Accepted,
    Ack,
    CacheFlushed,
    DetokenizeReply,
    DetokenizeRequest,
    ErrorReply,
    Finished,
    FlushCacheRequest,
    GenerateRequest,
    HealthReply,
    HealthRequest,
    Keepalive,
    PrefillProgress,
    ProtocolError,
    ShutdownRequest,
    StatsReply,
    StatsRequest,
    SubscribeRequest,
    TokenDelta,
    TokenizeReply,
    TokenizeRequest,
    UnsubscribeRequest,
    decode_client_message,
    decode_daemon_message,
    encode,
    pack,
)
from llmd.protocol.engine_sections import QueueCounts
from tests.protocol.snapshot_samples import sample_snapshot

PROMPT_ENTRY = {
    "token_id": 9, "logprob": -1.5, "rank": 2, "top_token_ids": [4], "top_logprobs": [-0.5],
    "token": "i", "top_tokens": ["o"],
}  # fmt: skip
CLIENT_EXAMPLES = [
    GenerateRequest("g1", prompt="hello", sampling_params={"max_tokens": 4, "stop": ["."]}),
    GenerateRequest("g2", prompt_token_ids=[1, 2, 3], stream=False, priority=-3),
    GenerateRequest("g3", messages=[{"role": "user", "content": "hi"}]),
    AbortRequest("g1"),
    StatsRequest("s", include_block_map=False, timeline_request_id="req-1", max_requests=5),
    SubscribeRequest("sub", interval_ms=250),
    UnsubscribeRequest("sub"),
    HealthRequest("h"),
    HealthRequest("probe", request_ids=["g1", "sub"]),
    GenerateRequest("g4", prompt="x", expires_at=1_800_000_000.5),
    GenerateRequest("g5", prompt="x", sampling_params={"structured_outputs": {"choice": ["a"]}}),
    GenerateRequest("g6", prompt="x", sampling_params={"structured_outputs": {"json": "{}"}}),
    ShutdownRequest("stop", now=True, timeout_s=2.5),
    GenerateRequest("g7", prompt="x", echo=True, sampling_params={"prompt_logprobs": 2}),
    TokenizeRequest("t1", prompt="hello", add_special_tokens=False),
    TokenizeRequest("t2", messages=[{"role": "user", "content": "hi"}]),
    DetokenizeRequest("d1", [1, 2, 3]),
    FlushCacheRequest("flush"),
]
DAEMON_EXAMPLES = [
    Accepted("g1", "req-1", 5),
    Accepted("g1", "req-1", 5, instance_id="0123abcd"),
    PrefillProgress("g1", 64, 200),
    TokenDelta("g1", "text", [5, 6], [{"token_id": 5, "logprob": -0.1}, {"token_id": 6}]),
    Finished("g1", "stop", ".", [5, 6], {"prompt_tokens": 5}, {"ttft": 0.1, "tpot": None}),
    Finished("g2", "length", None, [1], {"prompt_tokens": 1}, {}, text="a", logprobs=[]),
    ErrorReply(None, "protocol_error", "bad", None),
    ErrorReply("g1", "invalid_parameter", "must be >= 0", "temperature"),
    StatsReply("s", sample_snapshot(queue=QueueCounts(0, 1, 0, 0))),
    HealthReply("h", "ok", True, 1, "m", "ipc:///x", 1.0, 0, "0.1.0", PROTOCOL_VERSION),
    HealthReply(
        "h",
        "ok",
        True,
        1,
        "m",
        "ipc:///x",
        1.0,
        0,
        "0.1.0",
        PROTOCOL_VERSION,
        instance_id="0123abcd",
        max_message_bytes=65536,
        unknown_request_ids=["g9"],
    ),
    Ack("stop", "draining"),
    CacheFlushed("flush", 12),
    Keepalive("0123abcd"),
    TokenizeReply("t1", [1, 2], 512),
    DetokenizeReply("d1", "hello"),
    TokenDelta(
        "g7",
        "a",
        [5],
        prompt_logprobs=[None, PROMPT_ENTRY],
        prompt_text="hi",
        prompt_tokens=["h", "i"],
    ),
    Finished("g7", "length", None, [5], {}, {}, text="a", prompt_logprobs=[None, PROMPT_ENTRY]),
]


def test_every_type_has_an_example():
    assert {type(m) for m in CLIENT_EXAMPLES} == set(CLIENT_MESSAGE_TYPES.values())
    assert {type(m) for m in DAEMON_EXAMPLES} == set(DAEMON_MESSAGE_TYPES.values())


@pytest.mark.parametrize("message", CLIENT_EXAMPLES, ids=lambda m: m.TYPE)
def test_client_messages_round_trip(message):
    wire = message.to_wire()
    assert wire["type"] == message.TYPE and wire["v"] == PROTOCOL_VERSION
    assert decode_client_message(encode(message)) == message


@pytest.mark.parametrize("message", DAEMON_EXAMPLES, ids=lambda m: m.TYPE)
def test_daemon_messages_round_trip(message):
    assert decode_daemon_message(encode(message)) == message


@pytest.mark.parametrize("message", DAEMON_EXAMPLES, ids=lambda m: m.TYPE)
def test_fields_a_newer_daemon_adds_are_ignored_by_clients(message):
    wire = {**message.to_wire(), "added_in_a_later_release": [1, 2]}
    assert decode_daemon_message(pack(wire)) == message


@pytest.mark.parametrize("message", CLIENT_EXAMPLES, ids=lambda m: m.TYPE)
def test_the_daemon_refuses_fields_it_does_not_know(message):
    wire = {**message.to_wire(), "tempreature": 0.5}
    with pytest.raises(InvalidParameterError) as caught:
        decode_client_message(pack(wire))
    assert caught.value.parameter == "tempreature"


def test_a_known_field_of_the_wrong_type_is_refused_from_the_daemon_too():
    wire = {**Accepted("g1", "req-1", 5).to_wire(), "num_prompt_tokens": "five"}
    with pytest.raises(InvalidParameterError) as caught:
        decode_daemon_message(pack(wire))
    assert caught.value.parameter == "num_prompt_tokens"


def _generate(**fields):
    return {"type": "generate", "v": 1, "id": "x", "prompt": "p", **fields}


@pytest.mark.parametrize(
    ("data", "parameter"),
    [
        (_generate(bogus=1), "bogus"),
        (_generate(prompt=5), "prompt"),
        (_generate(prompt=None), "prompt"),  # no input at all
        (_generate(prompt_token_ids=[1]), "prompt"),  # two inputs
        (_generate(prompt=None, prompt_token_ids=[1, "2"]), "prompt_token_ids"),
        (_generate(prompt=None, prompt_token_ids=[1, True]), "prompt_token_ids"),
        (_generate(prompt=None, messages=[{"role": 1}]), "messages"),
        (_generate(prompt=None, messages={"role": "user"}), "messages"),
        (_generate(stream="yes"), "stream"),
        (_generate(priority=1.5), "priority"),
        (_generate(priority=2**40), "priority"),
        (_generate(sampling_params=[]), "sampling_params"),
        (_generate(sampling_params={"temperature": -1}), "temperature"),
        (_generate(sampling_params={"top_p": "high"}), "top_p"),
        (_generate(sampling_params={"max_tokens": 0}), "max_tokens"),
        (_generate(sampling_params={"stop": 5}), "stop"),
        (_generate(sampling_params={"stop_token_ids": 5}), "stop_token_ids"),
        (_generate(sampling_params={"nucleus": 0.5}), "nucleus"),
        (
            _generate(sampling_params={"structured_outputs": {"regex": ""}}),
            "structured_outputs.regex",
        ),
        (_generate(sampling_params={"structured_outputs": {"xml": "a"}}), "structured_outputs"),
        (_generate(id=""), "id"),
        (_generate(id="x" * 129), "id"),
        (_generate(id=7), "id"),
        ({"type": "generate", "v": 1, "prompt": "p"}, "id"),  # missing
        ({"type": "stats", "v": 1, "id": "s", "max_requests": -1}, "max_requests"),
        ({"type": "stats", "v": 1, "id": "s", "include_requests": 1}, "include_requests"),
        ({"type": "subscribe", "v": 1, "id": "s", "interval_ms": 10}, "interval_ms"),
        ({"type": "subscribe", "v": 1, "id": "s", "interval_ms": 10**6}, "interval_ms"),
        ({"type": "shutdown", "v": 1, "id": "s", "timeout_s": -1}, "timeout_s"),
        ({"type": "shutdown", "v": 1, "id": "s", "now": "yes"}, "now"),
        ({"type": "abort", "v": 1}, "id"),
    ],
)
def test_invalid_fields_are_named(data, parameter):
    with pytest.raises(InvalidParameterError) as error:
        decode_client_message(pack(data))
    assert error.value.parameter == parameter
    assert error.value.code == "invalid_parameter"


@pytest.mark.parametrize(
    ("data", "parameter"),
    [
        ({"v": 1, "id": "x"}, "type"),
        ({"type": 3, "v": 1, "id": "x"}, "type"),
        ({"type": "teleport", "v": 1, "id": "x"}, "type"),
        ({"type": "accepted", "v": 1, "id": "x"}, "type"),  # a daemon message sent to the daemon
        ({"type": "health", "id": "x"}, "v"),
        ({"type": "health", "v": 2, "id": "x"}, "v"),
        ({"type": "health", "v": True, "id": "x"}, "v"),
    ],
)
def test_envelope_errors_are_protocol_errors(data, parameter):
    with pytest.raises(ProtocolError) as error:
        decode_client_message(pack(data))
    assert error.value.parameter == parameter


def test_integers_widen_to_floats_and_bools_are_not_integers():
    message = decode_client_message(pack({"type": "shutdown", "v": 1, "id": "s", "timeout_s": 3}))
    assert isinstance(message.timeout_s, float) and message.timeout_s == 3.0
    with pytest.raises(InvalidParameterError) as error:
        Accepted("x", "req", True)  # type: ignore[arg-type]
    assert error.value.parameter == "num_prompt_tokens"


def test_messages_validate_when_built_locally():
    with pytest.raises(InvalidParameterError) as error:
        GenerateRequest("x", prompt="p", sampling_params={"top_k": -5})
    assert error.value.parameter == "top_k"
    assert GenerateRequest("x", prompt="p", sampling_params={"top_k": 4}).params().top_k == 4
    assert SubscribeRequest("s", interval_ms=100, max_requests=3).stats_request().max_requests == 3


def test_new_optional_fields_stay_off_the_wire_when_unused():
    """Old daemons refuse fields they do not know: echo and prompt logprobs travel only when
    asked for, and replies without them look as they did before."""
    plain = GenerateRequest("g", prompt="x", sampling_params={"max_tokens": 2})
    assert "echo" not in plain.to_wire()
    params = plain.params().to_dict()
    assert "prompt_logprobs" not in params
    for reply in (TokenDelta("g", "a", [5]), Finished("g", "stop", None, [5], {}, {})):
        wire = reply.to_wire()
        assert not {"prompt_logprobs", "prompt_text", "prompt_tokens"} & set(wire)
    echoed = GenerateRequest("g", prompt="x", echo=True, sampling_params={"prompt_logprobs": 1})
    assert echoed.to_wire()["echo"] is True
    assert echoed.params().prompt_logprobs == 1


def test_echo_and_tokenize_refusals_name_the_field():
    with pytest.raises(InvalidParameterError) as caught:
        GenerateRequest("g", messages=[{"role": "user", "content": "hi"}], echo=True)
    assert caught.value.parameter == "echo"
    with pytest.raises(InvalidParameterError) as caught:
        TokenizeRequest("t", prompt="a", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.parameter == "prompt"
    with pytest.raises(InvalidParameterError) as caught:
        DetokenizeRequest("d", [1, -1])
    assert caught.value.parameter == "token_ids"
    with pytest.raises(InvalidParameterError) as caught:
        GenerateRequest("g", prompt="x", sampling_params={"prompt_logprobs": -1})
    assert caught.value.parameter == "prompt_logprobs"
