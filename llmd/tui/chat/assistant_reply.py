"""A reply from the model: Markdown that grows as tokens stream in, and a stats line below.

Only the app's handlers call into it; the Markdown stream batches fragments that arrive
faster than the widget can re-render them.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Markdown, Static
from textual.widgets.markdown import MarkdownStream


class AssistantReply(Vertical):
    """The model's side of an exchange."""

    def __init__(self, reply_number: int) -> None:
        super().__init__(classes="reply")
        self.reply_number = reply_number
        self.text = ""
        """The reply so far, exactly as received (before display clean-up)."""
        self._stream: MarkdownStream | None = None

    def compose(self) -> ComposeResult:
        yield Markdown(classes="reply-body")
        yield Static("waiting for the daemon…", classes="reply-stats", markup=False)

    @property
    def body(self) -> Markdown:
        """The Markdown widget holding the text."""
        return self.query_one(".reply-body", Markdown)

    async def append(self, text: str, display_text: str) -> None:
        """Add `text` to the reply; `display_text` is what the screen shows of it."""
        self.text += text
        if self._stream is None:
            self._stream = Markdown.get_stream(self.body)
        await self._stream.write(display_text)

    async def finish(self, stats_line: str) -> None:
        """Flush the stream and show the final stats."""
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None
        self.show_status(stats_line)

    def show_status(self, text: str) -> None:
        """Replace the line under the reply."""
        self.query_one(".reply-stats", Static).update(text)
