"""The offline peer benchmark's workload file: what llmd's offline workload holds is what
both systems read back (scripts/bench_offline_vs_vllm.py, scripts/offline_peer_worker.py)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest

from llmd.bench.workload import make_workload

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _load(name: str, monkeypatch):
    spec = importlib.util.spec_from_file_location(f"_peer_{name}", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, f"_peer_{name}", module)  # dataclasses look it up
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script puts its folders first
    spec.loader.exec_module(module)
    return module


def test_the_workload_file_round_trips_llmds_offline_workload(tmp_path, monkeypatch):
    bench = _load("bench_offline_vs_vllm", monkeypatch)
    args = argparse.Namespace(num_requests=5, warmup_requests=2, seed=3, max_prompt=40,
                              max_output=12)  # fmt: skip
    workload = bench.make_peer_workload(args, vocab_size=1000)
    path = tmp_path / "workload.json"
    bench.write_workload(path, workload)
    back = bench.read_workload(path)
    expected = make_workload(5, 1000, 3, 40, 12)
    assert [(r.prompt_token_ids, r.max_tokens) for r in back.requests] == expected
    assert [(r.prompt_token_ids, r.max_tokens) for r in back.warmup] == make_workload(
        2, 1000, 4, 40, 12
    )
    assert back.meta == {"seed": 3, "vocab_size": 1000, "max_prompt": 40, "max_output": 12,
                         "warmup_seed": 4}  # fmt: skip


def test_a_malformed_workload_file_is_a_value_error(tmp_path, monkeypatch):
    worker = _load("offline_peer_worker", monkeypatch)
    path = tmp_path / "workload.json"
    path.write_text('{"requests": [{"prompt_token_ids": [1, 2]}], "warmup": []}')
    with pytest.raises(ValueError, match="requests"):
        worker.read_workload(path)
