"""`JsonValueScanner`: finds where one JSON value ends, a character at a time.

A streamed tool call must know when its arguments end without waiting for the whole reply;
tracking strings, escapes and bracket depth is enough for that (json.loads checks the rest).
"""

from __future__ import annotations

SCALAR_ENDS = frozenset(",}] \t\r\n")
"""Characters that end a number or a literal (and are not part of it)."""


class JsonValueScanner:
    """Consumes the characters of one JSON value, from its first, and says when it is complete."""

    def __init__(self, first: str) -> None:
        self.is_scalar = first not in '{["'
        self.depth = 0
        self.is_in_string = False
        self.is_escaped = False
        self.is_done = False
        self.push(first)

    def push(self, char: str) -> bool:
        """Take `char`; False when it is not part of the value (it ended a scalar before it)."""
        if self.is_scalar:
            if char in SCALAR_ENDS:
                self.is_done = True
                return False
            return True
        if self.is_in_string:
            if self.is_escaped:
                self.is_escaped = False
            elif char == "\\":
                self.is_escaped = True
            elif char == '"':
                self.is_in_string = False
                self.is_done = self.depth == 0
            return True
        if char == '"':
            self.is_in_string = True
        elif char in "{[":
            self.depth += 1
        elif char in "}]":
            self.depth -= 1
            self.is_done = self.depth <= 0
        return True
