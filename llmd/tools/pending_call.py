"""`PendingCall`: one tool call being read, and when its deltas may go out.

Streaming sends the header once the name is known and then every argument fragment, so a
client sees the call grow; a whole reply holds the call until it is complete and its
arguments parse, and a call that fails to parse goes back to the reply as plain text.
"""

from __future__ import annotations

import json

from llmd.tools.call_object_parser import CallObjectParser
from llmd.tools.reply_delta import ReplyDelta, ToolCallDelta, new_call_id


class PendingCall:
    """Call number `index` of a reply, fed the text after its opening (tag or bracket)."""

    def __init__(
        self,
        index: int,
        argument_keys: tuple[str, ...],
        is_streaming: bool,
        tool_names: frozenset[str] | None = None,
    ) -> None:
        self.index = index
        self.is_streaming = is_streaming
        self.tool_names = tool_names
        self.id = new_call_id()
        self.parser = CallObjectParser(argument_keys)
        self.raw_chars: list[str] = []
        """Every character fed so far (what a failed call gives back as content)."""
        self.arguments: list[str] = []
        self.is_header_sent = False

    @property
    def is_over(self) -> bool:
        """True once the object closed or failed: the framing reads what follows."""
        return self.parser.is_done or self.parser.is_failed

    def feed(self, text: str, out: list[ReplyDelta]) -> int:
        """Read `text` up to the object's end; streamed deltas go to `out`; chars consumed."""
        num_read = self.parser.feed(text)
        self.raw_chars.append(text[:num_read])
        fragment = self.parser.take_fragments()
        if fragment:
            self.arguments.append(fragment)
        if self.is_streaming and self.is_offered:  # once the name is read, the call is committed
            if not self.is_header_sent and self.parser.name is not None:
                self.is_header_sent = True
                out.append(
                    ToolCallDelta(self.index, "".join(self.arguments), self.id, self.parser.name)
                )
            elif self.is_header_sent and fragment:
                out.append(ToolCallDelta(self.index, fragment))
        return num_read

    @property
    def is_offered(self) -> bool:
        """False once the name is read and is not one of the tools offered."""
        name = self.parser.name
        return name is None or self.tool_names is None or name in self.tool_names

    def close(self, out: list[ReplyDelta]) -> str | None:
        """End the call (complete, failed or cut off); None, or the raw text to show as content.

        A streamed call whose header went out stays a call whatever follows (it cannot be
        taken back); one that never got that far is content.
        """
        if self.is_streaming:
            if self.is_header_sent:
                if not self.parser.has_arguments:
                    out.append(ToolCallDelta(self.index, "{}"))
                return None
            return "".join(self.raw_chars)
        arguments = "".join(self.arguments) if self.parser.has_arguments else "{}"
        if not self.parser.is_done or not self.is_offered or not _is_json_object(arguments):
            return "".join(self.raw_chars)
        out.append(ToolCallDelta(self.index, arguments, self.id, self.parser.name))
        return None


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False
