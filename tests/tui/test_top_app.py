"""`llmd top` under Pilot with a fake client: screen snapshots, keys, pause, reconnect."""

from __future__ import annotations

import pytest

from llmd.client import DaemonNotRunningError
from llmd.tui.top.app import create_top_app
from tests.tui.fake_client import FakeAsyncClient
from tests.tui.sample_snapshots import WAITING, busy_snapshot, speculating_snapshot
from tests.tui.screen_text import assert_matches_snapshot, screen_text
from tests.tui.waiting import wait_for

ADDRESS = "ipc:///run/user/1000/llmd/llmd.sock"


def make_app(slow_redraw_s: float = 0.0):
    client = FakeAsyncClient()
    num_connects = []

    def client_factory():
        num_connects.append(1)
        return client

    app = create_top_app(
        client_factory, ADDRESS, interval_s=0.25, clock=lambda: 0.0, slow_redraw_s=slow_redraw_s
    )
    return app, client, num_connects


async def deliver(pilot, client: FakeAsyncClient, steps, snapshot_of=busy_snapshot) -> None:
    """Push snapshots one at a time, each applied before the next (a deterministic history)."""
    app = pilot.app
    for step in steps:
        snapshot = snapshot_of(step, app.feed.timeline_request_id)
        await client.push(snapshot)
        await wait_for(pilot, lambda snapshot=snapshot: app.model.snapshot is snapshot)


@pytest.mark.parametrize("size", [(80, 24), (100, 30), (120, 40), (200, 50)])
async def test_screen_matches_the_stored_snapshot(size):
    app, client, _ = make_app()
    async with app.run_test(size=size) as pilot:
        await deliver(pilot, client, range(len(WAITING)))
        await pilot.pause()
        text = screen_text(app)
    assert_matches_snapshot(text, f"top_{size[0]}x{size[1]}.txt")


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
async def test_a_speculating_daemon_s_figures_fit_the_throughput_panel(size):
    app, client, _ = make_app()
    async with app.run_test(size=size) as pilot:
        await deliver(pilot, client, range(len(WAITING)), speculating_snapshot)
        await pilot.pause()
        text = screen_text(app)
    assert_matches_snapshot(text, f"top_spec_{size[0]}x{size[1]}.txt")
    if size[0] < 120:
        assert " spec      25% acc · 1.75/verify · 1.30/step" in text
    else:
        assert " spec      25% accepted · 1.75 tok/verify · 1.30 tok/step (5s)" in text


async def test_before_the_first_snapshot_it_says_it_is_connecting():
    app, _, _ = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        text = screen_text(app)
    assert f"○ connecting to {ADDRESS}" in text
    assert "waiting for the first snapshot" in text


async def test_keys_sort_select_and_ask_for_the_selected_timeline():
    app, client, _ = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await deliver(pilot, client, range(3))
        assert app.model.selected_request_id == "req-11"
        await pilot.press("down", "down")
        assert app.model.selected_request_id == "req-13"
        await deliver(pilot, client, range(3, 5))  # the feed re-subscribes for req-13
        assert client.subscribed_timelines[-1] == "req-13"
        assert app.model.view().timeline.request_id == "req-13"
        assert "req-13 running · age" in screen_text(app)
        await pilot.press("s")
        assert app.model.sort_key == "state"
        assert "state▼" in screen_text(app)
        await pilot.press("up")
        assert app.model.selected_request_id == "req-12"


async def test_pause_freezes_the_screen_and_resume_shows_the_newest_snapshot():
    app, client, _ = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await deliver(pilot, client, range(2))
        await pilot.press("p")
        assert "❚❚ paused" in screen_text(app)
        newest = busy_snapshot(9)
        for snapshot in (busy_snapshot(8), newest):
            await client.push(snapshot)
        await wait_for(pilot, lambda: app.feed.slot._snapshot is newest)
        assert app.model.snapshot.queue is not None
        assert app.model.snapshot.queue.waiting == WAITING[1]
        await pilot.press("p")
        assert app.model.snapshot is newest  # the one in between was skipped, not queued
        assert len(app.model.history["time"]) == 3


async def test_a_lost_daemon_is_reported_and_the_feed_reconnects():
    app, client, num_connects = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await deliver(pilot, client, range(2))
        await client.push(DaemonNotRunningError(f"no llmd daemon is answering at {ADDRESS}"))
        await wait_for(pilot, lambda: app.model.connection.status == "lost")
        text = screen_text(app)
        assert "✗ daemon gone, retrying in 0.2s (attempt 1" in text
        assert len(num_connects) == 1
        await deliver(pilot, client, range(2, 4))  # the daemon is back
        assert app.model.connection.status == "live"
        assert len(num_connects) == 2
        assert "● live" in screen_text(app)
    assert client.is_closed


