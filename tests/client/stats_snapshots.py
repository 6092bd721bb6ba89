"""Typed stats snapshots for tests that need no daemon: defaults to override per test.

Built from the protocol's constructors, so a test reads exactly the fields a daemon
would send and a renamed field fails here first.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from llmd.protocol import StatsSnapshot
from llmd.protocol.metrics_sections import (
    GoodputSection,
    HardwareSection,
    LatencySection,
    StepSection,
    ThroughputSection,
    TotalsSection,
)
from llmd.protocol.stats_snapshot import DaemonSection

DAEMON = DaemonSection(
    model="m", device="cpu", dtype="float32", device_name="cpu", max_model_len=256,
    num_params=1000, vocab_size=100, scheduling_policy="fcfs", max_num_batched_tokens=512,
    max_num_seqs=8, block_size=16, num_blocks=64, attention_backend="torch",
    async_scheduling=False, version="0.1.0", protocol_version=1, pid=42,
    address="ipc:///x.sock", instance_id="test", state="ok", error=None, uptime_s=1.0,
    num_in_flight=0, max_queued_requests=100, num_subscriptions=0, admission="queue",
    num_refused_by_admission=0,
)  # fmt: skip
"""A live daemon's facts; `daemon_section(**changes)` overrides some."""


def daemon_section(**changes: Any) -> DaemonSection:
    """DAEMON with `changes` applied."""
    return dataclasses.replace(DAEMON, **changes)


def stats_snapshot(**fields: Any) -> StatsSnapshot:
    """A snapshot of an idle daemon whose engine died (no queue or kv) unless `fields` say."""
    defaults: dict[str, Any] = dict(
        time=0.0, window_s=60.0, daemon=DAEMON, latency=LatencySection(),
        goodput=GoodputSection(), throughput=ThroughputSection(), step=StepSection(),
        hardware=HardwareSection(), totals=TotalsSection(),
    )  # fmt: skip
    return StatsSnapshot(**{**defaults, **fields})
