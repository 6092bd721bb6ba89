"""Command-line flags generated from config dataclasses, so each option is declared once.

A flag's type, default and help come from its dataclass field (type hint, default,
docstring); a `Flag` adds only what a command line needs besides (short names, choices,
a command-line default with its reason), and click and argparse are built from the same.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from llmd.field_docs import field_docs

FROM_FIELD: Any = object()
"""A `Flag.default` that means: the dataclass field's own default."""


@dataclass(frozen=True)
class Flag:
    """How one dataclass field appears on a command line, besides what the field says."""

    field: str
    """The dataclass field the flag sets."""
    short_names: tuple[str, ...] = ()
    """Extra spellings, e.g. ("-m",)."""
    flag_name: str | None = None
    """The long flag when it is not --<field-name>, e.g. --sampling-seed."""
    dest: str | None = None
    """The command's keyword for the value when it is not the field's name."""
    choices: tuple[str, ...] | None = None
    """The values accepted, for a str field with a closed set."""
    default: Any = FROM_FIELD
    """A command-line default that differs from the field's (say why where it is set)."""
    show_default: str | None = None
    """Text for a default that is computed (e.g. "the model's")."""
    is_switch: bool = False
    """A bool field given as one flag that turns it on, with no --no- form."""
    help: str | None = None
    """Help that replaces the field's docstring, where that reads as code documentation."""
    envvar: str | None = None
    """An environment variable click reads when the flag is not given (click only)."""
    metavar: str | None = None
    """The value's name in the help (FILE, REGEX) when the type's name says less."""

    @property
    def long_name(self) -> str:
        """The flag as typed, e.g. --max-num-seqs."""
        return self.flag_name or "--" + self.field.replace("_", "-")

    @property
    def dest_name(self) -> str:
        """The keyword the command receives."""
        return self.dest or self.field


@dataclass(frozen=True)
class FieldFacts:
    """What a dataclass says about one field: its value type, default and docstring."""

    value_type: type
    """int, float, str or bool; for tuple fields the element type."""
    is_many: bool
    """A tuple field: the flag repeats."""
    default: Any
    doc: str


def field_facts(cls: type, name: str) -> FieldFacts:
    """The type, default and docstring of `cls`'s field `name`."""
    field = {f.name: f for f in dataclasses.fields(cls)}[name]
    if field.default is not dataclasses.MISSING:
        default = field.default
    elif field.default_factory is not dataclasses.MISSING:
        default = field.default_factory()
    else:
        default = None
    hint = typing.get_type_hints(cls)[name]
    is_many = False
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    if typing.get_origin(hint) is tuple:
        hint, is_many = typing.get_args(hint)[0], True
    return FieldFacts(hint, is_many, default, field_docs(cls).get(name, ""))


def command_line_help(doc: str) -> str:
    """A field's docstring as flag help: without its clauses on None, which are Python's.

    On a command line an unset flag shows its `[default: ...]` instead, so a clause on
    None ("(None: ...)", or "; None means ..." / ". None: ..." to the end) would say the
    default twice.
    """
    doc = re.sub(r"\s*\(None[:, ][^()]*\)", "", doc)
    cut = min((i for i in (doc.find("; None"), doc.find(". None")) if i >= 0), default=-1)
    return doc if cut < 0 else doc[:cut] + "."


def click_option(cls: type, flag: Flag) -> Callable:
    """The click option of `flag`, typed, defaulted and described from `cls`'s field."""
    facts = field_facts(cls, flag.field)
    default = facts.default if flag.default is FROM_FIELD else flag.default
    help_text = flag.help or command_line_help(facts.doc)
    kwargs: dict[str, Any] = {"default": default, "help": help_text}
    if flag.envvar is not None:
        kwargs["envvar"] = flag.envvar
    if flag.metavar is not None:
        kwargs["metavar"] = flag.metavar
    names: list[str] = [*flag.short_names]
    if facts.value_type is bool and flag.is_switch:
        names.append(flag.long_name)
        kwargs["is_flag"] = True
    elif facts.value_type is bool:
        names.append(f"{flag.long_name}/--no-{flag.long_name[2:]}")
    else:
        names.append(flag.long_name)
        kwargs["type"] = click.Choice(flag.choices) if flag.choices else facts.value_type
        kwargs["multiple"] = facts.is_many
    if flag.show_default is not None:
        kwargs["show_default"] = flag.show_default
    else:
        kwargs["show_default"] = default is not None and default != () and not flag.is_switch
    return click.option(*names, flag.dest_name, **kwargs)


def add_argument(
    parser: argparse.ArgumentParser, cls: type, flag: Flag, help_prefix: str = ""
) -> None:
    """Add `flag` to an argparse parser, from the same field as its click option."""
    facts = field_facts(cls, flag.field)
    default = facts.default if flag.default is FROM_FIELD else flag.default
    help_text = help_prefix + (flag.help or command_line_help(facts.doc)).replace("%", "%%")
    kwargs: dict[str, Any] = {"default": default, "dest": flag.dest_name}
    if flag.metavar is not None and facts.value_type is not bool:
        kwargs["metavar"] = flag.metavar
    if facts.value_type is bool and flag.is_switch:
        kwargs["action"] = "store_true"
    elif facts.value_type is bool:
        kwargs["action"] = argparse.BooleanOptionalAction
    else:
        kwargs["type"] = facts.value_type
        if flag.choices:
            kwargs["choices"] = flag.choices
        if facts.is_many:
            kwargs["action"] = "append"
    shown = flag.show_default or (None if default is None else "%(default)s")
    if shown is not None and not flag.is_switch:
        help_text += f" [default: {shown}]"
    parser.add_argument(*flag.short_names, flag.long_name, help=help_text, **kwargs)
