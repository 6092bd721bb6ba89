"""The prompt box: multi-line text, Enter sends, Shift+Enter or Ctrl+J adds a line.

A pasted block keeps its line breaks. Up and Down browse the prompt history when the
cursor is on the first or last line, and move between lines otherwise.
"""

from __future__ import annotations

from typing import Any, ClassVar

from textual import events
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import TextArea

from llmd.tui.chat.history import PromptHistory

NEWLINE_KEYS = ("shift+enter", "ctrl+j")
"""Keys that insert a line break instead of sending (terminals differ in what they send)."""


class PromptInput(TextArea):
    """Multi-line prompt entry with shell-style history."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "history_previous", "Previous prompt", show=False),
        Binding("down", "history_next", "Next prompt", show=False),
    ]

    class Submitted(Message):
        """Enter was pressed: `value` is the prompt text."""

        def __init__(self, prompt_input: PromptInput, value: str) -> None:
            super().__init__()
            self.input = prompt_input
            self.value = value

    def __init__(self, history: PromptHistory, placeholder: str = "", **kwargs: Any) -> None:
        super().__init__(
            placeholder=placeholder, show_line_numbers=False, soft_wrap=True, compact=True, **kwargs
        )
        self.prompt_history = history

    @property
    def value(self) -> str:
        """The text in the box."""
        return self.text

    @value.setter
    def value(self, text: str) -> None:
        self.load_text(text)
        self.move_cursor(self.document.end)

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            await self.action_submit()
            return
        if event.key in NEWLINE_KEYS:
            event.stop()
            event.prevent_default()
            start, end = self.selection
            self._replace_via_keyboard("\n", start, end)
            return
        await super()._on_key(event)

    async def action_submit(self) -> None:
        """Send the text to the app (which clears the box once it takes the prompt)."""
        self.post_message(self.Submitted(self, self.text))

    def action_history_previous(self) -> None:
        """On the first line: show the previous prompt (the draft is kept); else move up."""
        if not self.cursor_at_first_line:
            self.action_cursor_up()
            return
        text = self.prompt_history.previous(self.value)
        if text is not None:
            self.value = text

    def action_history_next(self) -> None:
        """On the last line: show the next prompt, or the draft after the newest; else down."""
        if not self.cursor_at_last_line:
            self.action_cursor_down()
            return
        text = self.prompt_history.next()
        if text is not None:
            self.value = text
