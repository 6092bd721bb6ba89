"""The engine's structured-output figures in a stats snapshot: requests, compiles, queue.

Defined with the protocol because the engine builds it between steps and `/metrics` and
`llmd top` read it after the snapshot crossed the wire; every field has a default, so a
snapshot from a daemon that predates it still reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmd.protocol.metrics_sections import HistogramData, WindowSummary
from llmd.protocol.wire_data import WireData


@dataclass(frozen=True)
class GrammarSection(WireData):
    """Constrained requests and their grammar compiles since start, and the compile queue now."""

    requests_by_kind: dict[str, int] = field(default_factory=dict)
    """Structured-output requests received, by constraint kind (json, regex, ...)."""
    num_compiles: int = 0
    """Grammars compiled: the compile cache's misses."""
    num_cache_hits: int = 0
    """Requests whose grammar was compiled (or compiling) already."""
    num_compile_failures: int = 0
    """Compiles that failed (a grammar the tokenizer cannot serve)."""
    num_compile_timeouts: int = 0
    """Requests failed because their compile took longer than the engine's limit."""
    num_waiting: int = 0
    """Requests waiting for their grammar to compile now (held out of the scheduler)."""
    compile_time: WindowSummary = field(default_factory=WindowSummary)
    """Seconds of the newest successful compiles (compiles are rare: no time window)."""
    compile_histogram: HistogramData | None = None
    """Seconds of every successful compile since start, for Prometheus."""

    @property
    def num_requests(self) -> int:
        """Structured-output requests received, of every kind."""
        return sum(self.requests_by_kind.values())
