"""`ToolDefinition`: one OpenAI function tool (name, description, parameters schema), checked.

The HTTP API, the daemon's chat template and the call constraint all read the same checked
value, so a tool that would fail later (a bad schema) is refused up front naming its field.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from llmd.errors import InvalidParameterError, require

NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""OpenAI's rule for function names: letters, digits, `_` and `-`, at most 64."""
MAX_TOOLS = 128
"""Most tools one request may offer (OpenAI's limit)."""
EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
"""The parameters of a function that declares none: it takes no arguments."""


@dataclass(frozen=True)
class ToolDefinition:
    """A function the model may call: its name, what it does, and its arguments' JSON schema."""

    name: str
    description: str | None
    parameters_json: str
    """The parameters' JSON schema as compact JSON text (frozen, hashable)."""

    @property
    def parameters(self) -> dict[str, Any]:
        """The parameters' JSON schema."""
        schema: dict[str, Any] = json.loads(self.parameters_json)
        return schema

    def to_template(self) -> dict[str, Any]:
        """The tool as transformers' chat templates take it (`tools=[...]`)."""
        function: dict[str, Any] = {"name": self.name}
        if self.description is not None:
            function["description"] = self.description
        function["parameters"] = self.parameters
        return {"type": "function", "function": function}


def parse_tools(raw_tools: Any, field: str = "tools") -> tuple[ToolDefinition, ...]:
    """Checked tools from a request's `tools` list; each problem names its field."""
    require(isinstance(raw_tools, list), field, "must be a list of tools")
    require(len(raw_tools) > 0, field, "must list at least one tool")
    require(len(raw_tools) <= MAX_TOOLS, field, f"at most {MAX_TOOLS} tools are accepted")
    tools = tuple(_parse_tool(raw, f"{field}.{index}") for index, raw in enumerate(raw_tools))
    seen: set[str] = set()
    for index, tool in enumerate(tools):
        require(
            tool.name not in seen,
            f"{field}.{index}.function.name",
            f"the name {tool.name!r} is used by an earlier tool",
        )
        seen.add(tool.name)
    return tools


def _parse_tool(raw: Any, field: str) -> ToolDefinition:
    require(isinstance(raw, dict), field, "must be a map with type and function")
    tool_type = raw.get("type")
    require(
        tool_type == "function",
        f"{field}.type",
        f"only function tools are supported, got {tool_type!r}",
    )
    function = raw.get("function")
    require(isinstance(function, dict), f"{field}.function", "must be a map with a name")
    name = function.get("name")
    require(
        isinstance(name, str) and NAME_PATTERN.fullmatch(name) is not None,
        f"{field}.function.name",
        f"must be 1 to 64 letters, digits, '_' or '-', got {name!r}",
    )
    description = function.get("description")
    require(
        description is None or isinstance(description, str),
        f"{field}.function.description",
        "must be a string",
    )
    parameters = function.get("parameters", EMPTY_PARAMETERS)
    return ToolDefinition(name, description, _checked_schema(parameters, f"{field}.function"))


def _checked_schema(parameters: Any, field: str) -> str:
    """The schema as compact JSON text, once the grammar backend accepts it."""
    from llmd.structured.grammar_source import check_grammar
    from llmd.structured_outputs import StructuredOutputs

    field = f"{field}.parameters"
    require(isinstance(parameters, dict), field, "must be a JSON schema object")
    schema_type = parameters.get("type", "object")
    require(
        schema_type == "object",
        field,
        f"the arguments must be a JSON object (type 'object'), got type {schema_type!r}",
    )
    try:
        spec = StructuredOutputs(json=parameters)
        check_grammar(spec)
    except InvalidParameterError as error:
        raise InvalidParameterError(error.message, field) from None
    return spec.json or "{}"
