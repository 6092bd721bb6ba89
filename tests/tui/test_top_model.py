"""The headless side of `llmd top`: reading snapshots, history, selection, drawing helpers."""

from __future__ import annotations

import dataclasses

import pytest

from llmd.metrics import CACHED, FREE, SHARED
from llmd.protocol.engine_sections import RequestTimeline
from llmd.tui.backoff import Backoff
from llmd.tui.formatting import bar, fmt_number, fmt_seconds, fmt_uptime, sparkline
from llmd.tui.top.block_grid import fit_cells, glyph, grid_rows
from llmd.tui.top.feed import LatestSlot
from llmd.tui.top.model import TopModel, slope
from llmd.tui.top.sorting import sort_rows
from llmd.tui.top.timeline_strip import queued_spans, timeline_strip
from llmd.wait_breakdown import WaitBreakdown
from tests.tui.sample_snapshots import busy_snapshot, busy_wire, request_row, typed


def model_after(num_snapshots: int, **kwargs) -> TopModel:
    model = TopModel(clock=lambda: 0.0)
    for step in range(num_snapshots):
        model.apply(busy_snapshot(step, **kwargs))
    return model


def test_history_turns_totals_into_per_interval_rates():
    model = model_after(3)
    history = model.history
    # The first point is the window average; later ones are deltas of the totals.
    assert list(history["prompt_per_step"]) == [6.2, 940 / 150, 940 / 150]
    assert list(history["generation_per_s"]) == [543.3, 590 / 0.25, 590 / 0.25]
    assert list(history["waiting"]) == [0, 0, 1]
    view = model.view()
    assert view.throughput.generation_history == tuple(history["generation_per_s"])
    assert view.queue.waiting_history == (0, 0, 1)


def test_a_restarted_daemon_does_not_produce_negative_rates():
    model = model_after(5)
    model.apply(busy_snapshot(1))  # totals went down: a new daemon
    assert model.history["prompt_per_s"][-1] == 480.0


def test_queue_trend_and_recent_preemptions():
    view = model_after(20).view()
    assert view.queue.waiting == 18
    assert view.queue.waiting_growth_per_s == pytest.approx(3.66, abs=0.05)
    assert view.queue.recent_preemptions == 11  # 0 at step 8, 11 at step 19
    assert slope([0, 1, 2], [5, 5, 5]) == 0.0 and slope([1], [2]) is None


def test_an_automatic_selection_moves_to_the_top_row_when_its_request_leaves():
    model = model_after(1)
    assert model.selected_request_id == "req-11"
    snapshot = busy_snapshot(1)
    assert snapshot.requests is not None
    snapshot = dataclasses.replace(snapshot, requests=snapshot.requests[1:])  # req-11 left
    model.apply(snapshot)
    assert model.selected_request_id == "req-12"


def test_selection_sticks_to_its_request_even_after_it_leaves_the_table():
    model = model_after(1)
    assert model.selected_request_id == "req-11"  # the first row is selected at once
    model.move_selection(2)
    assert model.selected_request_id == "req-13"
    model.move_selection(100)
    assert model.selected_request_id == "req-10"  # the last row (finished)
    model.cycle_sort()  # state: running first; the selected request stays selected
    assert model.sort_key == "state" and model.selected_request_id == "req-10"
    # req-10 left the table: it stays selected until the user moves
    snapshot = dataclasses.replace(busy_snapshot(1), recent=())
    model.apply(snapshot)
    assert model.selected_request_id == "req-10"
    assert model.view().selected_request_id == "req-10"
    model.move_selection(-1)  # moves from where it was: the last row, then one up
    assert model.selected_request_id == "req-16"


def test_a_timeline_for_another_request_is_not_shown():
    model = model_after(2, timeline_request_id="req-11")
    assert model.view().timeline.request_id == "req-11"
    model.move_selection(1)
    assert model.view().timeline is None


