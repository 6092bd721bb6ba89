"""`ToolChoice`: whether the model may, must, or must not call a tool, or must call one by name.

OpenAI's `tool_choice` is a string or a map; reading it into one small value once means the
constraint, the parser and the template read a mode, never the request's raw shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmd.errors import InvalidParameterError, require

MODES = ("none", "auto", "required", "named")
"""`named`: the map form, one function the model must call."""


@dataclass(frozen=True)
class ToolChoice:
    """A request's tool choice: one of MODES, with the function's name when `named`."""

    mode: str = "auto"
    name: str | None = None

    @property
    def is_forced(self) -> bool:
        """True when the reply must be a call (required or named): the grammar enforces it."""
        return self.mode in ("required", "named")


def parse_tool_choice(
    raw: Any, tool_names: tuple[str, ...], field: str = "tool_choice"
) -> ToolChoice:
    """The choice from `tool_choice` (None: auto), checked against the offered tool names."""
    if raw is None:
        return ToolChoice("auto")
    if isinstance(raw, str):
        require(
            raw in ("none", "auto", "required"),
            field,
            f"must be 'none', 'auto', 'required' or a function, got {raw!r}",
        )
        return ToolChoice(raw)
    if not isinstance(raw, dict):
        raise InvalidParameterError("must be a string or a map", field)
    choice_type = raw.get("type")
    require(
        choice_type == "function",
        f"{field}.type",
        f"only 'function' is supported, got {choice_type!r}",
    )
    function = raw.get("function")
    if not isinstance(function, dict):
        raise InvalidParameterError("must be a map with a name", f"{field}.function")
    name = function.get("name")
    require(isinstance(name, str), f"{field}.function.name", "must be a string")
    require(
        name in tool_names,
        f"{field}.function.name",
        f"names no tool of this request: {name!r} (tools: {', '.join(tool_names)})",
    )
    return ToolChoice("named", name)
