"""`ReplyParser`: the base of every tool-call parser, fed a reply's text deltas in order.

Each model family frames its calls differently (tags, bare JSON, a forced array), but all
share the content rules written here: whitespace at the end of what was read is held back
until more text follows, and dropped when a call or the end follows a call; so a whole
reply and any split of it into deltas give the same content and calls.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from llmd.tools.pending_call import PendingCall
from llmd.tools.reply_delta import ContentDelta, ParsedReply, ReplyDelta, assemble


class ReplyParser(ABC):
    """Turns a reply's text, delta by delta, into content and tool-call deltas."""

    ARGUMENT_KEYS: tuple[str, ...] = ("arguments",)
    """The keys a call object's arguments may come under."""

    def __init__(self, is_streaming: bool = True, tool_names: frozenset[str] | None = None) -> None:
        self.is_streaming = is_streaming
        self.tool_names = tool_names
        """The functions a call may name (None: any); a call to another one is content, so
        a JSON reply that merely has a "name" key is not taken for a call."""
        self.num_calls = 0
        """Calls begun so far (the next call's index)."""
        self.num_sent_calls = 0
        """Calls that went out as calls (a failed one goes back to content)."""
        self._pending_space = ""
        self._out: list[ReplyDelta] = []

    def feed(self, text: str) -> list[ReplyDelta]:
        """The deltas `text` completes (possibly none: a tag may be half written)."""
        self._feed(text)
        return self._take()

    def finish(self) -> list[ReplyDelta]:
        """The last deltas, once the reply ended (held-back text, a cut-off call)."""
        self._finish()
        if self._pending_space and self.num_sent_calls == 0:
            self._out.append(ContentDelta(self._pending_space))
        self._pending_space = ""
        return self._take()

    def parse(self, text: str) -> ParsedReply:
        """A whole reply at once."""
        return assemble([*self.feed(text), *self.finish()])

    @abstractmethod
    def _feed(self, text: str) -> None:
        """Read `text`; emit through `_content`, `_new_call` and `_close_call`."""

    @abstractmethod
    def _finish(self) -> None:
        """Flush what `_feed` held back."""

    def _content(self, text: str) -> None:
        if not text:
            return
        stripped = text.rstrip()
        if not stripped:
            self._pending_space += text
            return
        self._out.append(ContentDelta(self._pending_space + stripped))
        self._pending_space = text[len(stripped) :]

    def _new_call(self) -> PendingCall:
        call = PendingCall(self.num_calls, self.ARGUMENT_KEYS, self.is_streaming, self.tool_names)
        self.num_calls += 1
        return call

    def _feed_call(self, call: PendingCall, text: str) -> int:
        return call.feed(text, self._out)

    def _close_call(self, call: PendingCall) -> str | None:
        """End `call`; its raw text when it failed (the caller decides how to show it)."""
        raw = call.close(self._out)
        if raw is None:
            self.num_sent_calls += 1
            self._pending_space = ""  # the blanks before a call are not content
        else:
            self.num_calls = call.index  # a failed call gives its index back
        return raw

    def _emit(self, delta: ReplyDelta) -> None:
        self._out.append(delta)

    def _take(self) -> list[ReplyDelta]:
        out, self._out = self._out, []
        return out
