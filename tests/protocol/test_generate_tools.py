"""`generate` with chat tools: tool turns in `messages`, the `tools` field and its absence."""

from __future__ import annotations

import msgpack
import pytest

from llmd.errors import InvalidParameterError
from llmd.protocol import GenerateRequest, decode_client_message, encode

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
HISTORY = [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]},
    {"role": "tool", "content": "42", "tool_call_id": "c1", "name": "f"},
]  # fmt: skip


def test_tools_travel_and_come_back_equal():
    message = GenerateRequest(id="x", messages=HISTORY, tools=TOOLS)
    decoded = decode_client_message(encode(message))
    assert decoded == message and decoded.tools == TOOLS and decoded.messages == HISTORY


def test_no_tools_leaves_the_field_off_the_wire():
    plain = msgpack.unpackb(encode(GenerateRequest(id="x", messages=HISTORY[:1])))
    assert "tools" not in plain
    assert "tools" in msgpack.unpackb(
        encode(GenerateRequest(id="x", messages=HISTORY, tools=TOOLS))
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"prompt": "p", "tools": TOOLS},  # tools without messages
        {"messages": [{"role": "user", "content": 5}]},
        {"messages": [{"role": "assistant", "content": "", "tool_calls": "f()"}]},
        {"messages": [{"role": "assistant", "content": "", "tool_calls": ["f"]}]},
    ],
)
def test_bad_tool_fields_are_refused(fields):
    with pytest.raises(InvalidParameterError) as error:
        GenerateRequest(id="x", **fields)
    assert error.value.parameter in ("tools", "messages")
