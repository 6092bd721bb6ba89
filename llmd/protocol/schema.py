"""The base of every wire message: a frozen dataclass whose annotations are its schema.

Field types are checked both when a message is built in Python and when it is parsed from
the wire, so a peer's mistake always comes back as a typed error naming the field, and a
message can never carry a value its annotation does not allow.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar, Union

from llmd.errors import InvalidParameterError
from llmd.protocol.errors import ProtocolError

PROTOCOL_VERSION = 1
"""Bumped whenever a message changes incompatibly; both ends refuse other versions."""
ENVELOPE_FIELDS = ("type", "v")

MessageT = TypeVar("MessageT", bound="WireMessage")
"""A message class, or a union of them (what a table of `parse_message` holds)."""

class WireMessage:
    """Mixin for frozen dataclasses that travel as {"type": TYPE, "v": 1, **fields}."""

    TYPE: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for name, hint in field_hints(type(self)).items():
            value = getattr(self, name)
            checked = check_value(value, hint, name)
            if checked is not value:
                object.__setattr__(self, name, checked)
        self.validate()

    def validate(self) -> None:
        """Checks that span fields or ranges; subclasses raise InvalidParameterError."""

    def to_wire(self) -> dict[str, object]:
        """The plain dict that is msgpack-encoded."""
        data: dict[str, object] = {"type": self.TYPE, "v": PROTOCOL_VERSION}
        for field in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, field.name)
            to_wire = getattr(value, "to_wire", None)  # a WireData section
            data[field.name] = value if to_wire is None else to_wire()
        return data

    @classmethod
    def from_wire(
        cls: type[MessageT], data: Mapping[str, object], is_strict: bool = True
    ) -> MessageT:
        """Build from a decoded map; missing or mistyped fields raise typed errors.

        Unknown fields raise too when `is_strict` (what the daemon reads: a misspelt
        option must not be ignored); clients read leniently, so that a newer daemon may
        add a field to a reply without breaking them.
        """
        check_envelope(data, cls.TYPE)
        hints = field_hints(cls)
        unknown = sorted(set(data) - set(hints) - set(ENVELOPE_FIELDS))
        if unknown and is_strict:
            raise InvalidParameterError(f"unknown field in a {cls.TYPE} message", unknown[0])
        kwargs: dict[str, object] = {}
        for field in dataclasses.fields(cls):  # type: ignore[arg-type]
            if field.name in data:
                kwargs[field.name] = data[field.name]
            elif is_required(field):
                raise InvalidParameterError(f"missing in a {cls.TYPE} message", field.name)
        return cls(**kwargs)


def message_types(union: object) -> dict[str, type[WireMessage]]:
    """The classes of a union of messages keyed by TYPE: a decoder's lookup table.

    Derived from the union so that the type alias and the table cannot list different
    messages.
    """
    return {cls.TYPE: cls for cls in typing.get_args(union)}


def check_envelope(data: Mapping[str, object], expected_type: str | None = None) -> str:
    """Validate "type" and "v" and return the type; raises ProtocolError."""
    message_type = data.get("type")
    if not isinstance(message_type, str):
        raise ProtocolError("a message needs a string 'type'", "type")
    if expected_type is not None and message_type != expected_type:
        raise ProtocolError(f"expected a {expected_type} message, got {message_type}", "type")
    version = data.get("v")
    if version != PROTOCOL_VERSION or isinstance(version, bool):
        raise ProtocolError(
            f"protocol version {version!r} is not supported (this end speaks {PROTOCOL_VERSION})",
            "v",
        )
    return message_type


def is_required(field: dataclasses.Field[object]) -> bool:
    """True for a dataclass field with neither a default nor a default factory."""
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


_HINTS_BY_CLASS: dict[type, dict[str, object]] = {}
"""Each message class's field annotations, resolved once (get_type_hints is slow)."""


def field_hints(cls: type) -> dict[str, object]:
    """A dataclass's resolved field annotations by name, cached per class."""
    field_hints = _HINTS_BY_CLASS.get(cls)
    if field_hints is None:
        hints = typing.get_type_hints(cls)
        field_hints = {field.name: hints[field.name] for field in dataclasses.fields(cls)}
        _HINTS_BY_CLASS[cls] = field_hints
    return field_hints


def check_value(value: object, hint: object, name: str) -> object:
    """Return `value` (ints widened to float where a float is due) or raise naming `name`."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint) and isinstance(value, dict):
        return hint.from_wire(value, f"{name}.")  # type: ignore[attr-defined]
    ok, checked = _conform(value, hint)
    if not ok:
        raise InvalidParameterError(f"must be {describe(hint)}, got {_describe_value(value)}", name)
    return checked


def _conform(value: object, hint: object) -> tuple[bool, object]:
    if hint is Any or hint is object:
        return True, value
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):  # a WireData section
        return isinstance(value, hint), value  # its map form is read by check_value
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        for option in typing.get_args(hint):
            ok, checked = _conform(value, option)
            if ok:
                return True, checked
        return False, value
    if hint is type(None):
        return value is None, value
    if hint is bool:
        return isinstance(value, bool), value
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False, value
        return True, float(value) if isinstance(value, int) else value
    if hint is str:
        return isinstance(value, str), value
    if origin is list:
        if not isinstance(value, list):
            return False, value
        (item_hint,) = typing.get_args(hint)
        items: list[object] = []
        for item in value:
            ok, checked = _conform(item, item_hint)
            if not ok:
                return False, value
            items.append(checked)
        return True, items if any(a is not b for a, b in zip(items, value)) else value
    if origin is dict or typing.is_typeddict(hint):
        if not isinstance(value, dict):
            return False, value
        # A TypedDict's keys are not checked here, as before it was one: a plain map.
        _, value_hint = typing.get_args(hint) if origin is dict else (str, object)
        for key, item in value.items():
            if not isinstance(key, str) or not _conform(item, value_hint)[0]:
                return False, value
        return True, value
    raise TypeError(f"unsupported wire annotation {hint!r}")  # a bug in a message class


def describe(hint: object) -> str:
    """Human wording of an annotation: 'a list of integers', 'a string or null'."""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        return " or ".join(describe(option) for option in typing.get_args(hint))
    if origin is list:
        return f"a list of {_plural(typing.get_args(hint)[0])}"
    if origin is dict:
        return f"a map of {_plural(typing.get_args(hint)[1])}"
    if typing.is_typeddict(hint):
        return f"a map of {_plural(object)}"
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return "a map"
    names: dict[object, str] = {
        str: "a string", int: "an integer", float: "a number", bool: "a boolean"
    }
    if hint is type(None):
        return "null"
    return names.get(hint, "a value")


def _plural(hint: object) -> str:
    origin = typing.get_origin(hint)
    if origin is list:
        return "lists"
    if origin is dict or typing.is_typeddict(hint):
        return "maps"
    names: dict[object, str] = {str: "strings", int: "integers", float: "numbers", bool: "booleans"}
    return names.get(hint, describe(hint))


def _describe_value(value: object) -> str:
    names: dict[object, str] = {
        bool: "a boolean", int: "an integer", float: "a number", str: "a string"
    }
    if value is None:
        return "null"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a map"
    return names.get(type(value), type(value).__name__)
