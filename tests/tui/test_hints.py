"""Each bottleneck rule fires on the pattern it names, and stays quiet just below it."""

from __future__ import annotations

import dataclasses

from llmd.protocol.engine_sections import RequestRow
from llmd.tui.top.hints import (
    busy_but_inefficient,
    find_hints,
    host_gaps,
    kv_full_with_preemptions,
    prefill_starving_decode,
    queue_growing,
    speculation_not_paying,
    waiting_on_kv_blocks,
    waiting_on_max_num_seqs,
    waiting_on_token_budget,
)
from llmd.tui.top.view import (
    EfficiencyView,
    KVView,
    LatencyView,
    QueueView,
    StepView,
    ThroughputView,
    TopView,
)
from tests.tui.sample_snapshots import busy_snapshot, request_row

CALM = TopView(
    queue=QueueView(waiting=1, running=4, waiting_growth_per_s=0.0),
    kv=KVView(num_total=100, num_used=40, num_free=60, usage=0.4),
    steps=StepView(
        prompt_tokens_per_step=2.0,
        generation_tokens_per_step=8.0,
        step_mean_s=0.010,
        phase_ms={"idle_gap": 0.5},
    ),
    latency=LatencyView(percentiles={"itl": (0.010, 0.012, 0.015)}),
    efficiency=EfficiencyView(busy_fraction=0.5, decode_gb_per_s=100.0, peak_gb_per_s=1000.0),
    has_snapshot=True,
)


def with_(view: TopView, **sections) -> TopView:
    """`view` with fields of its sections replaced: with_(v, queue={"waiting": 3})."""
    changes = {
        name: dataclasses.replace(getattr(view, name), **fields)
        for name, fields in sections.items()
    }
    return dataclasses.replace(view, **changes)


def test_a_calm_server_gets_no_hints():
    assert find_hints(CALM) == ()
    assert find_hints(with_(CALM, queue={"waiting": 50, "waiting_growth_per_s": 9.0})) != ()
    assert find_hints(dataclasses.replace(CALM, has_snapshot=False)) == ()


def test_kv_full_counts_cached_blocks_and_needs_waiting_or_preempted_requests():
    full = with_(
        CALM,
        kv={"num_used": 70, "num_cached": 28, "num_free": 2, "usage": 0.7},
        queue={"recent_preemptions": 3, "preempted": 1},
    )
    hint = kv_full_with_preemptions(full)
    assert hint is not None
    assert hint.message.startswith("KV cache full (2 of 100 blocks free), 3 preemptions in 10s")
    assert "--num-blocks" in hint.message
    idle = with_(full, queue={"recent_preemptions": 0, "preempted": 0, "waiting": 0})
    assert kv_full_with_preemptions(idle) is None  # full of cached prefixes, nobody waits
    waiting = with_(idle, queue={"waiting": 2, "running": 1})
    assert "2 waiting, 1 running" in kv_full_with_preemptions(waiting).message
    assert kv_full_with_preemptions(with_(full, kv={"num_free": 6})) is None  # 94% occupied


def test_queue_growing_needs_growth_and_a_real_queue():
    growing = with_(CALM, queue={"waiting": 12, "waiting_growth_per_s": 2.0})
    hint = queue_growing(growing)
    assert hint is not None and "grows 2.0/s (12 waiting)" in hint.message
    assert queue_growing(with_(growing, queue={"waiting_growth_per_s": 0.4})) is None
    assert queue_growing(with_(growing, queue={"waiting": 3})) is None
    assert queue_growing(with_(growing, queue={"waiting_growth_per_s": None})) is None


def test_prefill_starving_decode_needs_itl_spikes_while_prefill_dominates():
    starving = with_(
        CALM,
        latency={"percentiles": {"itl": (0.005, 0.02, 0.030)}},
        steps={"prompt_tokens_per_step": 300.0, "generation_tokens_per_step": 8.0},
    )
    hint = prefill_starving_decode(starving)
    assert hint is not None and "6.0× p50" in hint.message
    assert "--max-num-batched-tokens" in hint.message
    smooth = with_(starving, latency={"percentiles": {"itl": (0.010, 0.02, 0.030)}})
    assert prefill_starving_decode(smooth) is None  # 3x: not a spike
    decode_heavy = with_(starving, steps={"prompt_tokens_per_step": 4.0})
    assert prefill_starving_decode(decode_heavy) is None
    assert prefill_starving_decode(with_(starving, latency={"percentiles": {}})) is None


