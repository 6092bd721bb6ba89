"""Tool definitions, tool_choice and the forced-call constraint, checked without a model."""

from __future__ import annotations

import json

import jsonschema
import pytest

from llmd.errors import InvalidParameterError
from llmd.structured.grammar_source import check_grammar
from llmd.structured_outputs import StructuredOutputs
from llmd.tools.forced_call_parser import CallArrayParser, NamedCallParser
from llmd.tools.hermes_parser import HermesParser
from llmd.tools.llama3_parser import Llama3Parser
from llmd.tools.parser_choice import resolve_parser_name
from llmd.tools.tool_plan import ToolPlan

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"enum": ["Paris", "Oslo"]}, "days": {"type": "integer"}},
            "required": ["city", "days"],
            "additionalProperties": False,
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time"}}


def _plan(tool_choice, tools=(WEATHER, TIME), parallel=None, parser="hermes"):
    return ToolPlan.from_request(list(tools), tool_choice, parallel, parser)


def _parameter(**kwargs) -> str | None:
    with pytest.raises(InvalidParameterError) as error:
        _plan(**kwargs)
    return error.value.parameter


def test_bad_tools_name_their_field():
    bad_type = {"type": "retrieval", "function": {"name": "x"}}
    assert _parameter(tool_choice=None, tools=[bad_type]) == "tools.0.type"
    assert _parameter(tool_choice=None, tools=[{"type": "function"}]) == "tools.0.function"
    no_name = {"type": "function", "function": {"name": "has space"}}
    assert _parameter(tool_choice=None, tools=[WEATHER, no_name]) == "tools.1.function.name"
    array_params = {"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}
    assert _parameter(tool_choice=None, tools=[array_params]) == "tools.0.function.parameters"
    unsupported = {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?<=a)b"}}}
    bad_schema = {"type": "function", "function": {"name": "f", "parameters": unsupported}}
    assert _parameter(tool_choice=None, tools=[bad_schema]) == "tools.0.function.parameters"
    assert _parameter(tool_choice=None, tools=[WEATHER, WEATHER]) == "tools.1.function.name"
    assert _parameter(tool_choice=None, tools=[]) == "tools"


def test_bad_tool_choices_name_their_field():
    assert _parameter(tool_choice="sometimes") == "tool_choice"
    named_other = {"type": "function", "function": {"name": "get_stock"}}
    assert _parameter(tool_choice=named_other) == "tool_choice.function.name"
    assert _parameter(tool_choice={"type": "tool", "function": {"name": "x"}}) == "tool_choice.type"
    with pytest.raises(InvalidParameterError) as error:
        ToolPlan.from_request(None, "required", None, "hermes")
    assert error.value.parameter == "tool_choice"
    assert ToolPlan.from_request(None, "none", None, "hermes") is None
    assert _plan("none") is None


def test_auto_needs_no_constraint_and_picks_the_served_parser():
    plan = _plan(None, parser="llama3")
    assert plan.choice.mode == "auto" and plan.structured_outputs() is None
    assert isinstance(plan.new_parser(is_streaming=True), Llama3Parser)
    assert isinstance(_plan("auto").new_parser(is_streaming=False), HermesParser)


def test_named_choice_constrains_to_the_tools_arguments():
    plan = _plan({"type": "function", "function": {"name": "get_weather"}})
    assert plan.structured_outputs() == {"json": WEATHER["function"]["parameters"]}
    assert isinstance(plan.new_parser(is_streaming=True), NamedCallParser)


@pytest.mark.parametrize("parallel", [None, True, False])
def test_required_constrains_to_an_array_of_valid_calls(parallel):
    plan = _plan("required", parallel=parallel)
    schema = plan.structured_outputs()["json"]
    check_grammar(StructuredOutputs(json=schema))  # the grammar backend takes it
    one_call = [{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}]
    two_calls = [*one_call, {"name": "get_time", "arguments": {}}]
    jsonschema.validate(one_call, schema)
    if parallel is False:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(two_calls, schema)
    else:
        jsonschema.validate(two_calls, schema)
    for bad in (
        [],
        [{"name": "get_weather", "arguments": {"city": "Rome", "days": 2}}],
        [{"name": "get_stock", "arguments": {}}],
        [{"name": "get_weather"}],
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
    reply = CallArrayParser(is_streaming=False).parse(json.dumps(two_calls))
    assert [c.name for c in reply.tool_calls] == ["get_weather", "get_time"]


def test_tools_reach_the_template_in_transformers_shape():
    plan = _plan("auto")
    assert plan.template_tools() == [
        WEATHER,
        {"type": "function", "function": {"name": "get_time", "parameters": {
            "type": "object", "properties": {}}}},
    ]  # fmt: skip


def test_auto_parser_follows_the_chat_template():
    qwen = "{% if tools %}<tools>{% endif %}<tool_call>\n{{ call | tojson }}</tool_call>"
    llama = "{%- if builtin_tools %}<|python_tag|>{% endif %}ipython"
    assert resolve_parser_name("auto", qwen) == "hermes"
    assert resolve_parser_name("auto", llama) == "llama3"
    assert resolve_parser_name("auto", "{{ messages }}") == "hermes"
    assert resolve_parser_name("auto", None) == "hermes"
    assert resolve_parser_name("llama3", qwen) == "llama3"
    with pytest.raises(InvalidParameterError) as error:
        resolve_parser_name("mistral", qwen)
    assert error.value.parameter == "tool_call_parser"
