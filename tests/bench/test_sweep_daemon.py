"""`llmd bench sweep` end to end: two budgets on a tiny checkpoint, one rate, tiny counts."""

from __future__ import annotations

import json

import pytest

from llmd.bench.sweep import finish_sweep
from tests.daemon.harness import ENGINE_ARGS, daemon_env, run_cli

pytestmark = pytest.mark.slow


def test_sweep_starts_a_daemon_per_budget_and_saves_every_point(tiny_model_dir, tmp_path):
    env = daemon_env(tmp_path)
    folder = tmp_path / "sweep"
    completed = run_cli(
        ["bench", "sweep", "--model", str(tiny_model_dir),
         "--max-num-batched-tokens", "16,64", "--request-rates", "inf,100",
         "--output-dir", str(folder), "--num-prompts", "4", "--input-len", "24",
         "--output-len", "3", "--slo", "ttft=60000",
         *(f"--serve-arg={arg}" for arg in ENGINE_ARGS)],
        env,
        timeout=240,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout + completed.stderr
    names = sorted(p.name for p in (folder / "points").iterdir())
    assert names == [f"budget{b}_rate{r}.json" for b in (16, 64) for r in ("100.0", "inf")]
    for name in names:
        point = json.loads((folder / "points" / name).read_text())
        assert point["num_completed"] == 4
        budget = point["sweep"]["max_num_batched_tokens"]
        assert point["daemon"]["config"]["max_num_batched_tokens"] == budget  # its own daemon
        # Every rate draws its own prompts, so no point is served from its predecessor's
        # prefix cache (24-token prompts fill one 16-token block).
        assert point["daemon"]["prefix_hit_rate"] == 0.0
    assert "best: budget" in completed.stdout
    assert "p99 TTFT" in finish_sweep(folder)  # re-plotted from the folder alone
