"""`llmd chat` at every common terminal size: nothing the user needs is cut or hidden."""

from __future__ import annotations

import pytest

from tests.tui.fake_client import ScriptedReply
from tests.tui.screen_text import screen_text
from tests.tui.test_chat_app import make_app, notices, submit
from tests.tui.waiting import wait_for

LONG_REPLY = [
    "The paged KV cache splits each sequence into fixed blocks, ",
    "so memory is allocated as tokens arrive and shared prefixes are stored once; ",
    "continuous batching then lets new requests join at every step.",
]


def words(text: str) -> list[str]:
    """The words of `text`, without the messages' border bars."""
    return [word for word in text.split() if word not in ("█", "▏")]


@pytest.mark.parametrize("size", [(80, 24), (100, 30), (120, 40), (200, 50)])
async def test_a_long_exchange_is_readable_in_full_at_every_size(size):
    app, _ = make_app(ScriptedReply(LONG_REPLY), system_prompt="Be brief.")
    async with app.run_test(size=size) as pilot:
        await submit(pilot, "How does paged attention save memory in a serving engine?")
        await wait_for(pilot, lambda: not app.conversation.is_waiting)
        await pilot.pause()
        screen = screen_text(app)
        assert not notices(app) or all(text for text in notices(app))
    lines = screen.splitlines()
    assert len(lines) == size[1] and all(len(line) <= size[0] for line in lines)
    shown = words(screen)
    reply_words = words("".join(LONG_REPLY))
    # Every word of the prompt and of the reply is on screen, in order (wrapped, never cut).
    for expected in (words("How does paged attention save memory in a serving engine?"),
                     reply_words):  # fmt: skip
        start = shown.index(expected[0])
        assert shown[start : start + len(expected)] == expected, (size, screen)
    assert "tiny-llama" in screen  # the header names the model
    assert "system prompt set" in " ".join(words(screen))  # the header is wrapped, not cut
    assert "tok/s" in screen  # the reply's stats line
    assert "Message the model" in screen  # the input's placeholder: ready for the next turn
