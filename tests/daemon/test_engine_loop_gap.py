"""The engine loop records the device's own idle gap (CUDA events) when a step has one,
the host time between steps otherwise: the same measure with async scheduling on or off."""

from __future__ import annotations

import dataclasses

import pytest

from llmd.daemon.engine_loop import EngineBatch, EngineLoop
from llmd.engine.step_stats import StepStats


class _Metrics:
    def __init__(self):
        self.gaps = []

    def record_step(self, stats, num_generated_tokens, idle_gap_s):
        self.gaps.append(idle_gap_s)


@dataclasses.dataclass
class _Result:
    updates: list
    stats: StepStats


STATS = StepStats(
    started_at=0.0, num_prefill_tokens=0, num_decode_tokens=4, num_prefill_seqs=0,
    num_decode_seqs=4, num_preempted=0, num_running=4, num_waiting=0, schedule_s=0.001,
    prepare_s=0.001, forward_s=0.01, sample_s=0.001, total_s=0.013,
)  # fmt: skip


@pytest.mark.parametrize(("device_gap", "expected"), [(None, 0.25), (0.002, 0.002)])
def test_gap_is_the_device_gap_when_measured(device_gap, expected):
    metrics = _Metrics()
    loop = EngineLoop(engine=None, metrics=metrics, on_batch=lambda b: None,
                      on_death=lambda e: None)  # fmt: skip
    stats = dataclasses.replace(STATS, device_gap_s=device_gap)
    loop._collect(_Result([], stats), EngineBatch(), idle_gap=0.25)
    assert metrics.gaps == [expected]
