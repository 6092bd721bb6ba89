"""`LLM.chat(tools=..., tool_choice=...)`: the offline API's tool calls, parsed into outputs.

The tiny model (random weights, a real tokenizer, a template that ignores tools, so llmd
writes them into the prompt) samples at temperature 1: a forced choice must still give
calls whose arguments validate, since the grammar decides; `auto` is read by the Hermes
parser, driven here by a regex that writes a tagged call.
"""

from __future__ import annotations

import json

import jsonschema
import pytest

from llmd import LLM, SamplingParams
from llmd.errors import InvalidParameterError
from tests.tiny_model import make_tiny_model

MODEL_LEN = 2048
"""The tools' plain-text system prompt alone takes ~700 tokens of the tiny vocabulary."""
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"enum": ["Paris", "Oslo", "Lima"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 9},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
TIME = {
    "type": "object",
    "properties": {"zone": {"enum": ["UTC", "CET"]}},
    "required": ["zone"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "parameters": TIME}},
]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
MESSAGES = [{"role": "user", "content": "Weather?"}]
NUM_REPLIES = 6


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    model_dir = make_tiny_model(
        tmp_path_factory.mktemp("tiny-tools"), "llama", max_position_embeddings=MODEL_LEN
    )
    return LLM(str(model_dir), device="cpu", num_blocks=512, block_size=16, max_model_len=MODEL_LEN)


def _sampled(max_tokens: int = 80, **kwargs) -> list[SamplingParams]:
    return [
        SamplingParams(temperature=1.0, seed=seed, max_tokens=max_tokens, **kwargs)
        for seed in range(NUM_REPLIES)
    ]


def _check_calls(output, names: set[str]) -> None:
    assert output.tool_calls, output.text
    for call in output.tool_calls:
        assert call.id.startswith("call_") and call.name in names
        jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])


def test_required_gives_one_valid_call_to_an_offered_tool(llm):
    outputs = llm.chat(
        [MESSAGES] * NUM_REPLIES, _sampled(), tools=TOOLS, tool_choice="required",
        parallel_tool_calls=False,
    )  # fmt: skip
    assert len(outputs) == NUM_REPLIES
    for output in outputs:
        assert output.finish_reason == "stop", output.text
        _check_calls(output, set(SCHEMAS))
        assert len(output.tool_calls) == 1
        assert output.content is None  # a forced reply is only calls
        assert json.loads(output.text)[0]["name"] == output.tool_calls[0].name
    assert len({output.text for output in outputs}) > 1  # sampled: the grammar decides


def test_parallel_required_calls_all_parse(llm):
    """Random weights may list calls until the limit: each complete one is parsed."""
    outputs = llm.chat(
        [MESSAGES] * NUM_REPLIES, _sampled(max_tokens=160), tools=TOOLS, tool_choice="required"
    )
    for output in outputs:
        _check_calls(output, set(SCHEMAS))
        if output.finish_reason == "stop":
            written = json.loads(output.text)
            assert [c.name for c in output.tool_calls] == [call["name"] for call in written]


def test_a_named_tool_gives_one_call_to_it(llm):
    choice = {"type": "function", "function": {"name": "get_time"}}
    outputs = llm.chat([MESSAGES] * NUM_REPLIES, _sampled(), tools=TOOLS, tool_choice=choice)
    for output in outputs:
        assert output.finish_reason == "stop", output.text
        (call,) = output.tool_calls
        assert call.name == "get_time"
        _check_calls(output, {"get_time"})
        assert json.loads(call.arguments) == json.loads(output.text)


def test_auto_parses_a_tagged_call_out_of_the_text(llm):
    call = '{"name": "get_time", "arguments": {"zone": "CET"}}'
    regex = "Let me look\\. <tool_call>\n" + call.replace("{", "\\{").replace("}", "\\}")
    regex += "\n</tool_call>"
    params = SamplingParams(
        temperature=1.0, seed=1, max_tokens=120, structured_outputs={"regex": regex}
    )
    (output,) = llm.chat(MESSAGES, params, tools=TOOLS, tool_choice="auto")
    assert output.text.startswith("Let me look.") and "<tool_call>" in output.text
    assert output.content == "Let me look."
    ((name, arguments),) = [(c.name, c.arguments) for c in output.tool_calls]
    assert name == "get_time" and json.loads(arguments) == {"zone": "CET"}


def test_auto_without_a_call_is_all_content(llm):
    (output,) = llm.chat(MESSAGES, SamplingParams(max_tokens=8, ignore_eos=True), tools=TOOLS)
    assert output.tool_calls == [] and output.content == output.text.strip()


def test_without_tools_or_with_none_nothing_is_parsed(llm):
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    (plain,) = llm.chat(MESSAGES, params)
    (refused,) = llm.chat(MESSAGES, params, tools=TOOLS, tool_choice="none")
    assert plain.tool_calls is None and plain.content is None
    assert refused.tool_calls is None
    assert refused.prompt_token_ids == plain.prompt_token_ids  # no tools in the prompt


def test_the_tools_reach_the_prompt(llm):
    (plain,) = llm.chat(MESSAGES, SamplingParams(max_tokens=1))
    (offered,) = llm.chat(MESSAGES, SamplingParams(max_tokens=1), tools=TOOLS)
    prompt = llm.tokenizer.decode(offered.prompt_token_ids)
    assert "get_weather" in prompt and "get_time" in prompt
    assert "get_weather" not in llm.tokenizer.decode(plain.prompt_token_ids)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
         "tool_choice.function.name"),
        ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": TOOLS, "tool_call_parser": "xml"}, "tool_call_parser"),
        ({"tools": [{"type": "function"}]}, "tools"),
    ],
)  # fmt: skip
def test_bad_tool_arguments_raise_errors_naming_the_field(llm, kwargs, field):
    with pytest.raises(InvalidParameterError) as caught:
        llm.chat(MESSAGES, SamplingParams(max_tokens=2), **kwargs)
    assert caught.value.parameter.startswith(field), caught.value.parameter


def test_a_forced_call_refuses_a_second_constraint(llm):
    params = SamplingParams(max_tokens=4, structured_outputs={"regex": "a+"})
    with pytest.raises(InvalidParameterError) as caught:
        llm.chat(MESSAGES, params, tools=TOOLS, tool_choice="required")
    assert caught.value.parameter == "tool_choice"
    assert not llm.engine.has_unfinished_requests()
