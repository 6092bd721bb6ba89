"""A chat that lasts: trimming to the context, restarts, /set, /save, multi-line prompts."""

from __future__ import annotations

import dataclasses
import io

from llmd.client import DaemonNotRunningError
from llmd.errors import RequestRejectedError
from llmd.sampling_params import SamplingParams
from llmd.tui.chat.assistant_reply import AssistantReply
from llmd.tui.chat.conversation import MESSAGE_OVERHEAD_CHARS, Conversation
from llmd.tui.chat.oneshot import EXIT_OK, run_once
from llmd.tui.chat.prompt_input import PromptInput
from tests.tui.fake_client import HEALTH, FakeClient, ScriptedReply
from tests.tui.test_chat_app import make_app, notices, press, submit
from tests.tui.waiting import wait_for


def test_the_oldest_exchanges_go_first_and_the_system_prompt_stays():
    params = SamplingParams(temperature=0.7, max_tokens=512)
    conversation = Conversation("Be kind.", params)  # 8 chars
    conversation.max_model_len = 512  # reply reserve: min(512, 256) = 256; prompt budget 256
    conversation.tokens_per_char = 0.25  # measured by the daemon on an earlier prompt
    for index in range(10):
        conversation.begin(f"q{index}")
        conversation.complete("a" * 188)  # each exchange: (2 + 12) + (188 + 12) = 214 chars
    # system 20 chars + new prompt "next" 16 chars + 214 per kept exchange, x 0.25 <= 256
    # -> at most 4 exchanges (4 x 214 + 36 = 892 chars = 223 tokens; 5 would be 276)
    messages = conversation.begin("next")
    assert messages[0] == {"role": "system", "content": "Be kind."}
    assert [m["content"] for m in messages[1::2]][:4] == ["q6", "q7", "q8", "q9"]
    assert len(messages) == 1 + 4 * 2 + 1
    assert conversation.num_trimmed == 6
    assert conversation.estimated_tokens() == round((892 + 0) * 0.25)
    assert MESSAGE_OVERHEAD_CHARS == 12


def test_the_daemons_count_sets_the_estimate_and_max_tokens_never_takes_the_whole_context():
    conversation = Conversation(None, dataclasses.replace(SamplingParams(), max_tokens=4096))
    conversation.max_model_len = 512
    assert conversation.reply_reserve() == 256  # max_tokens capped at half the context
    messages = [{"role": "user", "content": "x" * 88}]  # 100 chars with the overhead
    conversation.observe_prompt(messages, 30)
    assert conversation.tokens_per_char == 0.3


def test_the_transcript_is_plain_text():
    conversation = Conversation("Be kind.")
    conversation.begin("Hi")
    conversation.complete("Hello!")
    assert conversation.transcript() == "[system]\nBe kind.\n\n[user]\nHi\n\n[assistant]\nHello!\n"


async def test_a_prompt_the_daemon_finds_too_long_is_sent_again_with_less_history():
    error = RequestRejectedError("prompt has 300 tokens, but max_model_len is 256", "prompt")
    app, client = make_app(
        ScriptedReply(["one"]), ScriptedReply(error=error), ScriptedReply(["two"])
    )
    async with app.run_test() as pilot:
        await wait_for(pilot, lambda: app.conversation.max_model_len == 256)  # from stats
        await submit(pilot, "first")
        await wait_for(pilot, lambda: len(app.conversation.turns) == 2)
        await submit(pilot, "second")
        await wait_for(pilot, lambda: len(client.requests) == 3 and not app.conversation.is_waiting)
        texts = notices(app)
        num_prompts_shown = len(app.query(".prompt"))
    assert client.requests[2]["messages"] == [{"role": "user", "content": "second"}]
    assert app.conversation.turns[-1] == {"role": "assistant", "content": "two"}
    assert (
        "Dropped the oldest exchange so the conversation fits the model's 256-token context."
        in texts
    )
    assert num_prompts_shown == 2  # "first" and "second": the retry does not show it again


async def test_a_restart_and_a_stopped_daemon_are_told_apart_from_esc():
    app, client = make_app(ScriptedReply(["partial"], hold=True))
    async with app.run_test() as pilot:
        await wait_for(pilot, lambda: app.daemon_health is not None)
        client.health_error = DaemonNotRunningError(
            "no llmd daemon is answering at ipc:///tmp/fake.sock (no reply for 5s)", "address"
        )
        app._fetch_health()
        await wait_for(pilot, lambda: app.is_daemon_lost)
        status = str(app.query_one("#status").render())
        assert status.startswith("tiny-llama (daemon stopped)")
        client.health_error = None
        restarted = {**HEALTH, "pid": 5000, "model": "other-model"}
        client.health = lambda: _coro(restarted)
        app._fetch_health()
        await wait_for(pilot, lambda: app.model_name == "other-model")
        texts = notices(app)
    assert "The daemon stopped answering at ipc:///tmp/fake.sock; the chat reconnects" in (
        " ".join(texts)
    )
    assert "The daemon restarted (pid 4242 → 5000), now serving other-model." in " ".join(texts)


