"""ServingMetrics turns step stats and request metrics into the snapshot's numbers."""

from __future__ import annotations

import dataclasses

import pytest

from llmd.engine.spec_decode_counts import SpecDecodeCounts
from llmd.engine.step_stats import StepStats
from llmd.metrics import ServingMetrics
from llmd.metrics.device_peaks import device_peaks
from llmd.metrics.roofline import ModelCost
from llmd.outputs import RequestMetrics
from llmd.wait_breakdown import WAIT_REASONS, WaitBreakdown


class FakeClock:
    """A settable monotonic clock."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _step(prefill: int, decode: int, forward_s: float, kv_context_tokens: int = 0, **kw):
    fields = dict(
        started_at=0.0,
        num_prefill_tokens=prefill,
        num_decode_tokens=decode,
        num_prefill_seqs=1 if prefill else 0,
        num_decode_seqs=decode,
        num_preempted=0,
        num_running=decode,
        num_waiting=0,
        schedule_s=0.001,
        prepare_s=0.002,
        forward_s=forward_s,
        sample_s=0.003,
        total_s=forward_s + 0.006,
        kv_context_tokens=kv_context_tokens,
    )
    return StepStats(**{**fields, **kw})


def _request_metrics(ttft: float, tpot: float | None, itl=(0.01, 0.02)) -> RequestMetrics:
    return RequestMetrics(
        num_prompt_tokens=4,
        num_generated_tokens=3,
        num_cached_tokens=0,
        num_preemptions=0,
        queue_time=0.001,
        prefill_time=ttft - 0.001,
        ttft=ttft,
        decode_time=0.03,
        tpot=tpot,
        e2e=ttft + 0.03,
        itl=tuple(itl),
    )


def test_steps_give_throughput_split_and_hardware_estimates():
    clock = FakeClock()
    # Untied: 1000 distinct params = 600 body + 2 tables of 20 x 10.
    cost = ModelCost(num_params=1000, vocab_size=20, hidden_size=10, is_tied=False)
    metrics = ServingMetrics(
        window_s=10, cost=cost, dtype_bytes=4, kv_bytes_per_token=100, clock=clock
    )
    clock.now += 10
    prefill = _step(prefill=50, decode=0, forward_s=0.01, num_sampling_seqs=1)
    metrics.record_step(prefill, 1, idle_gap_s=0.0)
    metrics.record_step(_step(0, 4, 0.002, kv_context_tokens=60), 4, idle_gap_s=0.004)
    metrics.record_step(_step(0, 4, 0.002, kv_context_tokens=64, num_preempted=1), 4, 0.002)
    snapshot = metrics.snapshot()
    throughput = snapshot.throughput
    assert throughput.prompt_tokens_per_s == pytest.approx(5.0)
    assert throughput.generation_tokens_per_s == pytest.approx(0.9)
    assert throughput.prompt_tokens_per_step == pytest.approx(50 / 3)
    assert throughput.generation_tokens_per_step == pytest.approx(3.0)
    step = snapshot.step
    assert step.forward_ms == pytest.approx(14 / 3)
    assert step.idle_gap_ms == pytest.approx(2.0)
    assert step.schedule_ms == pytest.approx(1.0)
    assert step.time.count == 3
    # Each decode step reads body + output projection (800 params) and 4 embedding rows.
    decode_bytes = 2 * (800 + 4 * 10) * 4 + (60 + 64) * 100
    assert snapshot.hardware.decode_gb_per_s == pytest.approx(decode_bytes / 0.004 / 1e9)
    prefill_flops = 2 * 600 * 50 + 2 * 200 * 1
    assert snapshot.hardware.prefill_tflop_per_s == pytest.approx(prefill_flops / 0.01 / 1e12)
    assert snapshot.totals.preemptions == 1 and snapshot.totals.steps == 3
    assert step.prefill_time_share == pytest.approx(0.01 / 0.014)


def test_decode_steps_and_speculation_add_up_so_that_emitted_tokens_reconcile():
    metrics = ServingMetrics(clock=FakeClock())
    # 3 decode rows, 2 of them verifying 3-token drafts with 2 and 1 accepted: 3 + 3 tokens.
    verify = SpecDecodeCounts()
    verify.add_draft(3, 2)
    verify.add_draft(3, 1)
    metrics.record_step(_step(0, 3 + 6, 0.002, num_decode_seqs=3, spec_decode=verify), 6, 0.0)
    metrics.record_step(_step(0, 4, 0.002), 4, 0.0)  # 4 plain decode rows (backed off)
    metrics.record_step(_step(8, 0, 0.002, num_sampling_seqs=1), 1, 0.0)  # a prefill
    totals = metrics.snapshot().totals
    assert (totals.decode_seqs, totals.scheduled_seqs) == (7, 8)
    assert (totals.spec_drafts, totals.spec_draft_tokens, totals.spec_accepted_tokens) == (2, 6, 3)
    # Every decode step emits its token plus its accepted drafts; the prefill its first token.
    assert totals.generation_tokens == totals.decode_seqs + totals.spec_accepted_tokens + 1


def test_moe_decode_bytes_count_the_touched_experts_and_the_mean_is_per_step():
    clock = FakeClock()
    # 600 body = 200 dense + 2 layers x 4 experts x 50; tables of 20 x 10.
    cost = ModelCost(
        num_params=1000, vocab_size=20, hidden_size=10, num_experts=4,
        num_experts_per_token=1, num_moe_layers=2, num_params_per_expert=50,
    )  # fmt: skip
    metrics = ServingMetrics(window_s=10, cost=cost, dtype_bytes=4, kv_bytes_per_token=100,
                             clock=clock)  # fmt: skip
    clock.now += 10
    metrics.record_step(_step(0, 2, 0.002, kv_context_tokens=10, num_experts_touched=3), 2, 0.0)
    metrics.record_step(_step(0, 2, 0.002, kv_context_tokens=10, num_experts_touched=1), 2, 0.0)
    hardware = metrics.snapshot().hardware
    # Each step: 200 dense + touched x 50 + 200 output projection + 2 embedding rows.
    decode_bytes = ((200 + 150 + 200 + 20) + (200 + 50 + 200 + 20)) * 4 + 2 * 10 * 100
    assert hardware.decode_gb_per_s == pytest.approx(decode_bytes / 0.004 / 1e9)
    assert hardware.experts_touched_per_step == pytest.approx(2.0)
    assert hardware.num_expert_slots == 8
    dense = ServingMetrics(window_s=10, clock=clock)
    dense.record_step(_step(0, 2, 0.002), 2, 0.0)
    assert dense.snapshot().hardware.experts_touched_per_step is None


def test_requests_feed_latency_and_goodput_only_when_completed():
    clock = FakeClock()
    metrics = ServingMetrics(window_s=10, slo_ttft_s=0.1, clock=clock)
    metrics.record_request(_request_metrics(0.05, 0.01), "length")
    metrics.record_request(_request_metrics(0.5, 0.01), "stop")
    metrics.record_request(_request_metrics(0.01, 0.01), "abort")
    snapshot = metrics.snapshot()
    latency = snapshot.latency
    assert latency.ttft.count == 2 and latency.ttft.max == 0.5
    assert latency.itl.count == 4
    assert latency.queue.mean == pytest.approx(0.001)
    assert snapshot.goodput.fraction == 0.5
    assert snapshot.totals.finished == {"length": 1, "stop": 1, "abort": 1}
    clock.now += 11
    assert metrics.snapshot().latency.ttft.count == 0


def test_wait_seconds_add_up_per_reason_over_every_finished_request():
    metrics = ServingMetrics(window_s=10, clock=FakeClock())
    waits = {"queue": 0.25, "kv_blocks": 1.5}
    for reason, extra in (("length", {}), ("abort", {"max_num_seqs": 2.0})):
        breakdown = WaitBreakdown(wait_s={**dict.fromkeys(WAIT_REASONS, 0.0), **waits, **extra})
        metrics.record_request(
            dataclasses.replace(_request_metrics(0.05, 0.01), waits=breakdown), reason
        )
    assert metrics.snapshot().totals.wait_s == {
        "queue": 0.5, "kv_blocks": 3.0, "max_num_seqs": 2.0, "token_budget": 0.0,
        "preempted": 0.0,
    }  # fmt: skip


def test_the_grammar_phase_is_its_own_slice_of_the_step_and_adds_up_since_start():
    clock = FakeClock()
    metrics = ServingMetrics(window_s=10, clock=clock)
    metrics.record_step(_step(0, 2, 0.004, grammar_s=0.0006), 2, idle_gap_s=0.001)
    metrics.record_step(_step(0, 2, 0.004), 2, idle_gap_s=0.001)  # no constrained row
    step = metrics.snapshot().step
    assert step.grammar_ms == pytest.approx(0.3)  # 0.6 ms over two steps
    assert step.prepare_ms == pytest.approx(2.0) and step.forward_ms == pytest.approx(4.0)
    clock.now += 11  # out of the window, not out of the totals
    snapshot = metrics.snapshot()
    assert snapshot.step.grammar_ms is None
    assert snapshot.totals.phase_s == pytest.approx(
        {"schedule": 0.002, "grammar": 0.0006, "prepare": 0.004, "forward": 0.008,
         "sample": 0.006, "idle_gap": 0.002}
    )  # fmt: skip


def test_empty_snapshot_has_no_division_by_zero():
    snapshot = ServingMetrics().snapshot()
    assert snapshot.throughput.prompt_tokens_per_step is None
    assert snapshot.hardware.to_wire() == {
        "decode_gb_per_s": None,
        "prefill_tflop_per_s": None,
        "peak_gb_per_s": None,
        "peak_tflop_per_s": None,
        "peak_source": "unknown",
        "experts_touched_per_step": None,
        "num_expert_slots": 0,
    }
    assert snapshot.step.prefill_time_share is None


def test_device_peaks_known_gpu_and_unknown():
    assert device_peaks("NVIDIA H200", "bfloat16") == (4800.0, 989.0)
    assert device_peaks("NVIDIA H100 80GB HBM3", "float32") == (3350.0, 67.0)
    assert device_peaks("NVIDIA L40", "bfloat16") == (864.0, 181.0)
    assert device_peaks("NVIDIA L4", "bfloat16") == (300.0, 121.0)
    assert device_peaks("NVIDIA H100 NVL", "bfloat16") == (3900.0, 835.0)
    assert device_peaks("NVIDIA A100 80GB PCIe", "bfloat16") == (1935.0, 312.0)
    assert device_peaks("NVIDIA L40X prototype", "bfloat16") == (None, None)
    assert device_peaks("cpu", "float32") == (None, None)
    metrics = ServingMetrics(peak_gb_per_s=4800.0, peak_tflop_per_s=989.0)
    assert metrics.snapshot().hardware.peak_gb_per_s == 4800.0
