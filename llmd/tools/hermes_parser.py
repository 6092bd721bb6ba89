"""`HermesParser`: calls written as `<tool_call>{"name": ..., "arguments": ...}</tool_call>`.

The format of Hermes-style chat templates (Qwen2.5, Qwen3 and the fallback system prompt);
text around the tags is content, and a half-written tag is held back, never leaked.
"""

from __future__ import annotations

from enum import Enum, auto

from llmd.tools.pending_call import PendingCall
from llmd.tools.reply_parser import ReplyParser

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"


class _Where(Enum):
    TEXT = auto()
    CALL = auto()
    AFTER_CALL = auto()
    """The object closed: whitespace, then the closing tag (anything else is content)."""
    SKIP_CALL = auto()
    """A streamed call broke after its header went out: its rest, to the closing tag, is
    dropped (the tag text never reaches the content)."""


class HermesParser(ReplyParser):
    """Content, and calls in `<tool_call>` tags."""

    def __init__(self, is_streaming: bool = True, tool_names: frozenset[str] | None = None) -> None:
        super().__init__(is_streaming, tool_names)
        self._where = _Where.TEXT
        self._buffer = ""
        self._call: PendingCall | None = None

    def _feed(self, text: str) -> None:
        self._buffer += text
        while self._buffer:
            if self._where is _Where.TEXT:
                if not self._read_text():
                    return
            elif self._where is _Where.CALL:
                self._read_call()
            elif self._where is _Where.SKIP_CALL:
                if not self._skip_call():
                    return
            elif not self._read_after_call():
                return

    def _read_text(self) -> bool:
        """Content up to an opening tag; False when the rest must wait for more text."""
        position = self._buffer.find(OPEN_TAG)
        if position < 0:
            keep = _partial_tag_length(self._buffer, OPEN_TAG)
            self._content(self._buffer[: len(self._buffer) - keep])
            self._buffer = self._buffer[len(self._buffer) - keep :]
            return False
        self._content(self._buffer[:position])
        self._buffer = self._buffer[position + len(OPEN_TAG) :]
        self._call = self._new_call()
        self._where = _Where.CALL
        return True

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
            self._where = _Where.SKIP_CALL if call.parser.is_failed else _Where.AFTER_CALL
            return
        self._content(OPEN_TAG + raw)  # not a call after all: the text as it was written
        self._where = _Where.TEXT

    def _read_after_call(self) -> bool:
        stripped = self._buffer.lstrip()
        if not stripped:
            self._buffer = ""
            return False
        if stripped.startswith(CLOSE_TAG):
            self._buffer = stripped[len(CLOSE_TAG) :]
            self._where = _Where.TEXT
            return True
        if CLOSE_TAG.startswith(stripped):
            self._buffer = stripped
            return False
        self._where = _Where.TEXT  # no closing tag: what follows is content
        self._buffer = stripped
        return True

    def _skip_call(self) -> bool:
        position = self._buffer.find(CLOSE_TAG)
        if position < 0:
            keep = _partial_tag_length(self._buffer, CLOSE_TAG)
            self._buffer = self._buffer[len(self._buffer) - keep :]
            return False
        self._buffer = self._buffer[position + len(CLOSE_TAG) :]
        self._where = _Where.TEXT
        return True

    def _finish(self) -> None:
        if self._call is not None:
            self._end_call(self._call)
        if self._where is _Where.TEXT:
            self._content(self._buffer)
        self._buffer = ""


def _partial_tag_length(text: str, tag: str) -> int:
    """Length of the longest end of `text` that begins `tag` (held back: it may be the tag)."""
    for length in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-length:]):
            return length
    return 0
