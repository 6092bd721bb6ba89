"""`llmd top` for a fleet under Pilot with fake daemons: the table at 80x24 and 200x50, the
totals, drill-in and back, and a daemon marked down when it fails or falls silent."""

from __future__ import annotations

import time

import pytest

from llmd.client import DaemonNotRunningError
from tests.tui.fleet_fakes import FLEET_ADDRESSES, deliver, fleet_snapshot, make_fleet
from tests.tui.screen_text import assert_matches_snapshot, screen_text
from tests.tui.waiting import settle, wait_for


async def run_three(pilot, clients) -> None:
    """Daemons 0 and 1 answer (two snapshots each); daemon 2 is refused at once."""
    for step in range(2):
        for index in (0, 1):
            await deliver(pilot, clients[index], index, step)
    await clients[2].push(DaemonNotRunningError("no llmd daemon is answering"))
    await wait_for(pilot, lambda: pilot.app.models[2].connection.status == "lost")
    await settle(pilot)


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
async def test_fleet_screen_matches_the_stored_snapshot(size):
    app, clients = make_fleet()
    async with app.run_test(size=size) as pilot:
        await run_three(pilot, clients)
        text = screen_text(app)
    assert_matches_snapshot(text, f"top_fleet_{size[0]}x{size[1]}.txt")


async def test_rows_and_totals_hold_each_daemons_figures():
    app, clients = make_fleet()
    async with app.run_test(size=(200, 50)) as pilot:
        await run_three(pilot, clients)
        view = app.fleet_view()
    first, second, third = view.rows
    assert [row.health for row in view.rows] == ["up", "up", "down"]
    assert (first.waiting, first.running, second.waiting, second.running) == (1, 2, 2, 4)
    assert second.kv_usage == pytest.approx(60 / 128)
    assert second.decode_tokens_per_s == pytest.approx(200.0)
    assert (second.ttft_p50_s, second.tpot_p99_s) == pytest.approx((0.1, 0.016))
    assert third.reason == "daemon_not_running: no llmd daemon is answering"
    totals = view.totals
    assert view.num_up == 2
    assert (totals.waiting, totals.running) == (3, 6)
    assert totals.decode_tokens_per_s == pytest.approx(300.0)
    assert totals.kv_usage == pytest.approx(90 / 256)  # pooled blocks, not a mean of shares
    assert totals.prefix_hit_rate == pytest.approx(300 / 1800)
    assert (totals.ttft_p50_s, totals.ttft_p99_s) == pytest.approx((0.1, 0.4))  # the worst


async def test_enter_drills_into_the_selected_daemon_and_escape_returns():
    app, clients = make_fleet()
    async with app.run_test(size=(120, 40)) as pilot:
        await run_three(pilot, clients)
        await pilot.press("down", "enter")
        await settle(pilot)
        assert app.drilled_index == 1 and app.model is app.models[1]
        text = screen_text(app)
        assert "fleet of 3" not in text
        assert FLEET_ADDRESSES[1] in text  # the drilled daemon's header
        assert "waiting for the first snapshot" not in text
        await deliver(pilot, clients[1], 1, 2)  # its panels follow its feed
        assert app.model.view().queue.waiting == 2 * 2
        await pilot.press("escape")
        await settle(pilot)
        assert app.drilled_index is None
        assert "fleet of 3 daemons · 2 up" in screen_text(app)


async def test_escape_first_unzooms_a_zoomed_panel_then_returns_to_the_fleet():
    app, clients = make_fleet()
    async with app.run_test(size=(80, 24)) as pilot:
        await run_three(pilot, clients)
        await pilot.press("enter", "2")
        assert app.zoomed_number == 2
        await pilot.press("escape")
        assert (app.zoomed_number, app.drilled_index) == (0, 0)
        await pilot.press("escape")
        assert app.drilled_index is None


async def test_a_silent_daemon_is_marked_down_and_comes_back_when_it_answers():
    now = [100.0]
    app, clients = make_fleet(clock=lambda: now[0])
    async with app.run_test(size=(80, 24)) as pilot:
        for index in range(3):
            await deliver(pilot, clients[index], index, 0)
        now[0] += 0.9
        for index in (0, 1):
            await deliver(pilot, clients[index], index, 1)
        assert [row.health for row in app.fleet_view().rows] == ["up", "up", "up"]
        now[0] += 0.2  # daemon 2 silent 1.1 s: past the 1 s the default interval allows
        await wait_for(pilot, lambda: "gpu2.sock down: silent 1.1s" in screen_text(app))
        assert app.fleet_view().rows[2].health == "down"
        await deliver(pilot, clients[2], 2, 1)
        assert app.fleet_view().rows[2].health == "up"
        assert app.is_running


async def test_a_stopped_daemon_shows_down_within_two_seconds_of_real_time():
    app, clients = make_fleet(clock=time.monotonic)
    async with app.run_test(size=(80, 24)) as pilot:
        for index in range(3):
            await deliver(pilot, clients[index], index, 0)
        stopped_at = time.monotonic()
        while app.fleet_view().rows[0].health != "down" or "down" not in screen_text(app):
            for index in (1, 2):  # the others keep answering at the refresh rate
                await clients[index].push(fleet_snapshot(index, 1))
            await pilot.pause(0.25)
            assert time.monotonic() - stopped_at < 2.0
        assert [row.health for row in app.fleet_view().rows] == ["down", "up", "up"]
        assert all(len(model.history["time"]) >= 2 for model in app.models[1:])  # not held up


async def test_a_tick_after_the_table_is_gone_does_nothing():
    """The fleet timer can fire once more while the app closes (its widgets already gone):
    that redraw must be a no-op, not a NoMatches out of the test's or user's exit."""
    from llmd.tui.top.fleet_table import FleetTable

    app, _ = make_fleet()
    async with app.run_test(size=(80, 24)) as pilot:
        await app.query_one(FleetTable).remove()
        await settle(pilot)
        app.show_fleet()
        assert not app.query(FleetTable)
