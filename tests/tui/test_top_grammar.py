"""`llmd top` with structured outputs: the grammar slice of the step, the grammar line and
the compile queue, at every screen size; without constrained requests the screen is as before."""

from __future__ import annotations

import pytest

from llmd.tui.top.model import TopModel
from tests.tui.sample_snapshots import WAITING, busy_wire, typed
from tests.tui.screen_text import screen_text
from tests.tui.test_top_app import make_app
from tests.tui.waiting import wait_for

SIZES = [(80, 24), (100, 30), (120, 40), (200, 50)]
STEPS_PANEL_KEY = "3"
"""Zooms the Prefill/decode panel, hidden on screens under 120 columns."""


def grammar_wire(step: int, timeline_request_id: str | None = None) -> dict:
    """`busy_wire` of a daemon that serves constrained requests."""
    wire = busy_wire(step, timeline_request_id)
    wire["step"]["grammar_ms"] = 0.66  # 10% of the 6.6 ms step
    wire["grammar"] = {
        "requests_by_kind": {"json": 7, "regex": 2, "choice": 0, "json_object": 0, "grammar": 0},
        "num_compiles": 3,
        "num_cache_hits": 6,
        "num_compile_failures": 1,
        "num_compile_timeouts": 0,
        "num_waiting": 2,
        "compile_time": {"count": 3, "mean": 0.02, "p50": 0.0042, "p90": 0.031, "p99": 0.058,
                         "max": 0.06},
        "compile_histogram": {"bounds": [0.01, 0.1], "counts": [1, 2, 0], "sum": 0.07,
                              "count": 3},
    }  # fmt: skip
    return wire


def test_the_model_reads_the_grammar_phase_line_and_queue():
    model = TopModel(clock=lambda: 0.0)
    model.apply(typed(grammar_wire(0)))
    view = model.view()
    assert view.steps.phase_ms["grammar"] == 0.66
    grammar = view.steps.grammar
    assert grammar is not None
    assert (grammar.num_requests, grammar.num_compiles, grammar.num_cache_hits) == (9, 3, 6)
    assert (grammar.num_failed, grammar.compile_p99_s) == (1, 0.058)
    assert view.queue.waiting_for_grammar == 2


def test_without_constrained_requests_there_is_no_grammar_line_or_queue():
    wire = busy_wire(0)
    wire["grammar"] = {"num_waiting": 0}  # a daemon that has seen none yet
    model = TopModel(clock=lambda: 0.0)
    model.apply(typed(wire))
    view = model.view()
    assert view.steps.grammar is None and view.queue.waiting_for_grammar is None
    model.apply(typed(busy_wire(1)))  # a daemon that predates the grammar section
    assert model.view().steps.grammar is None and model.view().steps.phase_ms["grammar"] is None


async def _deliver_grammar(pilot, client) -> None:
    app = pilot.app
    for step in range(len(WAITING)):
        snapshot = typed(grammar_wire(step, app.feed.timeline_request_id))
        await client.push(snapshot)
        await wait_for(pilot, lambda snapshot=snapshot: app.model.snapshot is snapshot)
    await pilot.pause()


@pytest.mark.parametrize("size", SIZES)
async def test_the_steps_panel_shows_the_grammar_slice_and_line_at_every_size(size):
    width, height = size
    app, client, _ = make_app()
    async with app.run_test(size=size) as pilot:
        await _deliver_grammar(pilot, client)
        overview = screen_text(app)
        await pilot.press(STEPS_PANEL_KEY)
        await pilot.pause()
        zoomed = screen_text(app)
    for text in (overview, zoomed):
        lines = text.splitlines()
        assert len(lines) == height and lines[-1].startswith(" q Quit"), text  # nothing lost
    assert "grammar 2" in overview, overview  # the compile queue, on its own line or joined
    if width >= 120:  # the steps panel is on the overview: its legend has the grammar slice
        assert "gram 10%" in overview or "grammar 10%" in overview, overview
    assert "━3 Prefill/decode" in zoomed and "steps/s" in zoomed
    joined = " ".join(zoomed.split())  # the legend and the grammar line may wrap
    assert "grammar 10%" in joined, zoomed  # a zoomed panel is wide: full phase names
    assert "grammar 9 req · 3 compiled, 6 cached" in joined, zoomed
    assert "compile 4.2ms p50 31ms p90 58ms p99 · 1 failed" in joined, zoomed


async def test_without_constrained_requests_the_legend_has_no_grammar_slice():
    app, client, _ = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        for step in range(len(WAITING)):
            snapshot = typed(busy_wire(step, app.feed.timeline_request_id))
            await client.push(snapshot)
            await wait_for(pilot, lambda snapshot=snapshot: app.model.snapshot is snapshot)
        await pilot.pause()
        text = screen_text(app)
    assert "steps/s" in text and "forward" in text
    assert "grammar" not in text
