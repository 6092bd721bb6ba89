"""`llmd chat` at every common terminal size: nothing the user needs is cut or hidden."""

from __future__ import annotations

import asyncio

import pytest
from textual.widgets import Static
from textual.widgets.markdown import MarkdownBlock

from llmd.tui.chat.assistant_reply import AssistantReply
from llmd.tui.chat.prompt_input import PromptInput
from tests.tui.fake_client import ScriptedReply
from tests.tui.screen_text import screen_text
from tests.tui.test_chat_app import make_app, notices, submit
from tests.tui.waiting import settle, wait_for

SIZES = [(80, 24), (100, 30), (120, 40), (200, 50)]
LONG_REPLY = [
    "The paged KV cache splits each sequence into fixed blocks, ",
    "so memory is allocated as tokens arrive and shared prefixes are stored once; ",
    "continuous batching then lets new requests join at every step.",
]
LIST_REPLY = [
    "Paged attention saves memory in two ways:",
    "\n\n- blocks are allocated as tokens arrive",
    "\n- shared prefixes are stored once",
]
"""A reply whose last chunk re-renders a block (the list), which takes the Markdown widget
several turns of the event loop."""


def words(text: str) -> list[str]:
    """The words of `text`, without the messages' border bars and the list bullets."""
    return [word for word in text.split() if word not in ("█", "▏", "•", "-")]


def assert_in_order(shown: list[str], expected: list[str], screen: str) -> None:
    """`expected` appears in `shown` as one unbroken run of words."""
    start = shown.index(expected[0])
    assert shown[start : start + len(expected)] == expected, screen


@pytest.mark.parametrize("size", SIZES)
async def test_a_long_exchange_is_readable_in_full_at_every_size(size):
    app, _ = make_app(ScriptedReply(LONG_REPLY), system_prompt="Be brief.")
    async with app.run_test(size=size) as pilot:
        await submit(pilot, "How does paged attention save memory in a serving engine?")
        await wait_for(pilot, lambda: not app.conversation.is_waiting)
        await settle(pilot)
        screen = screen_text(app)
        assert not notices(app) or all(text for text in notices(app))
    lines = screen.splitlines()
    assert len(lines) == size[1] and all(len(line) <= size[0] for line in lines)
    shown = words(screen)
    # Every word of the prompt and of the reply is on screen, in order (wrapped, never cut).
    assert_in_order(shown, words("How does paged attention save memory in a serving engine?"),
                    screen)  # fmt: skip
    assert_in_order(shown, words("".join(LONG_REPLY)), screen)
    assert "tiny-llama" in screen  # the header names the model
    assert "system prompt set" in " ".join(words(screen))  # the header is wrapped, not cut
    assert "tok/s" in screen  # the reply's stats line
    assert "Message the model" in screen  # the input's placeholder: ready for the next turn


@pytest.mark.parametrize("size", SIZES)
async def test_the_stats_line_waits_for_the_last_words_of_the_reply(size):
    # The last chunk and the finish arrive in one burst, once the earlier text is drawn:
    # the finish is handled while the Markdown widget is still re-rendering the list.
    last_chunk = asyncio.Event()
    reply = ScriptedReply(LIST_REPLY, chunk_delay_s=None, before_last_chunk=last_chunk)
    app, _ = make_app(reply)
    shown_with_stats: list[list[str]] = []
    async with app.run_test(size=size) as pilot:
        await submit(pilot, "How does paged attention save memory?")
        assistant_reply = app.query_one(AssistantReply)
        stats = assistant_reply.query_one(".reply-stats", Static)
        update_stats = stats.update

        def update_and_record(text: str = "") -> None:
            if "tok/s" in str(text):  # the final stats: the Markdown must hold every word
                blocks = assistant_reply.body.query(MarkdownBlock)
                shown_with_stats.append(words(" ".join(str(b.render()) for b in blocks)))
            update_stats(text)

        stats.update = update_and_record
        await wait_for(pilot, lambda: assistant_reply.text == "".join(LIST_REPLY[:-1]))
        await settle(pilot)
        last_chunk.set()
        await wait_for(pilot, lambda: not app.conversation.is_waiting)
        await settle(pilot)
        screen = screen_text(app)
    assert shown_with_stats == [words("".join(LIST_REPLY))]
    shown = words(screen)
    assert_in_order(shown, words("".join(LIST_REPLY)), screen)
    assert shown.index("TTFT") == shown.index(words(LIST_REPLY[-1])[-1]) + 1, screen


@pytest.mark.parametrize("size", SIZES)
async def test_text_that_lands_before_its_paragraph_refreshed_is_not_cut_off(size, monkeypatch):
    # On a loaded machine a new paragraph can get its first idle late: a layout sizes it
    # while its own refresh is still pending, and the rest of the reply lands before that
    # refresh is handled. Textual then keeps the old size and cuts the new lines off.
    # Holding the reply's blocks' refresh checks makes that ordering certain. (At 80x24 the
    # old code got away with it: "generating…" leaving the status bar shrinks it to one
    # line, and the new height of the conversation makes Textual size the paragraph again.)
    held: list[MarkdownBlock] = []

    def hold_if_in_reply(block: MarkdownBlock) -> None:
        if any(isinstance(node, AssistantReply) for node in block.ancestors):
            held.append(block)
        else:
            check_refresh(block)

    check_refresh = MarkdownBlock._check_refresh
    monkeypatch.setattr(MarkdownBlock, "_check_refresh", hold_if_in_reply)
    rest = "".join(LONG_REPLY[1:])
    last_chunk = asyncio.Event()
    app, _ = make_app(
        ScriptedReply([LONG_REPLY[0], rest], chunk_delay_s=None, before_last_chunk=last_chunk)
    )
    async with app.run_test(size=size) as pilot:
        app.query_one(PromptInput).value = "How does paged attention save memory?"
        await pilot.press("enter")  # not `submit`: the app cannot settle while blocks are held
        await wait_for(pilot, lambda: bool(app.query(AssistantReply)))
        body = app.query_one(AssistantReply).body
        await wait_for(
            pilot, lambda: any(block.region.height for block in body.query(MarkdownBlock))
        )
        last_chunk.set()  # the paragraph was sized for the first chunk and its refresh is pending
        await wait_for(pilot, lambda: not app.conversation.is_waiting)
        monkeypatch.setattr(MarkdownBlock, "_check_refresh", check_refresh)
        for block in held:  # the late idles
            block._check_refresh()
        await settle(pilot)
        screen = screen_text(app)
    shown = words(screen)
    assert_in_order(shown, words("".join(LONG_REPLY)), screen)
    assert shown.index("TTFT") == shown.index(words(LONG_REPLY[-1])[-1]) + 1, screen
