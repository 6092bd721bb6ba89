"""Nested frozen dataclasses that travel as plain maps: the typed sections of a snapshot.

A message's fields are checked strictly (`WireMessage`); a snapshot section is read
leniently where that keeps old clients working against a newer daemon (a key it does not
know is ignored) and strictly where a value could mislead (a missing or mistyped field
raises InvalidParameterError naming its dotted path, such as `kv.num_used`).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, Union

from llmd.errors import InvalidParameterError
from llmd.protocol.schema import check_value, describe, field_hints, is_required

DataT = TypeVar("DataT", bound="WireData")
"""A section class (what `from_wire` builds)."""


Reader = Callable[[object, str], Any]
"""Reads one value of one annotation; the name is only formatted into an error."""
_LEAVES = (float, int, str, bool)


class WireData:
    """Mixin for frozen dataclasses carried as maps inside a message (not messages themselves)."""

    def to_wire(self) -> dict[str, object]:
        """The plain map: nested sections become maps, tuples become lists."""
        return {
            field.name: plain(getattr(self, field.name))
            for field in dataclasses.fields(self)  # type: ignore[arg-type]
        }

    @classmethod
    def from_wire(cls: type[DataT], data: Mapping[str, object], path: str = "") -> DataT:
        """Build from a decoded map, ignoring unknown keys; bad or missing fields raise."""
        kwargs: dict[str, object] = {}
        for field_name, read, is_field_required in _fields_of(cls):
            if field_name in data:
                kwargs[field_name] = read(data[field_name], path + field_name)
            elif is_field_required:
                raise InvalidParameterError(f"missing in a {cls.__name__}", path + field_name)
        return cls(**kwargs)


_FIELDS: dict[type, tuple[tuple[str, Reader, bool], ...]] = {}
"""Per section class: each field's name, reader and whether it is required; built once."""


def _fields_of(cls: type) -> tuple[tuple[str, Reader, bool], ...]:
    fields = _FIELDS.get(cls)
    if fields is None:
        hints = field_hints(cls)
        fields = _FIELDS[cls] = tuple(
            (field.name, _reader(hints[field.name]), is_required(field))
            for field in dataclasses.fields(cls)
        )
    return fields


def plain(value: object) -> object:
    """`value` as msgpack-able plain data (sections with a `to_wire` or `to_dict` as maps)."""
    if value is None or type(value) in _LEAVES:
        return value
    if isinstance(value, (tuple, list)):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    to_wire = getattr(value, "to_wire", None) or getattr(value, "to_dict", None)
    return value if to_wire is None else to_wire()


def convert(value: object, hint: object, name: str) -> Any:
    """`value` read as `hint`: sections from maps, tuples from lists; raises naming `name`."""
    return _reader(hint)(value, name)


_READERS: dict[object, Reader] = {}
"""One reader per annotation, built once: a snapshot is read many times a second."""


def _reader(hint: object) -> Reader:
    reader = _READERS.get(hint)
    if reader is None:
        reader = _READERS[hint] = _build_reader(hint)
    return reader


def _build_reader(hint: object) -> Reader:
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        return _union_reader(hint)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return lambda value, name: _section(value, hint, name)
    if origin is tuple:
        return _tuple_reader(typing.get_args(hint))
    if origin is dict:
        item = _reader(typing.get_args(hint)[1])

        def read_map(value: object, name: str) -> dict[str, object]:
            if not isinstance(value, dict):
                raise InvalidParameterError(f"must be a map, got {type(value).__name__}", name)
            out = {}
            for key, entry in value.items():
                if isinstance(key, str):
                    out[key] = _within(item, entry, name, key)
            return out

        return read_map
    if hint is float:  # the commonest leaf: take floats as they are, widen ints
        return lambda value, name: value if type(value) is float else check_value(value, hint, name)
    if hint in (int, str, bool):
        return lambda value, name: value if type(value) is hint else check_value(value, hint, name)
    return lambda value, name: check_value(value, hint, name)


def _union_reader(hint: object) -> Reader:
    options = typing.get_args(hint)
    is_nullable = type(None) in options
    others = [_reader(option) for option in options if option is not type(None)]

    def read_union(value: object, name: str) -> object:
        if value is None and is_nullable:
            return None
        if len(others) == 1:  # X | None: X's own error names the field inside it
            return others[0](value, name)
        for other in others:
            try:
                return other(value, name)
            except InvalidParameterError:
                continue
        raise InvalidParameterError(f"must be {_describe(hint)}", name)

    return read_union


def _tuple_reader(item_hints: tuple[object, ...]) -> Reader:
    is_variadic = len(item_hints) == 2 and item_hints[1] is Ellipsis
    items = [_reader(item_hint) for item_hint in item_hints[: 1 if is_variadic else None]]
    leaf = item_hints[0] if is_variadic and item_hints[0] in _LEAVES else None

    def read_tuple(value: object, name: str) -> tuple[object, ...]:
        if not isinstance(value, (list, tuple)):
            raise InvalidParameterError(f"must be a list, got {type(value).__name__}", name)
        if is_variadic:
            if leaf is not None and all(type(entry) is leaf for entry in value):
                return tuple(value)  # a histogram's bounds and counts: checked at C speed
            item = items[0]
            return tuple([_within(item, entry, name, i) for i, entry in enumerate(value)])
        if len(value) != len(items):
            raise InvalidParameterError(f"must be a list of {len(items)} values", name)
        pairs = enumerate(zip(items, value))
        return tuple([_within(item, entry, name, i) for i, (item, entry) in pairs])

    return read_tuple


def _within(read: Reader, value: object, name: str, key: int | str) -> object:
    """`read(value)` for the item `key` of `name`; only an error formats the item's path."""
    try:
        return read(value, name)
    except InvalidParameterError as error:
        inner = error.parameter or name
        item = f"[{key}]" if isinstance(key, int) else f".{key}"
        raise InvalidParameterError(error.message, name + item + inner[len(name) :]) from None


def _section(value: object, cls: type, name: str) -> object:
    """A nested section: a WireData (or a dataclass with `from_dict`) from its map."""
    if isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise InvalidParameterError(f"must be a map, got {type(value).__name__}", name)
    if issubclass(cls, WireData):
        return cls.from_wire(value, f"{name}.")
    section = cls.from_dict(value)  # type: ignore[attr-defined]
    if section is None:
        raise InvalidParameterError(f"is not a valid {cls.__name__}", name)
    return section


def _describe(hint: object) -> str:
    """A union's wording, with tuples (lists on the wire) that `describe` does not know."""
    return " or ".join(
        "a list" if typing.get_origin(option) is tuple else describe(option)
        for option in typing.get_args(hint)
    )
