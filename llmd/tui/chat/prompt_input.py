"""The prompt line: an Input that browses the prompt history with the up and down keys."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.widgets import Input

from llmd.tui.chat.history import PromptHistory


class PromptInput(Input):
    """Single-line prompt entry with shell-style history."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "history_previous", "Previous prompt", show=False),
        Binding("down", "history_next", "Next prompt", show=False),
    ]

    def __init__(self, history: PromptHistory, **kwargs) -> None:
        super().__init__(**kwargs)
        self.history = history

    def action_history_previous(self) -> None:
        """Show the previous prompt (the draft is kept)."""
        text = self.history.previous(self.value)
        if text is not None:
            self.value = text
            self.cursor_position = len(text)

    def action_history_next(self) -> None:
        """Show the next prompt, or the draft after the newest."""
        text = self.history.next()
        if text is not None:
            self.value = text
            self.cursor_position = len(text)
