"""The shared bases of the wire messages: the id each carries first, checked once for all.

ClientRequest and Reply declare `id` for every message that has one, so these tests walk
every message type rather than the few whose own tests happen to mention the id.
"""

from __future__ import annotations

import dataclasses

import pytest

from llmd.errors import InvalidParameterError
from llmd.protocol import CLIENT_MESSAGE_TYPES, DAEMON_MESSAGE_TYPES, ErrorReply, Keepalive
from llmd.protocol.client_messages import ClientRequest
from llmd.protocol.daemon_messages import Reply

# The wire order written out by hand: "id" first, then each message's own fields.
FIELD_ORDER = {
    "abort": ["id"],
    "unsubscribe": ["id"],
    "subscribe": [
        "id",
        "include_requests",
        "include_block_map",
        "timeline_request_id",
        "max_requests",
        "interval_ms",
    ],
    "prefill_progress": ["id", "num_computed_tokens", "num_prompt_tokens"],
    "ack": ["id", "message"],
}


@pytest.mark.parametrize("message_type", sorted(CLIENT_MESSAGE_TYPES))
@pytest.mark.parametrize("bad_id", ["", "x" * 129])
def test_every_client_message_refuses_a_bad_id(message_type, bad_id):
    message_class = CLIENT_MESSAGE_TYPES[message_type]
    assert issubclass(message_class, ClientRequest)
    extra = {"prompt": "p"} if message_type in ("generate", "tokenize") else {}
    if message_type == "detokenize":
        extra = {"token_ids": [1]}
    with pytest.raises(InvalidParameterError) as error:
        message_class(bad_id, **extra)
    assert error.value.parameter == "id"


def test_every_reply_but_error_and_keepalive_carries_a_string_id_first():
    replies = {cls for cls in DAEMON_MESSAGE_TYPES.values() if issubclass(cls, Reply)}
    assert set(DAEMON_MESSAGE_TYPES.values()) - replies == {ErrorReply, Keepalive}
    for reply in replies:
        assert dataclasses.fields(reply)[0].name == "id"


@pytest.mark.parametrize("message_type", sorted(FIELD_ORDER))
def test_field_order_on_the_wire_is_unchanged(message_type):
    types = CLIENT_MESSAGE_TYPES | DAEMON_MESSAGE_TYPES
    names = [field.name for field in dataclasses.fields(types[message_type])]
    assert names == FIELD_ORDER[message_type]
