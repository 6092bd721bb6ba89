"""Why a request waited before (and between) its prefill chunks, and for how long.

Pure standard library, so the engine, the daemon, the clients, the HTTP API, `llmd bench`
and `llmd top` share one set of reason names and one wire form of the breakdown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

QUEUE = "queue"
"""Not reached: behind the queue's head, or not there yet when the step was planned."""
KV_BLOCKS = "kv_blocks"
"""Too few free KV blocks for its next chunk (or a running request was preempted for blocks)."""
MAX_NUM_SEQS = "max_num_seqs"
"""The running set was full."""
TOKEN_BUDGET = "token_budget"
"""The step's token budget was taken (by running requests and earlier admissions)."""
PREEMPTED = "preempted"
"""Waiting to be recomputed after a preemption."""
WAIT_REASONS = (QUEUE, KV_BLOCKS, MAX_NUM_SEQS, TOKEN_BUDGET, PREEMPTED)
"""Every reason, in the order they are shown."""
MAX_CHUNK_SIZES = 32
"""Most prefill chunk sizes a breakdown lists (the count covers them all)."""


@dataclass(frozen=True)
class WaitBreakdown:
    """A request's waits by reason plus its prefill chunks, prefix hits and preemptions."""

    wait_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(WAIT_REASONS, 0.0))
    """Seconds waiting for admission, per reason (every reason present): they add up to the
    request's whole wait, its queue time (every reason but preempted) plus its waits after
    preemptions (preempted)."""
    num_wait_steps: dict[str, int] = field(default_factory=lambda: dict.fromkeys(WAIT_REASONS, 0))
    """Engine steps waited through, per reason (the step in flight at arrival counts)."""
    token_budget_taken_by: str | None = None
    """The request with the largest prefill chunk in the last step whose token budget held
    this one back (None if the budget never did)."""
    num_prefill_chunks: int = 0
    prefill_chunk_sizes: tuple[int, ...] = ()
    """Tokens of each prefill chunk, the first MAX_CHUNK_SIZES (recomputations included)."""
    num_prefill_tokens: int = 0
    """Tokens computed in prefill chunks (a recomputation after preemption counts again)."""
    num_cached_tokens: int = 0
    """Prompt tokens served by the prefix cache at the last admission."""
    num_preemptions: int = 0

    @property
    def total_wait_s(self) -> float:
        """Every second spent waiting for admission, whatever the reason."""
        return sum(self.wait_s.values())

    @property
    def queue_wait_s(self) -> float:
        """Seconds waiting before the first admission: the request's queue time."""
        return self.total_wait_s - self.wait_s.get(PREEMPTED, 0.0)

    @property
    def main_reason(self) -> str | None:
        """The reason with the most seconds, or None when the request never waited."""
        reason = max(WAIT_REASONS, key=lambda name: self.wait_s.get(name, 0.0))
        return reason if self.wait_s.get(reason, 0.0) > 0 else None

    def to_dict(self) -> dict[str, Any]:
        """Wire form: plain maps, lists and numbers (docs/protocol.md, `finished.breakdown`)."""
        return {
            "wait_s": {name: self.wait_s.get(name, 0.0) for name in WAIT_REASONS},
            "num_wait_steps": {name: self.num_wait_steps.get(name, 0) for name in WAIT_REASONS},
            "token_budget_taken_by": self.token_budget_taken_by,
            "num_prefill_chunks": self.num_prefill_chunks,
            "prefill_chunk_sizes": list(self.prefill_chunk_sizes),
            "num_prefill_tokens": self.num_prefill_tokens,
            "num_cached_tokens": self.num_cached_tokens,
            "num_preemptions": self.num_preemptions,
        }

    @classmethod
    def from_dict(cls, data: Any) -> WaitBreakdown | None:
        """Read a wire form back, tolerating missing or mistyped keys (None if not a map)."""
        if not isinstance(data, dict):
            return None
        wait_s, num_steps = _map(data.get("wait_s")), _map(data.get("num_wait_steps"))
        taken_by = data.get("token_budget_taken_by")
        sizes = data.get("prefill_chunk_sizes")
        return cls(
            wait_s={name: float(_number(wait_s, name)) for name in WAIT_REASONS},
            num_wait_steps={name: int(_number(num_steps, name)) for name in WAIT_REASONS},
            token_budget_taken_by=taken_by if isinstance(taken_by, str) else None,
            num_prefill_chunks=int(_number(data, "num_prefill_chunks")),
            prefill_chunk_sizes=tuple(
                int(size) for size in sizes or () if isinstance(size, int)
            ) if isinstance(sizes, list) else (),
            num_prefill_tokens=int(_number(data, "num_prefill_tokens")),
            num_cached_tokens=int(_number(data, "num_cached_tokens")),
            num_preemptions=int(_number(data, "num_preemptions")),
        )  # fmt: skip


def _map(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _number(values: dict[str, Any], key: str) -> float:
    value = values.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    return value
