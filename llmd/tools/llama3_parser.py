"""`Llama3Parser`: Llama 3.x's JSON tool calls, `{"name": ..., "parameters": {...}}`.

Llama 3.1-3.3 answer a call with the JSON object alone (after `<|python_tag|>` when special
tokens are kept), several separated by `;`. A reply that does not start with `{` is plain
content; one that starts like a call but is not one is given back as content.
"""

from __future__ import annotations

from enum import Enum, auto

from llmd.tools.pending_call import PendingCall
from llmd.tools.reply_parser import ReplyParser

PYTHON_TAG = "<|python_tag|>"


class _Where(Enum):
    START = auto()
    """Before the first non-blank character: a call or content?"""
    CALL = auto()
    BETWEEN = auto()
    """After a call: blanks and `;`, then another call."""
    TEXT = auto()


class Llama3Parser(ReplyParser):
    """A reply that is one or more JSON calls, or plain content."""

    ARGUMENT_KEYS = ("parameters", "arguments")

    def __init__(self, is_streaming: bool = True, tool_names: frozenset[str] | None = None) -> None:
        super().__init__(is_streaming, tool_names)
        self._where = _Where.START
        self._buffer = ""
        self._call: PendingCall | None = None

    def _feed(self, text: str) -> None:
        self._buffer += text
        while self._buffer:
            if self._where is _Where.START:
                if not self._read_start():
                    return
            elif self._where is _Where.CALL:
                self._read_call()
            elif self._where is _Where.BETWEEN:
                self._read_between()
            else:
                self._content(self._buffer)
                self._buffer = ""

    def _read_start(self) -> bool:
        stripped = self._buffer.lstrip()
        if not stripped or (PYTHON_TAG.startswith(stripped) and stripped != PYTHON_TAG):
            return False  # blanks, or the tag half written: wait
        if stripped.startswith(PYTHON_TAG):
            stripped = stripped[len(PYTHON_TAG) :].lstrip()
            if not stripped:
                self._buffer = PYTHON_TAG
                return False
        if stripped.startswith("{"):
            self._buffer = stripped
            self._start_call()
        else:
            self._where = _Where.TEXT
        return True

    def _start_call(self) -> None:
        self._call = self._new_call()
        self._where = _Where.CALL

    def _read_call(self) -> None:
        call = self._call
        assert call is not None
        num_read = self._feed_call(call, self._buffer)
        self._buffer = self._buffer[num_read:]
        if call.is_over:
            self._end_call(call)

    def _end_call(self, call: PendingCall) -> None:
        self._call = None
        raw = self._close_call(call)
        if raw is None:
            self._where = _Where.BETWEEN
        else:
            self._content(raw)
            self._where = _Where.TEXT

    def _read_between(self) -> None:
        stripped = self._buffer.lstrip(" \t\r\n;")
        self._buffer = stripped
        if stripped.startswith("{"):
            self._start_call()
        elif stripped:
            self._where = _Where.TEXT

    def _finish(self) -> None:
        if self._call is not None:
            self._end_call(self._call)
        if self._where in (_Where.START, _Where.TEXT):
            self._content(self._buffer)
        self._buffer = ""
