"""Hand-computed cases for the benchmark's percentiles, goodput, arrivals and datasets."""

from __future__ import annotations

import itertools
import json
import math

import pytest

from llmd.bench.arrivals import arrival_offsets, parse_rate
from llmd.bench.datasets import (
    multi_turn_sessions,
    random_sessions,
    repeat_sessions,
    shared_prefix_sessions,
    sharegpt_sessions,
)
from llmd.bench.latency_stats import summarize
from llmd.bench.report import build_result, daemon_window, render_table
from llmd.bench.request_record import FAILED, RequestRecord
from llmd.bench.slo import Slo, goodput
from llmd.errors import InvalidParameterError
from llmd.protocol.engine_sections import KVUsage
from llmd.protocol.metrics_sections import LatencySection, TotalsSection, WindowSummary
from tests.protocol.snapshot_samples import sample_snapshot as stats_snapshot


def test_summary_of_four_values_by_hand():
    # Sorted 10, 20, 30, 40: median at rank 1.5 -> 25; p90 at rank 2.7 -> 37; p99 at 2.97.
    summary = summarize([40.0, 10.0, 30.0, 20.0])
    assert summary == {
        "count": 4,
        "mean": 25.0,
        "median": 25.0,
        "p90": pytest.approx(37.0),
        "p99": pytest.approx(39.7),
        "max": 40.0,
    }
    assert summarize([]) == {"count": 0, "mean": None, "median": None, "p90": None,
                             "p99": None, "max": None}  # fmt: skip


def _record(index, ttft, e2e, num_output, status="ok") -> RequestRecord:
    record = RequestRecord(index, 0.0, sent_s=0.0, first_token_s=ttft, finished_s=e2e)
    record.num_output_tokens = num_output
    record.status = status
    return record


def test_record_latencies_by_hand():
    record = _record(0, 0.1, 0.5, 5)
    record.token_arrival_s = [0.1, 0.2, 0.5]
    assert record.tpot == pytest.approx(0.1)  # (0.5 - 0.1) / 4
    assert record.itl == pytest.approx([0.1, 0.3])
    assert _record(1, 0.1, 0.1, 1).tpot is None


def test_goodput_counts_requests_meeting_every_target():
    slo = Slo.parse("ttft=200,tpot=50")
    records = [
        _record(0, 0.1, 0.5, 5),  # ttft 100 ms, tpot 100 ms: misses tpot
        _record(1, 0.1, 0.2, 5),  # ttft 100, tpot 25: good
        _record(2, 0.3, 0.4, 3),  # ttft 300: misses
        _record(3, 0.05, 0.05, 1),  # one token, no TPOT: good
        _record(4, 0.01, 0.02, 3, status=FAILED),  # failed: never good
    ]
    assert goodput(records, slo, duration_s=2.0) == {
        "num_good": 2, "requests_per_s": 1.0, "fraction": 0.4
    }  # fmt: skip
    e2e_only = Slo.parse("e2e=300")
    assert goodput(records, e2e_only, 4.0)["num_good"] == 2  # records 1 and 3
    assert goodput(records, Slo(), 1.0)["num_good"] == 4


@pytest.mark.parametrize("text", ["ttft", "ttft=x", "latency=3", "tpot=-1", "e2e=0"])
def test_bad_slo_is_a_typed_error(text):
    with pytest.raises(InvalidParameterError):
        Slo.parse(text)


def test_result_throughput_and_daemon_window_by_hand():
    records = [_record(0, 0.1, 1.0, 4), _record(1, 0.2, 2.0, 6), _record(2, 0.1, 0.5, 0, FAILED)]
    for record, prompt in zip(records, (10, 30, 5)):
        record.num_prompt_tokens = prompt
    before = stats_snapshot(
        totals=TotalsSection(steps=10, scheduled_seqs=20, preemptions=1, decode_bytes=0,
                             decode_seconds=0.0, prefill_flops=1e9, prefill_seconds=1.0),
        kv=_kv(prefix_hit_tokens=0, prefix_query_tokens=100),
    )  # fmt: skip
    after = stats_snapshot(
        totals=TotalsSection(steps=30, scheduled_seqs=70, preemptions=3, decode_bytes=4e9,
                             decode_seconds=2.0, prefill_flops=5e9, prefill_seconds=3.0),
        kv=_kv(prefix_hit_tokens=30, prefix_query_tokens=160),
        latency=LatencySection(ttft=WindowSummary(2, 0.5, 0.5, 0.6, 0.7, 0.8)),
    )  # fmt: skip
    result = build_result(records, Slo(), {}, before, after)
    assert result["duration_s"] == 2.0
    assert result["num_completed"] == 2 and result["num_failed"] == 1
    assert result["throughput"]["output_tokens_per_s"] == 5.0  # 10 tokens / 2 s
    assert result["throughput"]["input_tokens_per_s"] == 20.0  # failed prompt not counted
    window = daemon_window(before, after)
    assert window["mean_batch_size"] == 2.5
    assert window["preemptions"] == 2
    assert window["prefix_hit_rate"] == 0.5
    assert window["decode_gb_per_s"] == 2.0
    assert window["prefill_flop_per_s"] == 2e9
    assert window["latency_histograms_ms"]["ttft"] == {
        "count": 2, "mean": 500.0, "p50": 500.0, "p90": 600.0, "p99": 700.0, "max": 800.0
    }  # fmt: skip
    assert window["config"]["model"] == "m" and window["config"]["max_num_seqs"] == 8


def test_daemon_window_of_a_dead_engine_has_no_hit_rate():
    before = stats_snapshot(kv=_kv(prefix_hit_tokens=0, prefix_query_tokens=10))
    window = daemon_window(before, stats_snapshot())  # the engine died during the run
    assert window["prefix_hit_rate"] is None and window["steps"] == 0
    assert window["mean_batch_size"] is None  # no step in the window


