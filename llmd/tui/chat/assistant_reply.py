"""A reply from the model: Markdown that grows as tokens stream in, and a stats line below.

Only the app's handlers call into it. Text that arrives while the Markdown widget is still
rendering goes in as one batch after it, so a fast stream never backs up; `finish` shows the
stats only once every batch is rendered, so they never come before the end of the reply.
"""

from __future__ import annotations

import asyncio

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Markdown, Static


class AssistantReply(Vertical):
    """The model's side of an exchange."""

    def __init__(self, reply_number: int) -> None:
        super().__init__(classes="reply")
        self.reply_number = reply_number
        self.text = ""
        """The reply so far, exactly as received (before display clean-up)."""
        self._unwritten: list[str] = []
        """Display text received but not yet handed to the Markdown widget."""
        self._writer: asyncio.Task[None] | None = None
        """Hands `_unwritten` to the Markdown widget batch by batch; done when all is written."""

    def compose(self) -> ComposeResult:
        yield Markdown(classes="reply-body")
        yield Static("waiting for the daemon…", classes="reply-stats", markup=False)

    @property
    def body(self) -> Markdown:
        """The Markdown widget holding the text."""
        return self.query_one(".reply-body", Markdown)

    def append(self, text: str, display_text: str) -> None:
        """Add `text` to the reply; `display_text` is what the screen shows of it."""
        self.text += text
        if not display_text:
            return
        self._unwritten.append(display_text)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_unwritten())

    async def _write_unwritten(self) -> None:
        # Markdown.append returns once the new blocks are mounted (or the last one updated);
        # text that came in meanwhile is picked up by the next pass of the loop.
        while self._unwritten:
            batch = "".join(self._unwritten)
            self._unwritten.clear()
            await self.body.append(batch)

    async def finish(self, stats_line: str) -> None:
        """Wait until the Markdown shows all the text received, then show the final stats."""
        if self._writer is not None:
            await self._writer
            # Rendered once more from the whole text, as new blocks: Textual keeps a block's
            # size from a layout that ran while its last refresh was pending, so text that
            # landed before that refresh was handled could stay cut off under the stats.
            await self.body.update(self.body.source)
        self.show_status(stats_line)

    def show_status(self, text: str) -> None:
        """Replace the line under the reply."""
        self.query_one(".reply-stats", Static).update(text)

    def on_unmount(self) -> None:
        # A reply cleared off the screen mid-stream has nothing left to render into.
        if self._writer is not None:
            self._writer.cancel()
