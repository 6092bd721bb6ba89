"""Prompt history for the up and down arrow keys, shell style.

Moving up from a half-typed line keeps that draft, and moving back down past the newest
entry restores it, so browsing the history never loses what was being typed.
"""

from __future__ import annotations

MAX_ENTRIES = 500


class PromptHistory:
    """Submitted prompts, oldest first, with a browsing position."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self.entries: list[str] = []
        self._position: int | None = None
        """Index being shown while browsing; None when editing the draft."""
        self._draft = ""

    def add(self, text: str) -> None:
        """Remember a submitted prompt (not a repeat of the previous one) and stop browsing."""
        if text and (not self.entries or self.entries[-1] != text):
            self.entries.append(text)
            del self.entries[: -self.max_entries]
        self._position = None
        self._draft = ""

    def previous(self, current_text: str) -> str | None:
        """The entry before the one shown (None at the oldest); the first call saves the draft."""
        if not self.entries:
            return None
        if self._position is None:
            self._draft = current_text
            self._position = len(self.entries)
        if self._position == 0:
            return None
        self._position -= 1
        return self.entries[self._position]

    def next(self) -> str | None:
        """The entry after the one shown, the saved draft after the newest, None when editing."""
        if self._position is None:
            return None
        self._position += 1
        if self._position >= len(self.entries):
            self._position = None
            return self._draft
        return self.entries[self._position]
