"""`llmd chat` under Pilot against a scripted client: streaming, stopping, commands, history."""

from __future__ import annotations

import pytest
from textual.widgets import Markdown

from llmd.errors import RequestRejectedError
from llmd.tui.chat.app import create_chat_app
from llmd.tui.chat.assistant_reply import AssistantReply
from llmd.tui.chat.notice import Notice
from llmd.tui.chat.prompt_input import PromptInput
from tests.tui.fake_client import FakeAsyncClient, ScriptedReply
from tests.tui.waiting import settle, wait_for


def make_app(*replies: ScriptedReply, system_prompt: str | None = None):
    client = FakeAsyncClient(list(replies))
    return create_chat_app(client, "ipc:///tmp/fake.sock", system_prompt), client


async def submit(pilot, text: str) -> None:
    """Type `text` and press Enter; returns once the app has handled it (a reply may stream on)."""
    prompt = pilot.app.query_one(PromptInput)
    prompt.value = text
    await press(pilot, "enter")


async def press(pilot, *keys: str) -> None:
    """Press `keys`; returns once the app has handled them (Pilot alone may return before)."""
    await pilot.press(*keys)
    await settle(pilot)


def notices(app) -> list[str]:
    return [notice.text for notice in app.query(Notice)]


async def test_a_prompt_streams_its_reply_as_markdown_with_stats():
    app, client = make_app()
    async with app.run_test() as pilot:
        await submit(pilot, "hi there")
        await wait_for(pilot, lambda: not app.conversation.is_waiting)
        reply = app.query_one(AssistantReply)
        assert reply.text == "Hello **world**!"
        assert reply.body.source == "Hello **world**!"
        assert isinstance(reply.body, Markdown)
        stats = str(reply.query_one(".reply-stats").render())
        assert stats == "TTFT 21ms · 40.0 tok/s · 3 tokens · stop"
    assert client.requests[0]["messages"] == [{"role": "user", "content": "hi there"}]
    assert app.conversation.turns == [
        {"role": "user", "content": "hi there"},
        {"role": "assistant", "content": "Hello **world**!"},
    ]
    assert client.is_closed


async def test_turns_and_the_system_prompt_are_sent_as_chat_messages():
    app, client = make_app(ScriptedReply(["one"]), ScriptedReply(["two"]))
    async with app.run_test() as pilot:
        await submit(pilot, "/system Be brief.")
        await submit(pilot, "first")
        await wait_for(pilot, lambda: not app.conversation.is_waiting)
        await submit(pilot, "second")
        await wait_for(pilot, lambda: len(app.conversation.turns) == 4)
    assert client.requests[1]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "one"},
        {"role": "user", "content": "second"},
    ]


@pytest.mark.parametrize("key", ["escape", "ctrl+c"])
async def test_stop_key_aborts_the_request_and_keeps_the_partial_reply(key):
    app, client = make_app(ScriptedReply(["partial"], hold=True))
    async with app.run_test() as pilot:
        await submit(pilot, "tell me everything")
        reply = app.query_one(AssistantReply)
        await wait_for(pilot, lambda: reply.text == "partial")
        await pilot.press(key)
        await wait_for(pilot, lambda: not app.conversation.is_waiting)
        assert client.aborted == ["fake-1"]
        assert str(reply.query_one(".reply-stats").render()).endswith("· abort (you stopped it)")
        assert app.is_running  # Ctrl+C stopped the reply instead of quitting
        await pilot.press("ctrl+c")  # nothing streams now: quits
        await wait_for(pilot, lambda: not app.is_running)
    assert app.conversation.turns[-1] == {"role": "assistant", "content": "partial"}


