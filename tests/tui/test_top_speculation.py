"""`llmd top`'s speculation figures: deltas of the totals over the window, worked by hand."""

from __future__ import annotations

import dataclasses

import pytest

from llmd.tui.top.model import TopModel
from llmd.tui.top.speculation import SpecCounts, SpecHistory, SpecWindow
from tests.tui.sample_snapshots import busy_snapshot, busy_wire, typed


def test_two_snapshots_give_the_window_s_rates():
    first = SpecCounts(time=0.0, drafts=10, draft_tokens=30, accepted_tokens=12, decode_seqs=40)
    last = SpecCounts(time=60.0, drafts=30, draft_tokens=90, accepted_tokens=24, decode_seqs=100)
    window = SpecWindow.between(first, last)
    # 12 of 60 draft tokens accepted over 20 drafts, in 60 decode steps (40 without a draft).
    assert window.span_s == 60.0
    assert window.acceptance_rate == pytest.approx(12 / 60)
    assert window.mean_acceptance_length == pytest.approx(1 + 12 / 20)
    assert window.tokens_per_decode_step == pytest.approx(1 + 12 / 60)
    idle = SpecWindow.between(last, dataclasses.replace(last, time=61.0))
    assert (idle.acceptance_rate, idle.mean_acceptance_length) == (None, None)
    assert idle.tokens_per_decode_step is None
    backed_off = SpecWindow.between(last, dataclasses.replace(last, time=61.0, decode_seqs=108))
    assert backed_off.acceptance_rate is None and backed_off.tokens_per_decode_step == 1.0


def test_the_history_keeps_the_window_s_start_and_forgets_a_restarted_daemon():
    history = SpecHistory()
    assert history.window() is None
    for time, accepted in ((0.0, 0), (30.0, 5), (61.0, 9), (62.0, 10)):
        history.add(SpecCounts(time, drafts=accepted, draft_tokens=accepted,
                               accepted_tokens=accepted, decode_seqs=accepted), 60.0)  # fmt: skip
    window = history.window()
    assert window is not None and window.span_s == 62.0  # t=0 is the last one before t=2
    history.add(SpecCounts(95.0, 20, 20, 20, 20), 60.0)  # 35 is the window's start now
    window = history.window()
    assert window is not None and window.span_s == 65.0  # from t=30
    history.add(SpecCounts(96.0, 1, 1, 1, 1), 60.0)  # counts went down: a new daemon
    assert history.window() is None
    history.add(SpecCounts(97.0, 3, 6, 3, 4), 60.0)
    window = history.window()
    assert window is not None and window.span_s == 1.0
    assert window.acceptance_rate == pytest.approx(2 / 5)


def _speculating(time: float, running: int, drafts: int, draft_tokens: int, accepted: int,
                 decode_seqs: int):  # fmt: skip
    wire = busy_wire(0)
    wire["time"] = time
    wire["queue"]["running"] = running
    wire["totals"].update(spec_drafts=drafts, spec_draft_tokens=draft_tokens,
                          spec_accepted_tokens=accepted, decode_seqs=decode_seqs)  # fmt: skip
    return typed(wire)


def test_the_view_follows_the_window_and_the_hint_toggles_with_its_acceptance():
    model = TopModel(clock=lambda: 0.0)
    model.apply(busy_snapshot(0))
    assert not model.view().throughput.is_speculating  # no draft yet: no line, no figures
    # 60 s of drafts mostly accepted, then 60 s mostly rejected, then accepted again; the
    # daemon's window is 60 s, each snapshot one window after the one before.
    samples = [
        (0.0, 0, 0, 0, 0),
        (60.0, 100, 300, 240, 200),  # +240 of 300 accepted: 80%
        (120.0, 200, 600, 270, 400),  # +30 of 300: 10%, though 270 of 600 (45%) since start
        (180.0, 300, 900, 510, 600),  # +240 of 300 again
    ]
    views = []
    for time, *counts in samples:
        model.apply(_speculating(1_800_000_000.0 + time, 16, *counts))
        views.append(model.view())
    first, dropped, recovered = views[1], views[2], views[3]
    throughput = first.throughput
    assert throughput.is_speculating and throughput.spec_window_s == 60.0
    assert throughput.spec_acceptance_rate == pytest.approx(240 / 300)
    assert throughput.spec_mean_acceptance_length == pytest.approx(1 + 240 / 100)
    assert throughput.spec_tokens_per_step == pytest.approx(1 + 240 / 200)
    throughput = dropped.throughput
    assert throughput.spec_window_s == 60.0  # 60 to 120, not since start
    assert throughput.spec_acceptance_rate == pytest.approx(30 / 300)
    assert throughput.spec_mean_acceptance_length == pytest.approx(1 + 30 / 100)
    assert throughput.spec_tokens_per_step == pytest.approx(1 + 30 / 200)

    def speculation_hints(view):
        return [hint for hint in view.hints if hint.name == "speculation"]

    assert speculation_hints(first) == []
    (hint,) = speculation_hints(dropped)
    assert "accepted 10% of its drafts over the last 60s" in hint.message
    assert "(1.30 tokens per verify step, 1.15 per decode step) with 16 running" in hint.message
    assert speculation_hints(recovered) == []
