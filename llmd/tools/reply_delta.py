"""What a reply parser emits: content text, or a piece of a tool call (OpenAI's delta shape).

A call's first piece carries its id and function name; later pieces carry fragments of its
arguments, whose concatenation is the arguments' JSON text.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass


def new_call_id() -> str:
    """A tool call id such as `call_3f2a...` (unique per call)."""
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass(frozen=True)
class ContentDelta:
    """Text of the reply that is not a tool call."""

    text: str


@dataclass(frozen=True)
class ToolCallDelta:
    """A piece of call `index`: the header (id and name) and/or a fragment of its arguments."""

    index: int
    arguments: str = ""
    id: str | None = None
    name: str | None = None

    def to_openai(self) -> dict[str, object]:
        """One entry of a streamed delta's `tool_calls`."""
        function: dict[str, object] = {"arguments": self.arguments}
        entry: dict[str, object] = {"index": self.index}
        if self.id is not None:
            entry["id"] = self.id
            entry["type"] = "function"
        if self.name is not None:
            function = {"name": self.name, **function}
        entry["function"] = function
        return entry


ReplyDelta = ContentDelta | ToolCallDelta
"""One item a parser emits."""


@dataclass(frozen=True)
class ToolCall:
    """A whole call: its id, the function's name and the arguments as JSON text."""

    id: str
    name: str
    arguments: str

    def to_openai(self) -> dict[str, object]:
        """One entry of a message's `tool_calls`."""
        function = {"name": self.name, "arguments": self.arguments}
        return {"id": self.id, "type": "function", "function": function}


@dataclass(frozen=True)
class ParsedReply:
    """A whole reply: its content (None when there is none) and its tool calls, in order."""

    content: str | None
    tool_calls: tuple[ToolCall, ...]


def assemble(deltas: list[ReplyDelta]) -> ParsedReply:
    """The reply the deltas spell: content joined, each call's fragments joined in order."""
    texts: list[str] = []
    headers: dict[int, tuple[str, str]] = {}
    arguments: dict[int, list[str]] = {}
    for delta in deltas:
        if isinstance(delta, ContentDelta):
            texts.append(delta.text)
            continue
        if delta.id is not None and delta.name is not None:
            headers[delta.index] = (delta.id, delta.name)
        arguments.setdefault(delta.index, []).append(delta.arguments)
    calls = tuple(
        ToolCall(headers[index][0], headers[index][1], "".join(arguments.get(index, [])))
        for index in sorted(headers)
    )
    content = "".join(texts)
    return ParsedReply(content or None, calls)
