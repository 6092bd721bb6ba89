"""A sweep's capacities: saved per setting, re-read by `bench plot`, the most one named."""

from __future__ import annotations

import json

from llmd.bench.capacity import CapacityOptions, Probe, find_capacity
from llmd.bench.sweep import finish_sweep
from llmd.bench.sweep_capacity import load_capacities, most_capacity, save_capacity

SLO_MS = {"ttft": 500.0, "tpot": 50.0, "e2e": None}


def _capacity(threshold_rps: float, **fields) -> dict:
    def step(rate):
        return Probe(rate, 1.0 if rate < threshold_rps else 0.0)

    return find_capacity(step, CapacityOptions(max_probes=30, **fields)).to_json(SLO_MS)


def test_a_capacity_only_sweep_folder_is_summarized_and_ranked(tmp_path):
    save_capacity(tmp_path, _capacity(3.0), 64, None)
    save_capacity(tmp_path, _capacity(11.0), 256, None)
    save_capacity(tmp_path, _capacity(0.5), 256, 8)  # fails even its lowest rate
    found = load_capacities(tmp_path)
    assert [c.setting for c in found] == ["budget 64", "budget 256", "budget 256, seqs 8"]
    assert most_capacity(found).setting == "budget 256"
    text = finish_sweep(tmp_path)
    lines = text.splitlines()
    assert lines[0].startswith("budget 64") and "capacity at SLO: " in lines[0]
    assert "capacity at SLO: 0 req/s" in lines[2]
    assert lines[-1].startswith("most capacity: budget 256 (")
    summary = json.loads((tmp_path / "sweep.json").read_text())
    assert summary["most_capacity"] == "budget 256" and summary["points"] == []
    assert [c["capacity_at_slo"]["rate_rps"] for c in summary["capacity"]] == [
        c.capacity["rate_rps"] for c in found
    ]


def test_no_setting_passing_is_said_plainly(tmp_path):
    save_capacity(tmp_path, _capacity(0.5), 64, None)
    assert most_capacity(load_capacities(tmp_path)) is None
    assert "most capacity: no setting passed even its lowest rate" in finish_sweep(tmp_path)


def test_a_tie_names_every_setting_sharing_the_most(tmp_path):
    save_capacity(tmp_path, _capacity(100.0, max_rate_rps=16.0), 64, None)
    save_capacity(tmp_path, _capacity(100.0, max_rate_rps=16.0), 256, None)
    text = finish_sweep(tmp_path)
    assert "most capacity: budget 64, budget 256 (tied at >= 16 req/s)" in text
