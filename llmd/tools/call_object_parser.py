"""`CallObjectParser`: reads one `{"name": ..., "arguments": {...}}` object as it streams in.

The name is known as soon as its string closes and the arguments' text is handed out as it
arrives, so a streamed call can send its header and argument fragments before it is whole.
"""

from __future__ import annotations

import json
from enum import Enum, auto

from llmd.tools.json_value_scanner import JsonValueScanner

WHITESPACE = frozenset(" \t\r\n")


class _State(Enum):
    START = auto()
    KEY_OR_END = auto()
    KEY_START = auto()
    KEY = auto()
    COLON = auto()
    VALUE_START = auto()
    VALUE = auto()
    AFTER_VALUE = auto()
    DONE = auto()
    FAILED = auto()


class CallObjectParser:
    """One call object: `name` (a string) and the arguments under one of `argument_keys`.

    Arguments given as a JSON string (some models quote them) are unquoted when whole;
    other keys are skipped. Anything that is not such an object fails the parser.
    """

    def __init__(self, argument_keys: tuple[str, ...]) -> None:
        self.argument_keys = argument_keys
        self.name: str | None = None
        self.has_arguments = False
        self._state = _State.START
        self._key_chars: list[str] = []
        self._key: str | None = None
        self._is_key_escaped = False
        self._value: JsonValueScanner | None = None
        self._value_chars: list[str] = []
        self._fragments: list[str] = []

    @property
    def is_done(self) -> bool:
        """True once the object closed with a name."""
        return self._state is _State.DONE

    @property
    def is_failed(self) -> bool:
        """True once the text can no longer be a call object."""
        return self._state is _State.FAILED

    def feed(self, text: str) -> int:
        """Consume `text` up to the object's end (or failure); the number of characters read."""
        for position, char in enumerate(text):
            self._push(char)
            if self._state in (_State.DONE, _State.FAILED):
                return position + 1
        return len(text)

    def take_fragments(self) -> str:
        """The arguments' text that arrived since the last call."""
        text = "".join(self._fragments)
        self._fragments.clear()
        return text

    def _push(self, char: str) -> None:
        state = self._state
        if state is _State.VALUE:
            assert self._value is not None
            if self._value.push(char):
                self._on_value_char(char)
                if self._value.is_done:
                    self._end_value()
                return
            self._end_value()  # the char ended a scalar: it belongs to what follows
            state = self._state
            if state is _State.FAILED:
                return
        if state is _State.KEY:
            self._on_key_char(char)
        elif char in WHITESPACE and state is not _State.DONE:
            return
        elif state is _State.START:
            self._expect(char == "{", _State.KEY_OR_END)
        elif state is _State.KEY_OR_END:
            if char == "}":
                self._close()
            else:
                self._start_key(char)
        elif state is _State.KEY_START:
            self._start_key(char)
        elif state is _State.COLON:
            self._expect(char == ":", _State.VALUE_START)
        elif state is _State.VALUE_START:
            self._start_value(char)
        elif state is _State.AFTER_VALUE:
            if char == ",":
                self._state = _State.KEY_START
            elif char == "}":
                self._close()
            else:
                self._state = _State.FAILED

    def _expect(self, is_expected: bool, next_state: _State) -> None:
        self._state = next_state if is_expected else _State.FAILED

    def _start_key(self, char: str) -> None:
        self._key_chars = [char]
        self._is_key_escaped = False
        self._expect(char == '"', _State.KEY)

    def _on_key_char(self, char: str) -> None:
        self._key_chars.append(char)
        if self._is_key_escaped:
            self._is_key_escaped = False
        elif char == "\\":
            self._is_key_escaped = True
        elif char == '"':
            try:
                self._key = json.loads("".join(self._key_chars))
            except ValueError:
                self._state = _State.FAILED
                return
            self._state = _State.COLON

    def _start_value(self, char: str) -> None:
        is_arguments = self._key in self.argument_keys
        if (self._key == "name" and self.name is not None) or (is_arguments and self.has_arguments):
            self._state = _State.FAILED  # a repeated name or arguments: ambiguous
            return
        self._value = JsonValueScanner(char)
        self._value_chars = []
        self._state = _State.VALUE
        self._on_value_char(char)
        if self._value.is_done:
            self._end_value()

    def _is_streamed_arguments(self) -> bool:
        """Arguments written as JSON (not as a quoted string) stream as they come."""
        return self._key in self.argument_keys and self._value_chars[:1] != ['"']

    def _on_value_char(self, char: str) -> None:
        self._value_chars.append(char)
        if self._is_streamed_arguments():
            self._fragments.append(char)

    def _end_value(self) -> None:
        key, text = self._key, "".join(self._value_chars)
        self._state = _State.AFTER_VALUE
        if key == "name":
            name = _loads(text)
            if not isinstance(name, str) or not name:
                self._state = _State.FAILED
            self.name = name if isinstance(name, str) else None
        elif key in self.argument_keys:
            self.has_arguments = True
            if text.startswith('"'):
                quoted = _loads(text)
                if not isinstance(quoted, str):
                    self._state = _State.FAILED
                    return
                self._fragments.append(quoted)

    def _close(self) -> None:
        self._state = _State.DONE if self.name is not None else _State.FAILED


def _loads(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return None
