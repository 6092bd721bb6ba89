"""The tool-call parsers on canned model text: whole replies, and every split into deltas.

A streamed reply must reassemble into exactly the whole reply's content and calls, however
the text is cut, and the tag text of a call must never reach the content.
"""

from __future__ import annotations

import json

import pytest

from llmd.tools.forced_call_parser import CallArrayParser, NamedCallParser
from llmd.tools.hermes_parser import HermesParser
from llmd.tools.llama3_parser import Llama3Parser
from llmd.tools.reply_delta import ContentDelta, ToolCallDelta, assemble

WEATHER_ARGS = {"city": "Paris", "days": [1, {"brace": '}]\\"{'}], "ok": True, "n": -1.5e3}

HERMES_TWO_CALLS = (
    "Let me look that up.\n"
    f'<tool_call>\n{{"name": "get_weather", "arguments": {json.dumps(WEATHER_ARGS)}}}'
    "\n</tool_call>\n"
    '<tool_call>\n{"arguments": {}, "name": "get_time"}\n</tool_call>'
)
LLAMA3_TWO_CALLS = (
    '<|python_tag|>{"name": "get_weather", "parameters": '
    f'{json.dumps(WEATHER_ARGS)}}}; {{"name": "get_time", "parameters": {{}}}}'
)
ARRAY_TWO_CALLS = (
    f'[{{"name":"get_weather","arguments":{json.dumps(WEATHER_ARGS)}}},'
    '{"name":"get_time","arguments":{}}]'
)

CASES = [
    (HermesParser, HERMES_TWO_CALLS, "Let me look that up."),
    (Llama3Parser, LLAMA3_TWO_CALLS, None),
    (CallArrayParser, ARRAY_TWO_CALLS, None),
]


def _streamed(parser, pieces):
    deltas = []
    for piece in pieces:
        deltas.extend(parser.feed(piece))
    deltas.extend(parser.finish())
    return deltas


@pytest.mark.parametrize(("parser_class", "text", "content"), CASES)
def test_whole_reply_gives_content_and_both_calls(parser_class, text, content):
    reply = parser_class(is_streaming=False).parse(text)
    assert reply.content == content
    assert [call.name for call in reply.tool_calls] == ["get_weather", "get_time"]
    assert json.loads(reply.tool_calls[0].arguments) == WEATHER_ARGS
    assert json.loads(reply.tool_calls[1].arguments) == {}
    ids = [call.id for call in reply.tool_calls]
    assert all(i.startswith("call_") and len(i) > 10 for i in ids) and len(set(ids)) == 2


@pytest.mark.parametrize(("parser_class", "text", "content"), CASES)
def test_every_two_piece_split_streams_the_same_reply(parser_class, text, content):
    for cut in range(len(text) + 1):
        deltas = _streamed(parser_class(), [text[:cut], text[cut:]])
        reply = assemble(deltas)
        assert reply.content == content, cut
        assert [(c.name, json.loads(c.arguments)) for c in reply.tool_calls] == [
            ("get_weather", WEATHER_ARGS),
            ("get_time", {}),
        ], cut


@pytest.mark.parametrize(("parser_class", "text", "content"), CASES)
def test_one_character_deltas_send_header_first_then_fragments(parser_class, text, content):
    deltas = _streamed(parser_class(), list(text))
    calls = [d for d in deltas if isinstance(d, ToolCallDelta)]
    by_index: dict[int, list[ToolCallDelta]] = {}
    for delta in calls:
        by_index.setdefault(delta.index, []).append(delta)
    assert sorted(by_index) == [0, 1]
    for pieces in by_index.values():
        assert pieces[0].id is not None and pieces[0].name is not None
        assert all(p.id is None and p.name is None for p in pieces[1:])
    assert len(by_index[0]) > 10  # the arguments streamed in many fragments, not at the end
    text_out = "".join(d.text for d in deltas if isinstance(d, ContentDelta))
    assert "<tool_call>" not in text_out and "tool_call" not in text_out
    assert "python_tag" not in text_out and '"name"' not in text_out


def test_a_half_written_tag_is_held_back_until_it_is_decided():
    parser = HermesParser()
    assert parser.feed("Hi <tool_") == [ContentDelta("Hi")]
    assert parser.feed("ca") == []
    assert parser.feed("t and more") == [ContentDelta(" <tool_cat and more")]
    assert parser.finish() == []


