"""The chat's pure parts: slash commands, settings, history, conversation, stats, one-shot."""

from __future__ import annotations

import io

import pytest

from llmd.errors import InvalidParameterError, OverloadedError
from llmd.sampling_params import SamplingParams
from llmd.tui.chat.commands import ChatCommand, is_command, parse_command, unescape_prompt
from llmd.tui.chat.conversation import Conversation
from llmd.tui.chat.history import PromptHistory
from llmd.tui.chat.oneshot import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, run_once
from llmd.tui.chat.reply_stats import format_reply_stats, tokens_per_second
from llmd.tui.chat.settings import DEFAULT_CHAT_PARAMS, apply_setting, parse_value
from llmd.tui.formatting import printable
from tests.tui.fake_client import FakeClient, ScriptedReply


def test_commands_parse_with_arguments_and_reject_typos():
    assert parse_command("/system  Be terse. ") == ChatCommand("system", "Be terse.")
    assert parse_command("/SET top_p 0.9") == ChatCommand("set", "top_p 0.9")
    assert parse_command("/clear") == ChatCommand("clear")
    for text, fragment in [
        ("/clera", "unknown command /clera"),
        ("/clear now", "/clear takes no argument"),
        ("/set temperature", "use /set NAME VALUE"),
    ]:
        with pytest.raises(InvalidParameterError, match=fragment) as error:
            parse_command(text)
        assert error.value.parameter == "command"
    assert is_command("/help") and not is_command("//etc/passwd is a path")
    assert unescape_prompt("//etc") == "/etc" and unescape_prompt("plain") == "plain"


def test_settings_parse_by_type_and_validate_through_sampling_params():
    assert parse_value("max_tokens", "64") == 64
    assert parse_value("seed", "off") is None
    params = apply_setting(DEFAULT_CHAT_PARAMS, "temperature", "0")
    assert params.temperature == 0.0 and params.top_p == DEFAULT_CHAT_PARAMS.top_p
    cases = [
        ("top_p", "1.5", "top_p", "must be in (0, 1]"),
        ("max_tokens", "0", "max_tokens", "must be >= 1"),
        ("max_tokens", "ten", "max_tokens", "must be an integer"),
        ("colour", "red", "setting", "unknown setting 'colour'"),
    ]
    for name, value, parameter, fragment in cases:
        with pytest.raises(InvalidParameterError) as error:
            apply_setting(DEFAULT_CHAT_PARAMS, name, value)
        assert error.value.parameter == parameter
        assert fragment in error.value.message


def test_history_browses_back_and_restores_the_draft():
    history = PromptHistory(max_entries=3)
    assert history.previous("draft") is None
    for text in ("a", "b", "b", "c", "d"):
        history.add(text)
    assert history.entries == ["b", "c", "d"]  # repeats collapse, oldest dropped
    assert [history.previous("draft") for _ in range(4)] == ["d", "c", "b", None]
    assert [history.next() for _ in range(4)] == ["c", "d", "draft", None]


def test_conversation_alternates_and_drops_failed_turns():
    conversation = Conversation("sys", SamplingParams())
    assert conversation.begin("q1")[0] == {"role": "system", "content": "sys"}
    conversation.cancel()  # failed: q1 is forgotten
    conversation.begin("q2")
    conversation.complete("a2", {"prompt_tokens": 5, "completion_tokens": 3, "cached_tokens": 2})
    conversation.begin("q3")
    conversation.complete("")  # stopped before any text: the prompt is not kept either
    assert conversation.turns == [
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "a2"},
    ]
    assert conversation.begin("q4")[-1] == {"role": "user", "content": "q4"}
    assert Conversation().begin("x")[0]["role"] != "system"
    conversation.clear()
    assert conversation.turns == [] and conversation.system_prompt == "sys"
    assert "2 replies: 5 prompt tokens (2 from the prefix cache), 3 generated" in (
        conversation.summary()
    )


def test_reply_stats_line():
    timings = {"ttft": 0.0451, "tpot": 0.02, "decode": 0.2}
    usage = {"completion_tokens": 11, "cached_tokens": 16}
    assert format_reply_stats("length", usage, timings, num_preemptions=1) == (
        "TTFT 45.1ms · 50.0 tok/s · 11 tokens · length · 16 prompt tokens cached · preempted 1×"
    )
    assert format_reply_stats("stop", {"completion_tokens": 1}, {"ttft": None}) == (
        "TTFT - · - tok/s · 1 token · stop"
    )
    assert tokens_per_second({"decode": 0.5}, 11) == 20.0


def test_printable_drops_control_characters_but_keeps_layout():
    assert printable("a\x11b\tc\nd\x1b[31m\x7f") == "ab\tc\nd[31m"


def run(reply: ScriptedReply, **kwargs):
    client, out, err = FakeClient(reply), io.StringIO(), io.StringIO()
    code = run_once(client, "question", DEFAULT_CHAT_PARAMS, out, err, **kwargs)
    return code, out.getvalue(), err.getvalue(), client


def test_one_shot_prints_the_streamed_reply_and_stats():
    code, out, err, client = run(
        ScriptedReply(["Hi", " there"]), system_prompt="be kind", show_stats=True
    )
    assert (code, out) == (EXIT_OK, "Hi there\n")
    assert err == "TTFT 21ms · 40.0 tok/s · 2 tokens · stop\n"
    assert client.requests[0]["messages"] == [
        {"role": "system", "content": "be kind"},
        {"role": "user", "content": "question"},
    ]


def test_one_shot_reports_daemon_errors_with_a_non_zero_exit():
    code, out, err, _ = run(ScriptedReply(error=OverloadedError("128 requests in flight")))
    assert code == EXIT_FAILED and out == ""
    assert err == "Error: the daemon is overloaded: 128 requests in flight\n"


def test_one_shot_interrupt_closes_the_stream_which_aborts():
    class InterruptingOut(io.StringIO):
        def write(self, text: str) -> int:
            if text == "second":
                raise KeyboardInterrupt
            return super().write(text)

    client, out, err = (
        FakeClient(ScriptedReply(["first", "second"])),
        InterruptingOut(),
        (io.StringIO()),
    )
    code = run_once(client, "q", DEFAULT_CHAT_PARAMS, out, err)
    assert code == EXIT_INTERRUPTED
    assert client.was_closed_early
    assert out.getvalue() == "first\n" and "aborted" in err.getvalue()