def _kv(prefix_hit_tokens: int, prefix_query_tokens: int) -> KVUsage:
    return KVUsage(
        block_size=16,
        num_total=64,
        num_used=0,
        num_cached=0,
        num_free=64,
        prefix_query_tokens=prefix_query_tokens,
        prefix_hit_tokens=prefix_hit_tokens,
    )


def test_server_waits_sum_each_reason_over_the_requests_that_said_why():
    records = [_record(0, 0.1, 1.0, 4), _record(1, 0.2, 2.0, 6), _record(2, 0.1, 0.5, 3)]
    records[0].server_waits = {"wait_s": {"queue": 0.5, "kv_blocks": 1.5}}
    records[1].server_waits = {"wait_s": {"queue": 0.25, "token_budget": 1.75}}
    result = build_result(records, Slo(), {})  # the third said nothing: not counted
    waits = result["server_waits"]
    assert waits["num_requests"] == 2
    assert waits["wait_s"] == {"queue": 0.75, "kv_blocks": 1.5, "max_num_seqs": 0.0,
                               "token_budget": 1.75, "preempted": 0.0}  # fmt: skip
    assert waits["mean_wait_s"]["kv_blocks"] == 0.75
    assert waits["share"]["token_budget"] == 0.4375  # 1.75 of 4.0 s
    assert "waits         token_budget 44% · kv_blocks 38% · queue 19% of 4.00 s (2 requests)" in (
        render_table(result)
    )
    assert build_result(records[2:], Slo(), {})["server_waits"] is None


def test_arrivals_fixed_inf_and_seeded_gamma():
    assert arrival_offsets(4, 2.0, "fixed") == [0.0, 0.5, 1.0, 1.5]
    assert arrival_offsets(3, math.inf) == [0.0, 0.0, 0.0]
    poisson = arrival_offsets(2000, 10.0, "poisson", seed=3)
    assert poisson == arrival_offsets(2000, 10.0, "poisson", seed=3)
    assert poisson != arrival_offsets(2000, 10.0, "poisson", seed=4)
    assert poisson[-1] / 1999 == pytest.approx(0.1, rel=0.1)  # mean gap 1/rate
    bursty = arrival_offsets(2000, 10.0, "gamma", burstiness=0.25, seed=3)
    gaps = [b - a for a, b in itertools.pairwise(bursty)]
    mean = sum(gaps) / len(gaps)
    variance = sum((g - mean) ** 2 for g in gaps) / len(gaps)
    assert mean == pytest.approx(0.1, rel=0.15)
    assert variance / mean**2 == pytest.approx(4.0, rel=0.3)  # CV^2 = 1 / shape
    with pytest.raises(InvalidParameterError):
        parse_rate("fast")
    with pytest.raises(InvalidParameterError):
        arrival_offsets(3, 1.0, "gamma", burstiness=0)


def test_datasets_are_seeded_and_shaped():
    first = random_sessions(20, 100, 10, 0.5, vocab_size=500, seed=1)
    assert first == random_sessions(20, 100, 10, 0.5, vocab_size=500, seed=1)
    assert first != random_sessions(20, 100, 10, 0.5, vocab_size=500, seed=2)
    lengths = [len(s.turns[0].prompt_token_ids) for s in first]
    assert min(lengths) >= 50 and max(lengths) <= 150 and len(set(lengths)) > 5
    assert all(10 <= i < 500 for s in first for i in s.turns[0].prompt_token_ids)
    grouped = shared_prefix_sessions(6, 2, 8, 4, 3, vocab_size=500, seed=0)
    prompts = [s.turns[0].prompt_token_ids for s in grouped]
    assert prompts[0][:8] == prompts[2][:8] == prompts[4][:8] != prompts[1][:8]
    assert all(len(p) == 12 for p in prompts)
    chats = multi_turn_sessions(3, 4, 5, 2, vocab_size=500, seed=0)
    assert [len(s.turns) for s in chats] == [4, 4, 4]
    repeats = repeat_sessions(3, 12, 20, seed=4)
    assert repeats == repeat_sessions(3, 12, 20, seed=4)
    turn = repeats[0].turns[0]
    passage = turn.prompt.split("\n\n")[1]
    assert len(passage.split()) == 12 and turn.max_tokens == 20 and not turn.prompt_token_ids
    assert passage != repeats[1].turns[0].prompt.split("\n\n")[1]


def test_sharegpt_json_and_jsonl(tmp_path):
    items = [
        {"conversations": [{"from": "human", "value": "hi there"},
                           {"from": "gpt", "value": "one two three four five six"}]},
        {"conversations": [{"from": "human", "value": "only one turn"}]},
        {"id": "no conversations"},
    ]  # fmt: skip
    as_json = tmp_path / "a.json"
    as_json.write_text(json.dumps(items))
    as_jsonl = tmp_path / "a.jsonl"
    as_jsonl.write_text("\n".join(json.dumps(item) for item in items))
    for path in (as_json, as_jsonl):
        sessions = sharegpt_sessions(path, 10)
        assert len(sessions) == 1
        assert sessions[0].turns[0].prompt == "hi there"
        assert sessions[0].turns[0].max_tokens == 8  # 1.3 tokens per word, rounded
    encoded = sharegpt_sessions(as_json, 10, encode=lambda text: list(range(len(text))))
    assert encoded[0].turns[0].prompt_token_ids == tuple(range(8))
    assert encoded[0].turns[0].max_tokens == len("one two three four five six")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(InvalidParameterError):
        sharegpt_sessions(tmp_path / "bad.json", 1)