def test_host_gaps_compare_the_idle_gap_with_step_time():
    gappy = with_(CALM, steps={"phase_ms": {"idle_gap": 4.0}, "step_mean_s": 0.010})
    hint = host_gaps(gappy)
    assert hint is not None and "4.0 ms host gap between steps (29%" in hint.message
    assert host_gaps(with_(gappy, steps={"phase_ms": {"idle_gap": 2.0}})) is None  # 17%
    assert host_gaps(with_(gappy, steps={"phase_ms": {}})) is None


def test_busy_but_inefficient_needs_a_known_peak():
    busy = with_(CALM, efficiency={"busy_fraction": 0.95, "decode_gb_per_s": 50.0})
    hint = busy_but_inefficient(busy)
    assert hint is not None and hint.severity == "info" and "5% of peak" in hint.message
    assert busy_but_inefficient(with_(busy, efficiency={"peak_gb_per_s": None})) is None
    assert busy_but_inefficient(with_(busy, efficiency={"decode_gb_per_s": 300.0})) is None
    assert busy_but_inefficient(with_(busy, efficiency={"busy_fraction": 0.5})) is None


def waiting_rows(reason: str, waits: list[float]) -> tuple[RequestRow, ...]:
    return tuple(
        request_row(f"req-{i}", "waiting", waiting_on=reason, wait_s=wait)
        for i, wait in enumerate(waits)
    )


def test_wait_reasons_name_their_limit_once_a_request_waited_half_a_second():
    daemon = busy_snapshot(0).daemon
    header = dataclasses.replace(daemon, max_num_seqs=8, max_num_batched_tokens=512)
    seqs = dataclasses.replace(
        CALM, header=header, requests=waiting_rows("max_num_seqs", [0.4, 1.5, 0.7])
    )
    hint = waiting_on_max_num_seqs(seqs)
    assert hint.name == "max_num_seqs"
    assert hint.message.startswith("2 waiting on max_num_seqs (the running set is full at 8;")
    assert "longest 1.5s" in hint.message and "--max-num-seqs" in hint.message
    budget = dataclasses.replace(CALM, header=header, requests=waiting_rows("token_budget", [0.9]))
    hint = waiting_on_token_budget(budget)
    assert hint.name == "token_budget" and "512 tokens go to running prefills" in hint.message
    assert waiting_on_max_num_seqs(budget) is None
    just_below = dataclasses.replace(CALM, requests=waiting_rows("token_budget", [0.49]))
    assert waiting_on_token_budget(just_below) is None
    queued = dataclasses.replace(CALM, requests=waiting_rows("queue", [9.0]))
    assert find_hints(queued) == ()  # behind others: no limit of its own to raise


def test_kv_blocks_has_its_hint_only_while_the_cache_is_not_full():
    held = dataclasses.replace(CALM, requests=waiting_rows("kv_blocks", [2.0]))
    hint = waiting_on_kv_blocks(held)
    assert hint.name == "kv_blocks" and "more than the 60 free blocks" in hint.message
    full = with_(held, kv={"num_used": 98, "num_free": 2, "usage": 0.98}, queue={"waiting": 3})
    assert waiting_on_kv_blocks(full) is None
    assert "the queue's head waiting on kv_blocks" in kv_full_with_preemptions(full).message


def test_low_acceptance_at_a_large_batch_says_speculation_does_not_pay():
    def speculating(rate: float, running: int) -> TopView:
        throughput = ThroughputView(is_speculating=True, spec_window_s=60.0,
                                    spec_acceptance_rate=rate, spec_mean_acceptance_length=1.5,
                                    spec_tokens_per_step=1.1)  # fmt: skip
        return dataclasses.replace(with_(CALM, queue={"running": running}), throughput=throughput)

    assert speculation_not_paying(CALM) is None  # no speculation
    hint = speculation_not_paying(speculating(0.2, 16))
    assert hint is not None and "20% of its drafts over the last 60s" in hint.message
    assert "1.50 tokens per verify step, 1.10 per decode step) with 16 running" in hint.message
    assert speculation_not_paying(speculating(0.35, 16)) is None  # enough accepted
    assert speculation_not_paying(speculating(0.2, 4)) is None  # spare compute at batch 4
    assert speculation_not_paying(speculating(0.05, 1)) is not None  # almost none pass
