"""Sweep summaries: the terminal chart by hand, re-plotting a folder, naming the best setting."""

from __future__ import annotations

import json

import pytest

from llmd.bench.sweep import finish_sweep, render_sweep
from llmd.bench.sweep_point import SweepPoint, best_setting, load_points, save_point
from llmd.bench.text_chart import Curve, render_chart
from llmd.errors import InvalidParameterError

SLO = {"ttft": 100.0, "tpot": 20.0, "e2e": None}


def _result(rate, out_tps, ttft_p99, itl_p99, good):
    latency = {name: {"p99": None, "median": None} for name in ("ttft", "tpot", "itl", "e2e")}
    latency["ttft"] = {"p99": ttft_p99, "median": ttft_p99 / 2}
    latency["itl"] = {"p99": itl_p99, "median": itl_p99 / 2}
    return {
        "config": {"request_rate": rate},
        "throughput": {"output_tokens_per_s": out_tps, "requests_per_s": good},
        "latency_ms": latency,
        "goodput": {"slo_ms": SLO, "requests_per_s": good, "fraction": 0.5},
        "num_failed": 0,
        "num_aborted": 0,
        "requests": [],
    }


def test_chart_places_markers_by_hand_and_fits_80_columns():
    curves = [Curve("a", [(0.0, 0.0), (100.0, 10.0)]), Curve("b", [(50.0, 5.0)])]
    text = render_chart("title", curves, "x", threshold=5.0, width=80, height=11)
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines)
    grid = [line[10:] for line in lines[1:12]]  # after the 8-wide label, space and "|"
    assert grid[10][0] == "A"  # (0, 0): bottom-left
    assert grid[0][68] == "A"  # (100, 10): top-right of 69 columns
    assert grid[5][34] == "B"  # (50, 5): the middle, on the dashed SLO row
    assert grid[5][0] == "-"
    assert "A=a" in lines[-1] and "B=b" in lines[-1]


def test_best_setting_is_the_highest_goodput_and_folder_replots(tmp_path):
    save_point(tmp_path, _result(2.0, 100.0, 50.0, 10.0, 1.9), 64, None)
    save_point(tmp_path, _result(8.0, 300.0, 400.0, 30.0, 2.5), 64, None)
    save_point(tmp_path, _result(2.0, 90.0, 40.0, 9.0, 2.0), 256, None)
    save_point(tmp_path, _result(8.0, 350.0, 90.0, 15.0, 7.0), 256, None)
    points = load_points(tmp_path)
    assert [(p.max_num_batched_tokens, p.request_rate) for p in points] == [
        (64, 2.0), (64, 8.0), (256, 2.0), (256, 8.0)
    ]  # fmt: skip
    best = best_setting(points)
    assert (best.max_num_batched_tokens, best.request_rate) == (256, 8.0)
    text = render_sweep(points)
    assert "best: budget 256 (at rate 8.0)" in text
    assert all(len(line) <= 80 for line in text.splitlines())
    pytest.importorskip("matplotlib")
    finish_sweep(tmp_path)
    assert (tmp_path / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((tmp_path / "sweep.json").read_text())
    assert summary["best"] == "budget 256" and len(summary["points"]) == 4


def test_empty_folder_is_a_typed_error(tmp_path):
    with pytest.raises(InvalidParameterError):
        finish_sweep(tmp_path)
    assert best_setting([]) is None
    point = SweepPoint.from_result(_result(1.0, 1.0, 1.0, 1.0, None), 8, 4)
    assert point.setting == "budget 8, seqs 4"


def test_axis_labels_stay_inside_the_label_column():
    from llmd.bench.text_chart import axis_label

    assert [axis_label(v) for v in (0.5, 512.0, 4096.0, 24052.7, 1.5e6)] == [
        "0.5", "512", "4096", "24.05k", "1.5M"
    ]  # fmt: skip
    text = render_chart("t", [Curve("a", [(1.0, 24052.7), (2.0, 100.0)])], "x")
    assert all(line.index("|") == 9 for line in text.splitlines()[1:-3] if "|" in line)


def test_plot_rejudges_goodput_from_the_raw_requests(tmp_path):
    from llmd.bench.report import build_result
    from llmd.bench.request_record import RequestRecord
    from llmd.bench.slo import Slo

    def record(index, ttft, e2e):
        item = RequestRecord(index, 0.0, sent_s=0.0, first_token_s=ttft, finished_s=e2e)
        item.num_output_tokens = 11  # TPOT = (e2e - ttft) / 10
        return item

    # Budget 64: fast first tokens, slow decode; budget 256: the other way round.
    fast_start = [record(i, 0.05, 1.05) for i in range(4)]  # TTFT 50 ms, TPOT 100 ms
    fast_decode = [record(i, 0.5, 0.6) for i in range(4)]  # TTFT 500 ms, TPOT 10 ms
    for budget, records in ((64, fast_start), (256, fast_decode)):
        result = build_result(records, Slo.parse("ttft=100"), {"request_rate": 4.0})
        save_point(tmp_path, result, budget, None)
    assert best_setting(load_points(tmp_path)).max_num_batched_tokens == 64
    rejudged = load_points(tmp_path, Slo.parse("tpot=20"))
    assert [p.goodput_fraction for p in rejudged] == [0.0, 1.0]
    assert best_setting(rejudged).max_num_batched_tokens == 256
    assert "tpot<=20ms" in finish_sweep(tmp_path, slo=Slo.parse("tpot=20"))
