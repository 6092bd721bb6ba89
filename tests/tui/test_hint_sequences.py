"""Every hint rule fires on a realistic run of snapshots fed through TopModel, and only it.

Each scenario is a sequence of stats snapshots a daemon in that state sends four times a
second (counts computed by hand), so the trends the rules read (queue growth, recent
preemptions) come from the model's own history, as in `llmd top`.
"""

from __future__ import annotations

import pytest

from llmd.protocol import SNAPSHOT_VERSION, StatsSnapshot
from llmd.tui.top.model import TopModel
from tests.tui.sample_snapshots import busy_wire, typed

INTERVAL_S = 0.25


def snapshot(
    step: int,
    *,
    waiting: int = 1,
    running: int = 4,
    preempted: int = 0,
    preemptions_total: int = 0,
    num_blocks: tuple[int, int, int] = (40, 10, 50),
    itl: tuple[float, float] = (0.010, 0.015),
    tokens_per_step: tuple[float, float] = (2.0, 8.0),
    step_ms: float = 10.0,
    idle_gap_ms: float = 0.5,
    steps_per_s: float = 50.0,
    decode_gb_per_s: float = 100.0,
    peak_gb_per_s: float | None = 1000.0,
) -> StatsSnapshot:
    """Snapshot `step` of a run: the keys of docs/protocol.md that the rules read set, the
    other sections at their defaults (no request table)."""
    used, cached, free = num_blocks
    total = used + cached + free
    prompt_per_step, generation_per_step = tokens_per_step
    num_steps = int(steps_per_s * INTERVAL_S) * step
    return typed({
        "time": 1_800_000_000.0 + INTERVAL_S * step,
        "window_s": 60.0,
        "daemon": {**busy_wire(0)["daemon"], "model": "m", "state": "ok"},
        "queue": {
            "waiting": waiting,
            "running": running,
            "preempted": preempted,
            "preemptions_total": preemptions_total,
        },
        "kv": {
            "block_size": 16,
            "num_total": total,
            "num_used": used,
            "num_cached": cached,
            "num_free": free,
            "prefix_query_tokens": 0,
            "prefix_hit_tokens": 0,
        },
        "goodput": {},
        "latency": {"itl": {"count": 500, "p50": itl[0], "p90": itl[1], "p99": itl[1]}},
        "throughput": {
            "steps_per_s": steps_per_s,
            "prompt_tokens_per_step": prompt_per_step,
            "generation_tokens_per_step": generation_per_step,
        },
        "step": {"time": {"count": 100, "mean": step_ms / 1000}, "idle_gap_ms": idle_gap_ms},
        "hardware": {"decode_gb_per_s": decode_gb_per_s, "peak_gb_per_s": peak_gb_per_s},
        "totals": {
            "steps": num_steps,
            "prompt_tokens": int(num_steps * prompt_per_step),
            "generation_tokens": int(num_steps * generation_per_step),
        },
        "snapshot_version": SNAPSHOT_VERSION,
    })  # fmt: skip


def hints_after(snapshots: list[StatsSnapshot]) -> dict[str, str]:
    """Hint name -> message once the whole sequence has been applied."""
    model = TopModel(clock=lambda: 0.0)
    for item in snapshots:
        model.apply(item)
    return {hint.name: hint.message for hint in model.view().hints}


def test_a_calm_daemon_gets_no_hint():
    assert hints_after([snapshot(step) for step in range(40)]) == {}


def test_the_kv_limited_state_of_the_issue():
    # --num-blocks 80 and 8 clients: 7 wait behind 1 running request, every block is used
    # or holds a cached prefix, 4 preemptions happened long before this 10 s window, and
    # the queue is steady (not growing).
    run = [
        snapshot(step, waiting=7, running=1, preemptions_total=4, num_blocks=(62, 18, 0))
        for step in range(60)
    ]
    hints = hints_after(run)
    assert list(hints) == ["kv_full"]
    assert hints["kv_full"].startswith("KV cache full (0 of 80 blocks free), 7 waiting, 1 running")


def test_a_full_cache_that_preempts():
    run = [
        snapshot(step, waiting=3, running=6, preempted=1 if step > 20 else 0,
                 preemptions_total=step // 8, num_blocks=(79, 0, 1))
        for step in range(40)
    ]  # fmt: skip
    hints = hints_after(run)
    assert list(hints) == ["kv_full"]
    # 39 // 8 - 0 // 8 = 4 preemptions within the last 10 s of history
    assert hints["kv_full"].startswith("KV cache full (1 of 80 blocks free), 4 preemptions in 10s")


def test_a_growing_queue():
    run = [snapshot(step, waiting=step // 2, running=8) for step in range(40)]
    hints = hints_after(run)
    assert list(hints) == ["queue_growing"]
    assert hints["queue_growing"].startswith("Queue grows 2.0/s (19 waiting)")  # 0.5 per 0.25 s


def test_prefill_starving_decodes():
    run = [snapshot(step, itl=(0.005, 0.030), tokens_per_step=(300.0, 8.0)) for step in range(20)]
    hints = hints_after(run)
    assert list(hints) == ["prefill_starving_decode"]
    assert "is 6.0× p50, prefill 300 of 308 tokens/step" in hints["prefill_starving_decode"]


def test_host_gaps_between_steps():
    run = [snapshot(step, idle_gap_ms=4.0, step_ms=10.0) for step in range(20)]
    hints = hints_after(run)
    assert list(hints) == ["host_gaps"]
    assert hints["host_gaps"].startswith("4.0 ms host gap between steps (29% of busy time)")


@pytest.mark.parametrize("peak", [1000.0, None])
def test_busy_but_inefficient_only_against_a_known_peak(peak):
    # 95 steps/s x 10 ms = 95% busy, decoding at 50 GB/s of a 1000 GB/s peak
    run = [
        snapshot(step, steps_per_s=95.0, decode_gb_per_s=50.0, peak_gb_per_s=peak)
        for step in range(20)
    ]
    hints = hints_after(run)
    if peak is None:
        assert hints == {}
    else:
        assert list(hints) == ["busy_but_inefficient"]
        assert hints["busy_but_inefficient"].startswith("Busy 95% of the time, decode at 5% of")
