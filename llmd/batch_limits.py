"""Default batch limits (`max_num_seqs`, token budget) per device and per usage.

Offline runs want the biggest batches the device can step; a server wants each admitted
stream to keep its TPOT, so on CPU it runs fewer sequences at once (measured by
`llmd bench sweep`, docs/benchmarks.md). vLLM keeps its defaults per platform and usage
context the same way.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from llmd.config import EngineConfig
from llmd.errors import require

USAGE_OFFLINE = "offline"
"""`LLM`, `llmd generate` and `llmd bench offline`: throughput first."""
USAGE_SERVE = "serve"
"""`llmd serve`: every admitted stream within its latency targets first."""
USAGES = (USAGE_OFFLINE, USAGE_SERVE)


@dataclass(frozen=True)
class BatchLimits:
    """The two limits of one step's batch."""

    max_num_seqs: int
    """Most requests in one step's batch."""
    max_num_batched_tokens: int
    """Token budget of one step (prefill chunks plus decode tokens)."""


DEFAULT_BATCH_LIMITS: dict[tuple[str, str], BatchLimits] = {
    ("cpu", USAGE_OFFLINE): BatchLimits(max_num_seqs=256, max_num_batched_tokens=2048),
    # From the 2-core sweeps (docs/benchmarks.md, "The token budget and max_num_seqs"):
    # 64 sequences held the most requests per second within TTFT 2 s / TPOT 150 ms at
    # every budget, 256 the fewest; the budget made no difference beyond noise.
    ("cpu", USAGE_SERVE): BatchLimits(max_num_seqs=64, max_num_batched_tokens=2048),
    # CUDA: not swept yet, so both usages keep the limits the GPU path was measured with.
    ("cuda", USAGE_OFFLINE): BatchLimits(max_num_seqs=256, max_num_batched_tokens=2048),
    ("cuda", USAGE_SERVE): BatchLimits(max_num_seqs=256, max_num_batched_tokens=2048),
}


def default_batch_limits(device_type: str, usage: str) -> BatchLimits:
    """The defaults for a device type ("cpu" or "cuda") and a usage."""
    require(usage in USAGES, "usage", f"must be one of {', '.join(USAGES)}, got {usage!r}")
    key = (device_type, usage)
    require(key in DEFAULT_BATCH_LIMITS, "device", f"no batch defaults for {device_type!r}")
    return DEFAULT_BATCH_LIMITS[key]


def resolve_batch_limits(config: EngineConfig, device_type: str, usage: str) -> EngineConfig:
    """`config` with its unset (None) batch limits filled from the defaults.

    Limits a user set are kept as they are; the engine and everything it reports see the
    resolved values only.
    """
    defaults = default_batch_limits(device_type, usage)
    changes: dict[str, int] = {}
    if config.max_num_seqs is None:
        changes["max_num_seqs"] = defaults.max_num_seqs
    if config.max_num_batched_tokens is None:
        changes["max_num_batched_tokens"] = defaults.max_num_batched_tokens
    return dataclasses.replace(config, **changes) if changes else config


def describe_defaults(field_name: str) -> str:
    """A help-text summary of one limit's defaults, e.g. "cpu: 256 offline, 32 serving"."""
    values = {getattr(limits, field_name) for limits in DEFAULT_BATCH_LIMITS.values()}
    if len(values) == 1:
        return str(values.pop())
    parts = []
    for device_type in ("cpu", "cuda"):
        offline = getattr(DEFAULT_BATCH_LIMITS[(device_type, USAGE_OFFLINE)], field_name)
        serve = getattr(DEFAULT_BATCH_LIMITS[(device_type, USAGE_SERVE)], field_name)
        if offline == serve:
            parts.append(f"{device_type}: {offline}")
        else:
            parts.append(f"{device_type}: {offline} offline, {serve} served")
    return "; ".join(parts)
