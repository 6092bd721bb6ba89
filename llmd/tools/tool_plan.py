"""`ToolPlan`: what a chat request's tools mean for its prompt, its constraint and its reply.

Built once per request from `tools`, `tool_choice`, `parallel_tool_calls` and the served
parser, so the chat template, the grammar and the reply's parsing cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmd.errors import InvalidParameterError, require
from llmd.tools.parser_choice import PARSERS, new_reply_parser
from llmd.tools.reply_parser import ReplyParser
from llmd.tools.tool_choice import ToolChoice, parse_tool_choice
from llmd.tools.tool_definition import ToolDefinition, parse_tools


@dataclass(frozen=True)
class ToolPlan:
    """The tools offered, the choice among them, and how replies are read."""

    tools: tuple[ToolDefinition, ...]
    choice: ToolChoice
    parser_name: str = "hermes"
    """A free-form parser (PARSERS) for `auto`."""
    is_parallel: bool = True
    """Whether a forced reply may hold several calls (`parallel_tool_calls`)."""

    def __post_init__(self) -> None:
        require(
            self.parser_name in PARSERS,
            "tool_call_parser",
            f"must be one of {', '.join(PARSERS)}, got {self.parser_name!r}",
        )

    @classmethod
    def from_request(
        cls,
        tools: Any,
        tool_choice: Any,
        parallel_tool_calls: bool | None,
        parser_name: str,
    ) -> ToolPlan | None:
        """The plan of a request's fields; None when it offers no tools (or chose `none`)."""
        if tools is None:
            if tool_choice is not None and tool_choice != "none":
                raise InvalidParameterError("needs tools to choose from", "tool_choice")
            return None
        definitions = parse_tools(tools)
        choice = parse_tool_choice(tool_choice, tuple(tool.name for tool in definitions))
        if choice.mode == "none":
            return None
        is_parallel = True if parallel_tool_calls is None else parallel_tool_calls
        return cls(definitions, choice, parser_name, is_parallel)

    def template_tools(self) -> list[dict[str, Any]]:
        """The tools as the chat template takes them."""
        return [tool.to_template() for tool in self.tools]

    def structured_outputs(self) -> dict[str, Any] | None:
        """The constraint that forces the call (required or named), or None for `auto`."""
        if self.choice.mode == "named":
            (tool,) = [tool for tool in self.tools if tool.name == self.choice.name]
            return {"json": tool.parameters}
        if self.choice.mode != "required":
            return None
        calls = [_call_schema(tool) for tool in self.tools]
        array: dict[str, Any] = {
            "type": "array",
            "items": calls[0] if len(calls) == 1 else {"anyOf": calls},
            "minItems": 1,
        }
        if not self.is_parallel:
            array["maxItems"] = 1
        return {"json": array}

    def new_parser(self, is_streaming: bool) -> ReplyParser:
        """A parser for one reply (one per choice)."""
        names = frozenset(tool.name for tool in self.tools)
        return new_reply_parser(self.parser_name, self.choice, is_streaming, names)


def _call_schema(tool: ToolDefinition) -> dict[str, Any]:
    """One call to `tool`: its name, then arguments that match its parameters."""
    return {
        "type": "object",
        "properties": {"name": {"const": tool.name}, "arguments": tool.parameters},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }
