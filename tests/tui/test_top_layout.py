"""`llmd top` on a tall screen: the request table takes the rows it needs, the panels above
grow into the rest (taller sparklines), and no band of the screen stays empty."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from llmd.tui.formatting import sparkline, tall_sparkline
from llmd.tui.top.panels.requests import STATE_ROW_LINES
from tests.tui.sample_snapshots import WAITING, busy_wire, typed
from tests.tui.screen_text import screen_text
from tests.tui.test_top_app import deliver, make_app
from tests.tui.waiting import wait_for


def longest_blank_run(text: str) -> int:
    """The most consecutive screen lines with nothing on them."""
    longest = run = 0
    for line in text.splitlines():
        run = run + 1 if not line.strip() else 0
        longest = max(longest, run)
    return longest


def test_a_tall_sparkline_stacks_eight_levels_per_line():
    values = [0, 1, 2, 3, 4, 5, 6, 7, 8]
    assert tall_sparkline(values, 9, 1) == [sparkline(values, 9)]
    assert tall_sparkline(values, 9, 2, ceiling=8) == ["    ▁▂▄▆█", "▁▃▅▇█████"]
    assert tall_sparkline([], 3, 2) == ["   ", "   "]


@pytest.mark.parametrize("size", [(120, 40), (200, 50)])
async def test_a_tall_screen_leaves_no_empty_band(size):
    app, client, _ = make_app()
    async with app.run_test(size=size) as pilot:
        await deliver(pilot, client, range(len(WAITING)))
        await pilot.pause()
        text = screen_text(app)
        requests = app.query_one("#requests")
        num_rows = len(app.model.view().requests)
        assert requests.content_size.height == num_rows + 2  # titles, rows, footer
        assert app.query_one("#row-state").size.height > 10  # the state row took the rest
    assert longest_blank_run(text) <= 1


async def push_many_requests(app, pilot, client, num_requests: int = 40) -> None:
    """Push a snapshot whose table has `num_requests` live rows, and wait until it is shown."""
    wire = busy_wire(len(WAITING) - 1, app.feed.timeline_request_id)
    template = wire["requests"][0]
    wire["requests"] = [
        {**copy.deepcopy(template), "request_id": f"req-{100 + index}"}
        for index in range(num_requests)
    ]
    wire["num_requests"] = num_requests
    snapshot = typed(wire)
    await client.push(snapshot)
    await wait_for(pilot, lambda: app.model.snapshot is snapshot)
    await pilot.pause()


@pytest.mark.parametrize("size", [(120, 40), (200, 50)])
async def test_the_table_grows_for_more_requests_but_leaves_the_state_row_its_lines(size):
    app, client, _ = make_app()
    async with app.run_test(size=size) as pilot:
        await deliver(pilot, client, range(len(WAITING)))
        lines_before = app.query_one("#requests").content_size.height
        await push_many_requests(app, pilot, client)
        assert app.query_one("#requests").content_size.height > lines_before
        assert app.query_one("#row-state").size.height == STATE_ROW_LINES
        text = screen_text(app)
    assert "not shown: 7 zooms" in text
    lines = text.splitlines()
    assert len(lines) == size[1] and lines[-1].startswith(" q Quit")  # nothing pushed off


async def test_when_the_hints_grow_the_table_gives_lines_back_at_once():
    app, client, _ = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await deliver(pilot, client, range(len(WAITING)))
        await push_many_requests(app, pilot, client)
        table_lines = app.query_one("#requests").content_size.height
        view = app.model.view
        app.model.view = lambda: dataclasses.replace(view(), hints=view().hints * 2)
        for _ in range(3):  # the hints grow, the table makes room, then settles on its share
            app.redraw()
            await pilot.pause()
        assert app.query_one("#requests").content_size.height < table_lines
        assert app.query_one("#row-state").size.height == STATE_ROW_LINES
        assert screen_text(app).splitlines()[-1].startswith(" q Quit")
