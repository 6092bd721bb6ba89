"""Tools and tool turns in the prompt: through a template that knows them, or as plain text
for one that ignores them (the tiny test tokenizer's template knows only role and content)."""

from __future__ import annotations

import json
import shutil

import jinja2
import pytest

from llmd.engine.tokenizer import load_tokenizer
from llmd.errors import InvalidParameterError
from llmd.tools.chat_prompt import chat_prompt_text
from llmd.tools.tool_prompt import plain_messages
from tests.tokenizers_factory import make_tiny_tokenizer

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
HISTORY = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Oslo?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Oslo"}},
            }
        ],
    },
    {"role": "tool", "content": '{"temp": -3}', "tool_call_id": "call_1", "name": "get_weather"},
    {"role": "tool", "content": '{"wind": 7}', "tool_call_id": "call_1", "name": "get_weather"},
]
TOOLS_TEMPLATE = (
    "{% if tools %}TOOLS:{{ tools | tojson }}\n{% endif %}"
    "{% for m in messages %}{{ m.role }}: {{ m.content }}"
    "{% for c in m.tool_calls or [] %}<call {{ c.function.name }} "
    "{{ c.function.arguments | tojson }}>{% endfor %}\n{% endfor %}"
)


def _jinja_render(template: str):
    compiled = jinja2.Environment().from_string(template)

    def render(messages, tools):
        return compiled.render(messages=messages, tools=tools)

    return render


def _ignoring_render(messages, tools):
    return "".join(f"{m['role']}: {m['content']}\n" for m in messages)


def test_a_template_that_knows_tools_renders_them_itself():
    text = chat_prompt_text(_jinja_render(TOOLS_TEMPLATE), HISTORY, TOOLS, "hermes")
    assert text.startswith("TOOLS:") and '"get_weather"' in text
    assert '<call get_weather {"city": "Oslo"}>' in text
    assert 'tool: {"temp": -3}' in text and "<tool_response>" not in text


def test_a_template_that_ignores_tools_gets_them_as_a_system_prompt():
    text = chat_prompt_text(_ignoring_render, HISTORY, TOOLS, "hermes")
    system = text.split("\nuser: ")[0]
    assert system.startswith("system: Be brief.\n\n") and "<tools>" in system
    assert json.dumps(TOOLS[0]) in system and "<tool_call>" in system
    call = '{"name": "get_weather", "arguments": {"city": "Oslo"}}'
    assert f"<tool_call>\n{call}\n</tool_call>" in text
    # both results in one user turn, the tool role gone
    results = '<tool_response>\n{"temp": -3}\n</tool_response>\n<tool_response>\n{"wind": 7}'
    assert f"user: {results}" in text
    assert "\ntool: " not in text


def test_llama3_fallback_writes_calls_as_bare_json():
    plain = plain_messages(HISTORY, TOOLS, "llama3")
    assert plain[2] == {
        "role": "assistant",
        "content": '{"name": "get_weather", "parameters": {"city": "Oslo"}}',
    }
    assert '"parameters"' in plain[0]["content"] and "<tool_call>" not in plain[0]["content"]


def test_history_without_tools_still_shows_the_calls():
    text = chat_prompt_text(_ignoring_render, HISTORY, None, "hermes")
    assert "<tools>" not in text
    assert '"name": "get_weather"' in text and "<tool_response>" in text
    native = chat_prompt_text(_jinja_render(TOOLS_TEMPLATE), HISTORY, None, "hermes")
    assert "<call get_weather" in native and "<tool_response>" not in native


def test_a_template_that_refuses_tool_turns_gets_the_plain_form():
    def strict(messages, tools):
        if any(m["role"] == "tool" for m in messages):
            raise InvalidParameterError("unknown role", "messages")
        return _ignoring_render(messages, tools)

    text = chat_prompt_text(strict, HISTORY, TOOLS, "hermes")
    assert "<tool_response>" in text and "<tools>" in text


def test_plain_conversations_render_once_as_before():
    calls = []

    def render(messages, tools):
        calls.append(tools)
        return "x"

    assert chat_prompt_text(render, [{"role": "user", "content": "hi"}], None, "hermes") == "x"
    assert calls == [None]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return load_tokenizer(str(make_tiny_tokenizer(tmp_path_factory.mktemp("tok") / "tiny")))


def test_the_tokenizer_falls_back_for_a_template_without_tools(tokenizer):
    ids = tokenizer.apply_chat_template(HISTORY, tools=TOOLS)
    text = tokenizer.decode(ids, skip_special_tokens=False)
    assert "<tools>" in text and "get_weather" in text and "<tool_response>" in text
    plain = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}])
    assert "<tools>" not in tokenizer.decode(plain)


def test_the_tokenizer_uses_a_template_that_knows_tools(tmp_path):
    source = make_tiny_tokenizer(tmp_path / "src")
    target = tmp_path / "with-tools"
    shutil.copytree(source, target)
    config_path = target / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = TOOLS_TEMPLATE
    config_path.write_text(json.dumps(config))
    tools_tokenizer = load_tokenizer(str(target))
    text = tools_tokenizer.decode(tools_tokenizer.apply_chat_template(HISTORY, tools=TOOLS))
    assert text.startswith("TOOLS:") and "<tools>" not in text