async def test_a_daemon_that_stops_while_the_chat_is_idle_is_noticed(monkeypatch):
    # A real client fails a health check only after its timeout, longer than the poll
    # interval: each poll must wait for the last one instead of cancelling it.
    monkeypatch.setattr("llmd.tui.chat.daemon_watch.HEALTH_POLL_S", 0.05)
    app, client = make_app()
    async with app.run_test() as pilot:
        await wait_for(pilot, lambda: app.daemon_health is not None)
        client.health_delay_s = 0.3
        client.health_error = DaemonNotRunningError("no reply for 0.3s", "address")
        status = app.query_one("#status")
        await wait_for(pilot, lambda: str(status.render()).startswith("tiny-llama (daemon stop"))
        texts = notices(app)
    assert any(text.startswith("The daemon stopped answering") for text in texts)


async def _coro(value):
    return value


async def test_a_reply_the_daemon_aborts_says_so():
    app, client = make_app(ScriptedReply(["partial"], hold=True))
    async with app.run_test() as pilot:
        await submit(pilot, "go")
        reply = app.query_one(AssistantReply)
        await wait_for(pilot, lambda: reply.text == "partial")
        await client.abort("fake-1")  # the daemon ends it (draining), not the user
        await wait_for(pilot, lambda: not app.conversation.is_waiting)
        stats = str(reply.query_one(".reply-stats").render())
    assert stats.endswith("· abort (the daemon ended it: stopping?)")


async def test_set_alone_lists_every_setting_and_save_writes_the_transcript(tmp_path):
    app, _ = make_app(ScriptedReply(["Hello!"]))
    async with app.run_test() as pilot:
        await submit(pilot, "/set")
        listing = notices(app)[-1]
        await submit(pilot, "Hi")
        await wait_for(pilot, lambda: len(app.conversation.turns) == 2)
        await submit(pilot, f"/save {tmp_path / 'chat.txt'}")
        await submit(pilot, f"/save {tmp_path / 'missing' / 'chat.txt'}")
        texts = notices(app)
    for name in ("temperature", "top_p", "top_k", "min_p", "max_tokens", "seed",
                 "repetition_penalty", "presence_penalty", "frequency_penalty"):  # fmt: skip
        assert f"\n{name} " in f"\n{listing}"
    assert (tmp_path / "chat.txt").read_text() == "[user]\nHi\n\n[assistant]\nHello!\n"
    assert texts[-1].startswith("Cannot save to ") and "No such file or directory" in texts[-1]


async def test_enter_while_a_reply_streams_keeps_the_typed_text_and_lines_can_be_added():
    app, client = make_app(ScriptedReply(["partial"], hold=True), ScriptedReply(["ok"]))
    async with app.run_test() as pilot:
        await submit(pilot, "first")
        prompt = app.query_one(PromptInput)
        await press(pilot, "n", "e", "x", "t", "enter")
        assert prompt.value == "next"  # not sent, not lost
        await press(pilot, "escape")
        await wait_for(pilot, lambda: not app.conversation.is_waiting)
        await pilot.press("ctrl+j", "l", "i", "n", "e", "enter")
        await wait_for(pilot, lambda: len(client.requests) == 2)
    assert client.requests[1]["messages"][-1] == {"role": "user", "content": "next\nline"}


def max_tokens_refusal(num_prompt_tokens: int, max_tokens: int, context: int):
    return RequestRejectedError(
        f"prompt ({num_prompt_tokens} tokens) plus max_tokens ({max_tokens}) is "
        f"{num_prompt_tokens + max_tokens} tokens, but max_model_len is {context}",
        "max_tokens",
        num_prompt_tokens=num_prompt_tokens,
        max_model_len=context,
        max_fitting_tokens=context - num_prompt_tokens,
    )


async def test_a_max_tokens_beyond_the_context_asks_for_what_fits_instead_of_failing():
    app, client = make_app(ScriptedReply(error=max_tokens_refusal(118, 400, 512)),
                           ScriptedReply(["fits"]))  # fmt: skip
    async with app.run_test() as pilot:
        await submit(pilot, "/set max_tokens 400")
        await submit(pilot, "long chat")
        await wait_for(pilot, lambda: len(app.conversation.turns) == 2)
        texts = notices(app)
        replies = [reply.text for reply in app.query(AssistantReply)]
    assert [request["params"].max_tokens for request in client.requests] == [400, 394]
    assert app.conversation.params.max_tokens == 400  # the setting stays; this reply fits
    assert app.conversation.turns[-1] == {"role": "assistant", "content": "fits"}
    assert replies == ["fits"]  # the refused attempt leaves no empty reply behind
    assert texts[-1] == (
        "max_tokens 400 does not fit: the prompt has 118 tokens of the model's 512-token "
        "context, so this reply may use at most 394."
    )


def test_one_shot_asks_for_what_fits_the_context():
    client = FakeClient(ScriptedReply(error=max_tokens_refusal(7, 1000, 512)),
                        ScriptedReply(["fits"]))  # fmt: skip
    out, err = io.StringIO(), io.StringIO()
    params = dataclasses.replace(SamplingParams(), max_tokens=1000)
    assert run_once(client, "q", params, out, err) == EXIT_OK
    assert [request["params"].max_tokens for request in client.requests] == [1000, 505]
    assert out.getvalue() == "fits\n"
    assert err.getvalue() == (
        "warning: --max-tokens 1000 does not fit: the prompt has 7 tokens and the context "
        "512, so at most 505 tokens will be generated\n"
    )
