"""A prompt the user sent, shown as Markdown in the conversation."""

from __future__ import annotations

from textual.widgets import Markdown


class UserMessage(Markdown):
    """The user's side of an exchange."""
