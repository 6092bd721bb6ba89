"""`llmd top` on a tall screen: the request table takes the rows it needs, the panels above
grow into the rest (taller sparklines), and no band of the screen stays empty."""

from __future__ import annotations

import copy

import pytest

from llmd.tui.formatting import sparkline, tall_sparkline
from tests.tui.sample_snapshots import WAITING, busy_snapshot
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


async def test_the_table_grows_for_more_requests_up_to_its_share_of_the_screen():
    app, client, _ = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        await deliver(pilot, client, range(len(WAITING)))
        lines_before = app.query_one("#requests").content_size.height
        snapshot = busy_snapshot(len(WAITING) - 1, app.feed.timeline_request_id)
        template = snapshot["requests"][0]
        snapshot["requests"] = [
            {**copy.deepcopy(template), "request_id": f"req-{100 + index}"} for index in range(40)
        ]
        snapshot["num_requests"] = 40
        await client.push(snapshot)
        await wait_for(pilot, lambda: app.model.snapshot is snapshot)
        await pilot.pause()
        requests = app.query_one("#requests")
        assert lines_before < requests.content_size.height == int(50 * 0.4) - 1
        assert app.query_one("#row-state").size.height >= 6
        assert "not shown: 7 zooms" in screen_text(app)
