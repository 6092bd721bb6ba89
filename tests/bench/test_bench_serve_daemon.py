"""`llmd bench serve` against a real daemon process on a tiny checkpoint, every dataset and
arrival mode, with fixed seeds and small counts."""

from __future__ import annotations

import json
import math
import os
import signal

import pytest

from llmd.bench.serve import ServeOptions, build_sessions, run_serve_async
from tests.daemon.harness import daemon_env, run_cli, start_daemon, wait_dead
from tests.protocol.snapshot_samples import daemon_section
from tests.protocol.snapshot_samples import sample_snapshot as stats_snapshot

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def daemon(tiny_model_dir, tmp_path_factory):
    """One daemon for the module: ipc address in a temporary runtime directory."""
    runtime = tmp_path_factory.mktemp("bench-rt")
    env = daemon_env(runtime)
    address = f"ipc://{runtime / 'bench.sock'}"
    process = start_daemon(tiny_model_dir, address, env, runtime / "daemon.log")
    yield address, env
    os.kill(process.pid, signal.SIGTERM)
    process.wait(timeout=30)
    assert wait_dead(process.pid)


def _options(address, **overrides) -> ServeOptions:
    base = dict(address=address, num_prompts=6, input_len=12, output_len=4, show_progress=False)
    return ServeOptions(**{**base, **overrides})


async def _run(address, **overrides):
    result = await run_serve_async(_options(address, **overrides))
    assert result["num_failed"] == 0 and result["num_aborted"] == 0, result["errors"]
    return result


@pytest.mark.parametrize(
    "arrival",
    [
        dict(request_rate=50.0, arrival="poisson"),
        dict(request_rate=50.0, arrival="gamma", burstiness=0.5),
        dict(request_rate=50.0, arrival="fixed"),
        dict(request_rate=math.inf, max_concurrency=2),
    ],
    ids=["poisson", "gamma", "fixed", "closed-loop"],
)
async def test_random_dataset_under_each_arrival_mode(daemon, arrival):
    result = await _run(daemon[0], range_ratio=0.5, seed=7, **arrival)
    assert result["num_completed"] == 6
    prompt_lens = [r["num_prompt_tokens"] for r in result["requests"]]
    expected = [
        len(s.turns[0].prompt_token_ids)
        for s in build_sessions(
            _options(daemon[0], range_ratio=0.5, seed=7),
            stats_snapshot(daemon=daemon_section(vocab_size=100)),
        )
    ]
    assert sorted(prompt_lens) == sorted(expected)  # the seeded lengths arrived intact
    assert all(r["num_output_tokens"] in range(2, 7) for r in result["requests"])
    for name in ("ttft", "tpot", "e2e"):
        assert result["latency_ms"][name]["count"] == 6
        assert 0 < result["latency_ms"][name]["median"] <= result["latency_ms"][name]["max"]
    window = result["daemon"]
    assert window["steps"] > 0 and window["mean_batch_size"] >= 1
    assert window["peak_source"] == "measured" and window["peak_gb_per_s"] > 0  # CPU peaks
    if "max_concurrency" in arrival:
        assert window["mean_batch_size"] <= 2
    else:
        scheduled = [r["scheduled_s"] for r in result["requests"]]
        assert max(scheduled) > 0.01  # sent over time, not at once


async def test_each_record_says_why_the_request_waited(daemon):
    result = await _run(daemon[0], request_rate=math.inf, seed=5)  # all 6 at once
    for record in result["requests"]:
        waits = record["server_waits"]
        assert set(waits["wait_s"]) == {"queue", "kv_blocks", "max_num_seqs", "token_budget",
                                        "preempted"}  # fmt: skip
        assert sum(waits["wait_s"].values()) == pytest.approx(
            record["server_timings"]["queue"], abs=1e-6
        )
        assert waits["num_prefill_tokens"] >= record["num_prompt_tokens"] - waits[
            "num_cached_tokens"]  # fmt: skip
    assert result["server_waits"]["num_requests"] == 6


async def test_shared_prefix_dataset_hits_the_prefix_cache(daemon):
    # One request at a time, so each group's prefix is cached before its next prompt comes
    # (concurrent prompts of a group may be admitted before the first one's blocks exist).
    result = await _run(daemon[0], dataset="shared-prefix", num_groups=2, prefix_len=48,
                        input_len=4, max_concurrency=1)  # fmt: skip
    # The first prompt of each group misses; the other four hit the 48-token prefix.
    assert [r["num_cached_tokens"] for r in result["requests"]] == [0, 0, 48, 48, 48, 48]
    assert result["daemon"]["prefix_hit_rate"] == pytest.approx(4 * 48 / (6 * 52))


async def test_multi_turn_resends_the_growing_history(daemon):
    result = await _run(daemon[0], dataset="multi-turn", num_prompts=2, num_turns=3,
                        input_len=12, output_len=4, max_concurrency=1)  # fmt: skip
    ordered = sorted(result["requests"], key=lambda r: (r["session"], r["turn"]))
    prompt_lens = [r["num_prompt_tokens"] for r in ordered]
    assert prompt_lens == [12, 28, 44, 12, 28, 44]  # each turn adds 4 output + 12 new tokens
    assert result["daemon"]["prefix_hit_rate"] > 0


async def test_sharegpt_dataset_and_slo_goodput(daemon, tmp_path):
    conversations = [
        {"conversations": [{"from": "human", "value": f"hello number {i} how are you"},
                           {"from": "gpt", "value": "fine thanks " * (i + 1)}]}
        for i in range(5)
    ]  # fmt: skip
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(conversations))
    result = await _run(daemon[0], dataset="sharegpt", dataset_path=str(path), num_prompts=5,
                        slo="ttft=60000,e2e=60000")  # fmt: skip
    assert result["num_completed"] == 5
    assert result["goodput"]["fraction"] == 1.0


async def test_failed_requests_are_counted_not_dropped(daemon):
    # The daemon's max model length is 256: these prompts must be refused, and reported.
    result = await run_serve_async(_options(daemon[0], input_len=400, num_prompts=3))
    assert result["num_failed"] == 3 and result["num_completed"] == 0
    assert sum(result["errors"].values()) == 3
    assert result["goodput"]["fraction"] == 0.0


def test_cli_prints_the_table_and_writes_json(daemon, tmp_path):
    address, env = daemon
    path = tmp_path / "run.json"
    completed = run_cli(["bench", "serve", "--address", address, "--num-prompts", "3",
                         "--input-len", "8", "--output-len", "3", "--slo", "ttft=60000",
                         "--json", str(path)], env)  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    assert "TTFT" in completed.stdout and "goodput" in completed.stdout
    saved = json.loads(path.read_text())
    assert len(saved["requests"]) == 3 and saved["goodput"]["num_good"] == 3
    assert all(r["token_arrival_s"] for r in saved["requests"])
