"""Parsers of replies the grammar forced to be calls: `tool_choice` required or a named tool.

`required` constrains the reply to a JSON array of `{"name", "arguments"}` objects;
a named tool constrains it to that tool's arguments object alone. Neither has content.
"""

from __future__ import annotations

from llmd.tools.pending_call import PendingCall
from llmd.tools.reply_delta import ToolCallDelta, new_call_id
from llmd.tools.reply_parser import ReplyParser


class CallArrayParser(ReplyParser):
    """`[{"name": ..., "arguments": {...}}, ...]`: each object one call."""

    def __init__(self, is_streaming: bool = True, tool_names: frozenset[str] | None = None) -> None:
        super().__init__(is_streaming, tool_names)
        self._is_open = False
        self._is_closed = False
        self._call: PendingCall | None = None
        self._raw_text: list[str] = []
        """What no call took: shown as content if the reply was not an array of calls."""

    def _feed(self, text: str) -> None:
        while text:
            if self._call is not None:
                num_read = self._feed_call(self._call, text)
                text = text[num_read:]
                if self._call.is_over:
                    self._end_call(self._call)
                continue
            char, text = text[0], text[1:]
            if char in " \t\r\n" or self._is_closed:
                continue
            if not self._is_open and char == "[":
                self._is_open = True
            elif self._is_open and char == "{":
                self._call = self._new_call()
                self._feed_call(self._call, char)
            elif self._is_open and char == "]":
                self._is_closed = True
            elif not (self._is_open and char == ","):
                self._raw_text.append(char)

    def _end_call(self, call: PendingCall) -> None:
        self._call = None
        raw = self._close_call(call)
        if raw is not None:
            self._raw_text.append(raw)

    def _finish(self) -> None:
        if self._call is not None:
            self._end_call(self._call)
        if self.num_sent_calls == 0:
            self._content("".join(self._raw_text))


class NamedCallParser(ReplyParser):
    """The whole reply is the arguments of the one function `name`."""

    def __init__(self, name: str, is_streaming: bool = True) -> None:
        super().__init__(is_streaming)
        self.name = name
        self.call_id = new_call_id()
        self._arguments: list[str] = []

    def _feed(self, text: str) -> None:
        if not self.is_streaming:
            self._arguments.append(text)
            return
        if self.num_calls == 0:
            self.num_calls = self.num_sent_calls = 1
            self._emit(ToolCallDelta(0, text, self.call_id, self.name))
        elif text:
            self._emit(ToolCallDelta(0, text))

    def _finish(self) -> None:
        if self.num_calls == 0:
            self.num_calls = self.num_sent_calls = 1
            self._emit(ToolCallDelta(0, "".join(self._arguments), self.call_id, self.name))