def test_plain_text_is_left_exactly_as_it_was():
    text = "  No tools needed.\nJust text with < and { and <tool in it.\n\n"
    for parser_class in (HermesParser, Llama3Parser):
        assert parser_class(is_streaming=False).parse(text).content == text
        assert assemble(_streamed(parser_class(), list(text))).content == text


@pytest.mark.parametrize(
    "text",
    [
        'Sure <tool_call>{"name": "f", "arguments": {"a": }}</tool_call> done',  # bad JSON
        'Sure <tool_call>{"arguments": {"a": 1}}</tool_call> done',  # no name
        "Sure <tool_call>not json</tool_call> done",
        'Sure <tool_call>{"name": "f", "arguments": {"a": 1',  # cut off
    ],
)
def test_malformed_hermes_calls_fall_back_to_content(text):
    reply = HermesParser(is_streaming=False).parse(text)
    assert reply.tool_calls == ()
    assert reply.content == text


def test_a_streamed_call_that_breaks_after_its_name_leaks_no_tag_text():
    text = 'A <tool_call>{"name": "f", "arguments": {"a": 1} oops }</tool_call> B'
    for cut in range(len(text) + 1):
        reply = assemble(_streamed(HermesParser(), [text[:cut], text[cut:]]))
        assert reply.content == "A B", cut
        assert [(c.name, c.arguments) for c in reply.tool_calls] == [("f", '{"a": 1}')], cut
    whole = HermesParser(is_streaming=False).parse(text)
    assert (whole.content, whole.tool_calls) == (text, ())  # whole: not a call, so content


def test_malformed_llama3_json_is_content():
    for text in ('{"answer": 42}', '{"name": "f", "parameters": [1, }', '{"name": 3}'):
        reply = Llama3Parser(is_streaming=False).parse(text)
        assert (reply.content, reply.tool_calls) == (text, ())


def test_a_call_among_text_keeps_the_text_around_it():
    text = 'Before <tool_call>{"name": "f", "arguments": {"x": "y"}}</tool_call> after'
    reply = HermesParser(is_streaming=False).parse(text)
    assert reply.content == "Before after"
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("f", '{"x": "y"}')]


def test_quoted_arguments_are_unquoted():
    text = '<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}</tool_call>'
    for parser in (HermesParser(is_streaming=False), HermesParser()):
        deltas = _streamed(parser, list(text)) if parser.is_streaming else None
        reply = parser.parse(text) if deltas is None else assemble(deltas)
        assert [(c.name, c.arguments) for c in reply.tool_calls] == [("f", '{"x": 1}')]


def test_a_call_without_arguments_gets_an_empty_object():
    reply = HermesParser(is_streaming=False).parse('<tool_call>{"name": "now"}</tool_call>')
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("now", "{}")]
    streamed = assemble(_streamed(HermesParser(), list('<tool_call>{"name": "now"}</tool_call>')))
    assert [(c.name, c.arguments) for c in streamed.tool_calls] == [("now", "{}")]


def test_named_call_streams_the_whole_reply_as_arguments():
    text = '{"city":"Oslo","days":3}'
    deltas = _streamed(NamedCallParser("get_weather"), list(text))
    assert isinstance(deltas[0], ToolCallDelta) and deltas[0].name == "get_weather"
    assert "".join(d.arguments for d in deltas if isinstance(d, ToolCallDelta)) == text
    whole = NamedCallParser("get_weather", is_streaming=False).parse(text)
    assert [(c.name, c.arguments) for c in whole.tool_calls] == [("get_weather", text)]
    assert whole.content is None


def test_call_ids_are_unique_across_parsers():
    ids = {
        call.id
        for _ in range(50)
        for call in HermesParser(is_streaming=False).parse(HERMES_TWO_CALLS).tool_calls
    }
    assert len(ids) == 100


@pytest.mark.parametrize(
    ("parser_class", "text"),
    [
        (Llama3Parser, '{"name": "Bob", "age": 3}'),  # a JSON answer, not a call
        (HermesParser, 'x <tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>'),
    ],
)
def test_a_call_to_a_tool_not_offered_is_content(parser_class, text):
    names = frozenset({"get_weather"})
    whole = parser_class(is_streaming=False, tool_names=names).parse(text)
    assert (whole.content, whole.tool_calls) == (text, ())
    for cut in range(len(text) + 1):
        streamed = assemble(_streamed(parser_class(tool_names=names), [text[:cut], text[cut:]]))
        assert (streamed.content, streamed.tool_calls) == (text, ()), cut
    offered = parser_class(is_streaming=False, tool_names=frozenset({"Bob", "rm_rf"}))
    assert len(offered.parse(text).tool_calls) == 1
