"""`llmd top` repaints only what changed: lines within a panel, and no layout per snapshot."""

from __future__ import annotations

import dataclasses

from textual.geometry import Region

from llmd.tui.top.panels.base import line_runs
from tests.tui.test_top_app import deliver, make_app


def spy_on_refreshes(widget) -> list[tuple[tuple[Region, ...], bool]]:
    """Record every `refresh(*regions, layout=...)` call on `widget` (regions, layout)."""
    calls: list[tuple[tuple[Region, ...], bool]] = []
    original = widget.refresh

    def refresh(*regions, **kwargs):
        calls.append((regions, bool(kwargs.get("layout"))))
        return original(*regions, **kwargs)

    widget.refresh = refresh
    return calls


def test_line_runs_group_consecutive_lines():
    assert line_runs([]) == []
    assert line_runs([1, 2, 5, 7, 8, 9]) == [(1, 3), (5, 6), (7, 10)]


async def test_moving_the_selection_repaints_only_the_two_rows_that_changed():
    app, client, _ = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await deliver(pilot, client, range(3))
        requests = app.query_one("#requests")
        calls = spy_on_refreshes(requests)
        before = requests.num_lines_repainted
        await pilot.press("down")
        await pilot.pause()
        assert app.model.selected_request_id == "req-12"
        # req-11 loses the highlight, req-12 gets it: two lines, nothing else
        assert requests.num_lines_repainted - before == 2
        width = requests.content_size.width
        assert calls == [((Region(0, 1, width, 2),), False)]  # rows 1-2 below the column titles


async def test_a_change_that_draws_the_same_text_repaints_nothing():
    app, client, _ = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await deliver(pilot, client, range(3))
        throughput = app.query_one("#throughput")
        view = app.model.view()
        shown = dataclasses.replace(view.throughput, total_prompt_tokens=12_300)
        assert throughput.show(dataclasses.replace(view, throughput=shown))
        calls = spy_on_refreshes(throughput)
        unseen = dataclasses.replace(shown, total_prompt_tokens=12_301)  # both draw "12.3k"
        assert throughput.show(dataclasses.replace(view, throughput=unseen))  # state changed...
        assert calls == []  # ...but no line did, so nothing is sent to the screen
        seen = dataclasses.replace(unseen, prompt_tokens_per_s=12_345.0)
        assert throughput.show(dataclasses.replace(view, throughput=seen))
        assert [regions[0].height for regions, _ in calls] == [1]  # only the prompt line