async def test_q_quits():
    app, _, _ = make_app()
    async with app.run_test() as pilot:
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running)


def unwrapped(text: str) -> str:
    """The screen's words in order, whatever the line breaks."""
    return " ".join(text.split())


async def test_the_hidden_panels_note_follows_every_resize():
    app, client, _ = make_app()
    note = "hidden: 3 Prefill/decode, 6 Efficiency, 8 Timeline (press 3/6/8)"
    async with app.run_test(size=(200, 50)) as pilot:
        await deliver(pilot, client, range(len(WAITING)))
        for width, height in [(80, 24), (200, 50), (100, 30), (120, 40), (80, 24)]:
            await pilot.resize_terminal(width, height)
            await wait_for(pilot, lambda width=width: app.screen.size.width == width)
            await pilot.pause()
            await pilot.pause()
            text = unwrapped(screen_text(app))
            assert (note in text) == (width < 120), (width, height, text)
            assert ("hidden:" in text) == (width < 120), (width, height)


async def test_every_panel_is_reachable_at_80x24_by_its_number():
    app, client, _ = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await deliver(pilot, client, range(len(WAITING)))
        overview = screen_text(app)
        assert "hidden: 3 Prefill/decode, 6 Efficiency, 8 Timeline (press 3/6/8)" in overview
        assert "prefill chunks" not in overview and "of wall time in steps" not in overview
        await pilot.press("3")
        assert "steps/s" in screen_text(app) and "━3 Prefill/decode" in screen_text(app)
        await pilot.press("6")
        assert "of wall time in steps" in screen_text(app)
        await pilot.press("8")
        zoomed = screen_text(app)
        assert "prefill chunks (32+20+72)" in zoomed and "━7 Requests" not in zoomed
        await pilot.press("8")  # the same key again: back to the overview
        assert screen_text(app) == overview
        await pilot.press("z")
        assert app.zoomed_number == 1
        await pilot.press("escape")
        assert app.zoomed_number == 0


async def test_hints_wrap_and_each_one_is_shown_whole_or_counted():
    app, client, _ = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await deliver(pilot, client, range(len(WAITING)))
        hints = app.model.view().hints
        assert len(hints) == 3
        text = unwrapped(screen_text(app))
        assert hints[0].message in text and "+2 more hints: press 9" in text
        assert "…" not in text.split("9 Hints")[1]  # nothing below the title is cut
        await pilot.press("9")
        zoomed = unwrapped(screen_text(app))
        assert all(hint.message in zoomed for hint in hints)


async def test_live_requests_come_first_and_are_not_scrolled_away():
    app, client, _ = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await deliver(pilot, client, range(4))
        rows = [line.split()[:2] for line in screen_text(app).splitlines() if " req-" in line]
        states = [state for _, state in rows]
        first_finished = next(i for i, state in enumerate(states) if state.startswith("✓"))
        assert all(state.startswith("✓") for state in states[first_finished:])
        assert states[:first_finished] == ["running"] * 5 + ["waiting"]


async def test_only_the_panels_whose_data_changed_are_redrawn():
    from llmd.tui.top.panels.base import Panel

    app, client, _ = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await deliver(pilot, client, range(3))
        panels = list(app.query(Panel))
        assert not any(panel.show(app.model.view()) for panel in panels)  # nothing new
        app.model.cycle_sort()
        changed = [panel.id for panel in panels if panel.show(app.model.view())]
        assert changed == ["requests"]


async def test_slow_panels_wait_for_their_turn_unless_the_user_acts():
    app, client, _ = make_app(slow_redraw_s=60.0)
    async with app.run_test(size=(120, 40)) as pilot:
        await deliver(pilot, client, range(3))
        latency = app.query_one("#latency")
        queue = app.query_one("#queue")
        drawn = latency._drawn_state
        await deliver(pilot, client, range(3, 6))
        assert latency._drawn_state == drawn  # the 60 s window moved, the panel waited
        assert queue._drawn_state[1] == app.model.view().queue  # fast panels keep up
        await pilot.press("s")  # a key press redraws everything at once
        assert latency._drawn_state[1] == app.model.view().latency