def test_a_dead_engine_snapshot_with_few_sections_still_renders():
    wire = busy_wire(0)
    wire["daemon"].update(state="dead", error="boom", model="m")
    wire.update(latency={}, queue=None, kv=None, requests=None, num_requests=None, recent=None)
    wire.update(block_map=None)
    model = TopModel(clock=lambda: 0.0)
    model.apply(typed(wire))
    view = model.view()
    assert view.header.state == "dead" and view.header.error == "boom"
    assert view.requests == () and view.kv.cells == () and view.timeline is None
    assert view.latency.percentiles["ttft"] == (None, None, None)


def test_pause_and_connection_state():
    now = [100.0]
    model = TopModel(clock=lambda: now[0])
    model.apply(busy_snapshot(0))
    now[0] = 105.0
    model.set_lost("daemon_not_running: gone", 0.5, 2)
    model.toggle_pause()
    connection = model.view().connection
    assert (connection.status, connection.retry_in_s, connection.num_attempts) == ("lost", 0.5, 2)
    assert connection.is_paused and connection.last_update_age_s == 5.0
    model.set_live()
    assert model.connection.status == "live" and model.connection.message == ""


def test_sorting_keeps_finished_rows_last():
    rows = [
        request_row("a", "running", num_generated_tokens=5, age_s=1.0),
        request_row("b", "finished", num_generated_tokens=50, age_s=9.0),
        request_row("c", "waiting", num_generated_tokens=0, age_s=3.0, ttft_s=None),
        request_row("d", "running", num_generated_tokens=9, age_s=2.0, ttft_s=0.2),
    ]
    keys = ("age", "generated", "state", "ttft")
    order = {key: [row.request_id for row in sort_rows(rows, key)] for key in keys}
    assert order == {
        "age": ["c", "d", "a", "b"],
        "generated": ["d", "a", "c", "b"],
        "state": ["a", "d", "c", "b"],
        "ttft": ["d", "a", "c", "b"],
    }


def test_timeline_strip_marks_queue_prefill_decode_and_preemption():
    timeline = RequestTimeline(
        request_id="r",
        label=None,
        state="running",
        waiting_on=None,
        waits=WaitBreakdown(),
        age_s=10.0,
        first_scheduled_s=1.0,
        first_token_s=None,
        finished_s=None,
        events=((1.0, "prefill", 16), (5.0, "preempted", 0), (7.0, "prefill", 32)),
        token_times_s=(2.0, 2.1, 3.0, 8.0),
        num_tokens_total=4,
    )
    assert queued_spans(timeline) == [(0.0, 1.0), (5.0, 7.0)]
    assert timeline_strip(timeline, 10) == "·P█▅ X·P▅ "
    assert timeline_strip(timeline, 0) == ""


def test_block_grid_merges_cells_with_owner_priority():
    cells = [FREE, CACHED, FREE, 0, SHARED, FREE, CACHED, CACHED]
    assert fit_cells(cells, 4) == ([CACHED, 0, SHARED, CACHED], 2)
    rows, group = grid_rows(cells, width=4, max_rows=1)
    assert group == 2 and "".join(glyph(c) for c in rows[0]) == "░A≡░"
    assert grid_rows(cells, width=8, max_rows=3) == ([cells], 1)
    assert glyph(27) == "b"


def test_formatting_helpers():
    assert [fmt_seconds(v) for v in (None, 0.0004, 0.0451, 2.5, 4000)] == [
        "-",
        "400µs",
        "45.1ms",
        "2.5s",
        "1h06m",
    ]
    assert fmt_uptime(59) == "59s" and fmt_uptime(90061) == "1d01h"
    assert [fmt_number(v) for v in (None, 7, 12.5, 3400, 1.2e6)] == [
        "-",
        "7",
        "12.5",
        "3.4k",
        "1.2M",
    ]
    assert sparkline([0, 1, 2, 4], 6) == "  ▁▃▅█"
    assert sparkline([0, 0], 2) == "▁▁" and sparkline([], 2) == "  "
    assert bar((0.5, 0.25), "█▒", 8, "·") == "████▒▒··"


