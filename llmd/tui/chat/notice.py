"""A note in the conversation that is not part of it: help, settings changes, errors."""

from __future__ import annotations

from textual.widgets import Static

from llmd.errors import user_message


def describe_error(error: BaseException) -> str:
    """What went wrong, in words: no error codes, no internal parameter names."""
    return user_message(error)


class Notice(Static):
    """Plain text in the conversation; `is_error` styles it as a problem."""

    def __init__(self, text: str, is_error: bool = False) -> None:
        super().__init__(text, markup=False, classes="-error" if is_error else "-info")
        self.text = text
