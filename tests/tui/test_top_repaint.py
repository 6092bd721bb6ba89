"""`llmd top` repaints only what changed: lines within a panel, and no layout per snapshot."""

from __future__ import annotations

import dataclasses
import time

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


async def test_snapshots_whose_hints_come_and_go_do_not_lay_out_the_screen_again():
    app, client, _ = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await deliver(pilot, client, range(8))  # three hints showing
        layouts = []
        original = app.screen._refresh_layout

        def refresh_layout(*args, **kwargs):
            layouts.append(args)
            return original(*args, **kwargs)

        app.screen._refresh_layout = refresh_layout
        hint_sets = set()
        for step in (*range(8, 20), *range(0, 8)):  # the set drops to one hint, then grows back
            await deliver(pilot, client, [step])
            hint_sets.add(tuple(hint.name for hint in app.model.view().hints))
        await pilot.pause()
        assert len(hint_sets) == 3
        assert layouts == []


async def test_the_hints_panel_gives_lines_back_only_after_fewer_hints_lasted():
    from llmd.tui.top.panels.base import SHRINK_AFTER_S

    app, client, _ = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await deliver(pilot, client, range(8))
        hints = app.query_one("#hints")
        many = app.model.view()
        few = dataclasses.replace(many, hints=many.hints[-1:])
        lines = hints.content_size.height
        calls = spy_on_refreshes(hints)

        def layouts() -> int:
            return sum(1 for _, is_layout in calls if is_layout)

        hints.show(few, now=100.0)
        hints.show(many, now=101.0)  # back before the delay: the lines were kept
        hints.show(few, now=102.0)
        hints.show(few, now=102.0 + SHRINK_AFTER_S - 0.5)
        assert layouts() == 0
        hints.show(few, now=102.0 + SHRINK_AFTER_S)
        assert layouts() == 1
        await pilot.pause()
        assert hints.content_size.height < lines
        before = layouts()  # the resize itself refreshed the panel with a layout
        hints.show(many, now=200.0)  # more hints: the panel grows at once
        assert layouts() == before + 1
        await pilot.pause()
        assert hints.content_size.height == lines


async def test_unchanged_lines_reuse_their_rendered_strips():
    app, client, _ = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await deliver(pilot, client, range(3))
        requests = app.query_one("#requests")
        before = list(requests._strips)
        await pilot.press("down")
        await pilot.pause()
        after = requests._strips
        assert len(after) == len(before)
        reused = [y for y, (old, new) in enumerate(zip(before, after)) if old is new]
        assert len(reused) == len(after) - 2  # only the two rows whose highlight moved


async def test_a_clock_tick_repaints_only_when_no_snapshot_did_for_a_second():
    from llmd.tui.top.app import CLOCK_TICK_S

    app, client, _ = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await deliver(pilot, client, range(3))
        redraws = []
        redraw = app.redraw
        app.redraw = lambda *args, **kwargs: (redraws.append(1), redraw(*args, **kwargs))
        app._on_clock_tick()  # a snapshot was just drawn
        assert redraws == []
        app.last_redraw_at -= CLOCK_TICK_S  # no snapshot for a second: the tick catches up
        app._on_clock_tick()
        assert redraws == [1]


async def test_a_slow_panel_due_a_moment_later_draws_with_this_snapshot():
    app, client, _ = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await deliver(pilot, client, range(3))
        latency = app.query_one("#latency")
        view = app.model.view()
        drawn = dataclasses.replace(view.latency, window_s=45.0)
        start = time.monotonic() + 100.0  # after the app's own draws
        assert latency.show(dataclasses.replace(view, latency=drawn), now=start)
        moved = dataclasses.replace(view.latency, window_s=30.0)
        assert not latency.show(dataclasses.replace(view, latency=moved), start + 0.5, 1.0)
        # snapshots a second apart arrive a few ms early or late: 0.95 s counts as due
        assert latency.show(dataclasses.replace(view, latency=moved), start + 0.95, 1.0)


async def test_a_new_theme_or_width_renders_every_line_again():
    app, client, _ = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await deliver(pilot, client, range(3))
        queue = app.query_one("#queue")
        dark = list(queue._strips)
        app.theme = "textual-light"
        await pilot.pause()
        queue.render_line(0)
        assert all(old is not new and old != new for old, new in zip(dark, queue._strips))
        await pilot.resize_terminal(140, 40)
        await pilot.pause()
        queue.render_line(0)
        width = queue.content_size.width
        assert width != dark[0].cell_length
        assert all(strip.cell_length == width for strip in queue._strips)
