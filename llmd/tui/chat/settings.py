"""The sampling settings `/set` may change, parsed from text and checked by SamplingParams.

Values are parsed with the field's type and then validated by SamplingParams itself, so the
chat reports exactly the typed error the daemon would have sent.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from llmd.errors import InvalidParameterError
from llmd.sampling_params import SamplingParams

DEFAULT_CHAT_PARAMS = SamplingParams(temperature=0.7, top_p=0.95, max_tokens=256)
"""A chat's defaults: some variety, and replies long enough to answer (a max_tokens the
context cannot hold is cut, per reply, to what fits)."""

SETTABLE_TYPES: dict[str, type] = {
    "temperature": float,
    "top_p": float,
    "top_k": int,
    "min_p": float,
    "max_tokens": int,
    "seed": int,
    "repetition_penalty": float,
    "presence_penalty": float,
    "frequency_penalty": float,
}
"""The settings `/set` knows, with the type each value is parsed as."""
NONE_WORDS = ("none", "off")
"""Values that unset an optional setting (only `seed` is optional)."""


def parse_value(name: str, text: str) -> int | float | None:
    """`text` as the type of setting `name`; raises InvalidParameterError naming it."""
    value_type = SETTABLE_TYPES.get(name)
    if value_type is None:
        known = ", ".join(SETTABLE_TYPES)
        raise InvalidParameterError(f"unknown setting {name!r}; one of: {known}", "setting")
    if name == "seed" and text.lower() in NONE_WORDS:
        return None
    try:
        return value_type(text)
    except ValueError:
        kind = "an integer" if value_type is int else "a number"
        raise InvalidParameterError(f"must be {kind}, got {text!r}", name) from None


def apply_setting(params: SamplingParams, name: str, text: str) -> SamplingParams:
    """A copy of `params` with setting `name` parsed from `text` (validated on construction)."""
    changes: dict[str, Any] = {name: parse_value(name, text)}  # a field named at run time
    return dataclasses.replace(params, **changes)


def describe_all(params: SamplingParams) -> str:
    """Every setting /set knows, one per line, with its current value."""
    lines = []
    for name in SETTABLE_TYPES:
        value = getattr(params, name)
        lines.append(f"{name:<20} {'none' if value is None else f'{value:g}'}")
    return "\n".join(lines)


def describe(params: SamplingParams) -> str:
    """The settings a chat user tunes, in one line."""
    seed = "none" if params.seed is None else str(params.seed)
    return (
        f"temperature {params.temperature:g} · top_p {params.top_p:g} · "
        f"max_tokens {params.max_tokens} · seed {seed}"
    )
