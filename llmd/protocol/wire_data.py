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
from collections.abc import Mapping
from typing import Any, TypeVar, Union

from llmd.errors import InvalidParameterError
from llmd.protocol.schema import check_value, describe, field_hints, is_required

DataT = TypeVar("DataT", bound="WireData")
"""A section class (what `from_wire` builds)."""


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
        hints = field_hints(cls)
        kwargs: dict[str, object] = {}
        for field in dataclasses.fields(cls):  # type: ignore[arg-type]
            name = f"{path}{field.name}"
            if field.name in data:
                kwargs[field.name] = convert(data[field.name], hints[field.name], name)
            elif is_required(field):
                raise InvalidParameterError(f"missing in a {cls.__name__}", name)
        return cls(**kwargs)


def plain(value: object) -> object:
    """`value` as msgpack-able plain data (sections with a `to_wire` or `to_dict` as maps)."""
    if isinstance(value, (tuple, list)):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    to_wire = getattr(value, "to_wire", None) or getattr(value, "to_dict", None)
    return value if to_wire is None else to_wire()


def convert(value: object, hint: object, name: str) -> Any:
    """`value` read as `hint`: sections from maps, tuples from lists; raises naming `name`."""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        others = [option for option in options if option is not type(None)]
        if len(others) == 1:  # X | None: X's own error names the field inside it
            return convert(value, others[0], name)
        for option in others:
            try:
                return convert(value, option, name)
            except InvalidParameterError:
                continue
        raise InvalidParameterError(f"must be {_describe(hint)}", name)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _section(value, hint, name)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise InvalidParameterError(f"must be a list, got {type(value).__name__}", name)
        item_hints = typing.get_args(hint)
        if len(item_hints) == 2 and item_hints[1] is Ellipsis:
            item_hint = item_hints[0]
            return tuple(convert(item, item_hint, f"{name}[{i}]") for i, item in enumerate(value))
        if len(value) != len(item_hints):
            raise InvalidParameterError(f"must be a list of {len(item_hints)} values", name)
        return tuple(
            convert(item, item_hint, f"{name}[{i}]")
            for i, (item, item_hint) in enumerate(zip(value, item_hints))
        )
    if origin is dict:
        if not isinstance(value, dict):
            raise InvalidParameterError(f"must be a map, got {type(value).__name__}", name)
        _, value_hint = typing.get_args(hint)
        return {
            key: convert(item, value_hint, f"{name}.{key}")
            for key, item in value.items()
            if isinstance(key, str)
        }
    return check_value(value, hint, name)


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
