"""Typed stats snapshots for tests that need one without a daemon."""

from __future__ import annotations

import dataclasses

from llmd.metrics import ServingMetrics
from llmd.protocol import StatsSnapshot
from llmd.protocol.engine_sections import EngineFacts
from llmd.protocol.stats_snapshot import DaemonSection

FACTS = EngineFacts(
    model="m", device="cpu", dtype="float32", device_name="cpu", max_model_len=256,
    num_params=1000, vocab_size=64, hidden_size=16, num_layers=2, num_kv_heads=2,
    head_dim=8, is_tied=True, scheduling_policy="fcfs", max_num_batched_tokens=256,
    max_num_seqs=8, block_size=16, num_blocks=32, attention_backend="cpu_paged",
    async_scheduling=False,
)  # fmt: skip
DAEMON = DaemonSection.of(
    FACTS, version="0.0.0", protocol_version=1, pid=1, address="ipc:///x",
    instance_id="0123abcd", state="ok", error=None, uptime_s=1.5, num_in_flight=0,
    max_queued_requests=16, num_subscriptions=0, admission="queue", num_refused_by_admission=0,
)  # fmt: skip


def daemon_section(**changes: object) -> DaemonSection:
    """DAEMON with `changes` to its fields."""
    return dataclasses.replace(DAEMON, **changes)  # type: ignore[arg-type]


def sample_snapshot(**changes: object) -> StatsSnapshot:
    """A fresh daemon's snapshot (nothing measured yet), with `changes` to its fields."""
    snapshot = StatsSnapshot.of(1_800_000_000.0, DAEMON, ServingMetrics().snapshot())
    return dataclasses.replace(snapshot, **changes)  # type: ignore[arg-type]