def test_backoff_doubles_caps_and_resets():
    backoff = Backoff(initial_s=0.25, max_s=1.0)
    assert [backoff.next_delay() for _ in range(4)] == [0.25, 0.5, 1.0, 1.0]
    backoff.reset()
    assert backoff.next_delay() == 0.25


def test_latest_slot_keeps_only_the_newest_and_signals_once():
    slot = LatestSlot()
    first, second = busy_snapshot(1), busy_snapshot(2)
    assert slot.put(first) is True
    assert slot.put(second) is False  # the app was already told
    assert slot.take() is second and slot.take() is None


def test_efficiency_against_a_known_peak_and_without_one():
    from llmd.tui.top.panels.efficiency import against_peak
    from llmd.tui.top.panels.throughput import peak_note

    assert against_peak(2400.0, 4800.0, "GB/s", 40).plain == (
        "2.4k GB/s, 50% of 4.8k " + "█" * 8 + "░" * 9
    )
    measured = against_peak(6.0, 12.0, "GB/s", 60, source="measured")
    assert measured.plain.startswith("6 GB/s, 50% of measured peak 12 ")
    assert against_peak(0.19, None, "GB/s", 40).plain == "0.19 GB/s · no device peak"
    assert against_peak(0.15, None, "GB/s", 40, best=0.2).plain == (
        "0.15 GB/s, 75% of the best seen (0.2) · no device peak"
    )
    assert against_peak(None, 4800.0, "GB/s", 40).plain == "- GB/s"
    assert peak_note(120.0, 989.0) == " (12% of peak)"
    assert peak_note(0.15, None, 0.2) == " (75% of best)"
    assert peak_note(0.5, None) == "" and peak_note(None, 1.0) == ""


def test_the_best_rates_seen_are_the_yardstick_without_a_peak():
    model = TopModel(clock=lambda: 0.0)
    for step, rate in enumerate((0.1, 0.4, 0.2)):
        wire = busy_wire(step)
        wire["hardware"]["decode_gb_per_s"] = rate
        model.apply(typed(wire))
    efficiency = model.view().efficiency
    assert efficiency.best_decode_gb_per_s == 0.4 and efficiency.decode_gb_per_s == 0.2


def test_an_moe_daemon_shows_its_touched_experts_and_a_dense_one_does_not():
    from llmd.tui.top.panels.efficiency import experts_line

    model = TopModel(clock=lambda: 0.0)
    wire = busy_wire(0)
    wire["hardware"]["experts_touched_per_step"] = 12.5
    wire["hardware"]["num_expert_slots"] = 50
    model.apply(typed(wire))
    efficiency = model.view().efficiency
    assert (efficiency.experts_touched_per_step, efficiency.num_expert_slots) == (12.5, 50)
    assert experts_line(efficiency, 9).plain == (
        "experts  12.5 of 50 (25%) (layer, expert) pairs touched per step"
    )
    dense = TopModel(clock=lambda: 0.0)
    dense.apply(busy_snapshot(1))
    assert dense.view().efficiency.num_expert_slots == 0


def test_the_request_table_is_read_once_per_snapshot_and_sort(monkeypatch):
    import llmd.tui.top.model as model_module

    num_reads = []
    read_requests = model_module.read_requests

    def counting_read_requests(*args):
        num_reads.append(1)
        return read_requests(*args)

    monkeypatch.setattr(model_module, "read_requests", counting_read_requests)
    model = TopModel(clock=lambda: 0.0)
    model.apply(busy_snapshot(3))
    first = model.view()
    assert model.view() == first
    assert len(num_reads) == 1  # applying and two views share one read
    model.cycle_sort()
    assert model.view().requests != first.requests
    model.apply(busy_snapshot(4))
    model.view()
    assert len(num_reads) == 3