async def test_set_changes_settings_and_reports_typed_errors():
    app, client = make_app()
    async with app.run_test() as pilot:
        await submit(pilot, "/set temperature -1")
        await submit(pilot, "/set top_p abc")
        await submit(pilot, "/set top_k 1.5")
        await submit(pilot, "/set colour blue")
        await submit(pilot, "/set max_tokens 64")
        await submit(pilot, "/set temperature 0")
        await submit(pilot, "go")
        await wait_for(pilot, lambda: not app.conversation.is_waiting and client.requests)
        texts = notices(app)
    assert "temperature: must be >= 0, got -1.0" in texts
    assert "top_p: must be a number, got 'abc'" in texts
    assert "top_k: must be an integer, got '1.5'" in texts
    assert any(text.startswith("unknown setting 'colour'; one of:") for text in texts)
    assert not any("invalid_parameter" in text for text in texts)
    params = client.requests[0]["params"]
    assert (params.max_tokens, params.temperature, params.top_p) == (64, 0.0, 0.95)


async def test_help_unknown_commands_and_clear():
    app, _ = make_app()
    async with app.run_test() as pilot:
        await submit(pilot, "/help")
        assert any("/set NAME VALUE" in text and "Esc" in text for text in notices(app))
        await submit(pilot, "/frobnicate")
        assert any(text.startswith("unknown command /frobnicate") for text in notices(app))
        await submit(pilot, "hello")
        await wait_for(pilot, lambda: len(app.conversation.turns) == 2)
        await submit(pilot, "/clear")
        await wait_for(pilot, lambda: not app.query(AssistantReply))
        assert app.conversation.turns == []
        assert notices(app) == ["Conversation cleared."]


async def test_up_and_down_browse_the_prompt_history():
    app, _ = make_app(ScriptedReply(["a"]), ScriptedReply(["b"]))
    async with app.run_test() as pilot:
        prompt = app.query_one(PromptInput)
        await submit(pilot, "first")
        await wait_for(pilot, lambda: not app.conversation.is_waiting)
        await submit(pilot, "second")
        await wait_for(pilot, lambda: not app.conversation.is_waiting)
        await press(pilot, "d", "r", "a", "f", "t")
        shown = []
        for key in ("up", "up", "up", "down", "down"):
            await press(pilot, key)
            shown.append(prompt.value)
    assert shown == ["second", "first", "first", "second", "draft"]


async def test_a_daemon_error_is_shown_and_the_turn_is_dropped():
    error = RequestRejectedError("prompt has 300 tokens, but max_model_len is 256", "prompt")
    app, _ = make_app(ScriptedReply(error=error), ScriptedReply(["fine"]))
    async with app.run_test() as pilot:
        await submit(pilot, "x " * 300)
        await wait_for(pilot, lambda: not app.conversation.is_waiting)
        assert "prompt has 300 tokens, but max_model_len is 256" in notices(app)
        assert app.conversation.turns == []
        await submit(pilot, "shorter")
        await wait_for(pilot, lambda: len(app.conversation.turns) == 2)


async def test_stats_command_shows_the_daemon_and_conversation_totals():
    app, _ = make_app()
    async with app.run_test() as pilot:
        await submit(pilot, "hello")
        await wait_for(pilot, lambda: not app.conversation.is_waiting)
        await submit(pilot, "/stats")
        await wait_for(pilot, lambda: any("kv cache" in text for text in notices(app)))
        text = next(text for text in notices(app) if "kv cache" in text)
    assert "model     /models/tiny-llama" in text
    assert "1 exchanges kept, 1 replies: 12 prompt tokens" in text


async def test_clear_while_streaming_drops_the_reply_and_closes_its_stream():
    app, client = make_app(ScriptedReply(["partial"], hold=True), ScriptedReply(["next"]))
    async with app.run_test() as pilot:
        await submit(pilot, "long question")
        reply = app.query_one(AssistantReply)
        await wait_for(pilot, lambda: reply.text == "partial")
        await submit(pilot, "/clear")
        await wait_for(pilot, lambda: client.closed_early == ["fake-1"])
        assert not app.query(AssistantReply) and app.conversation.turns == []
        await submit(pilot, "again")
        await wait_for(pilot, lambda: len(app.conversation.turns) == 2)
    assert app.conversation.turns[-1] == {"role": "assistant", "content": "next"}
