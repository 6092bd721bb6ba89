"""What structured outputs cost the engine: requests by kind, compiles, cache, failures.

The compile thread records compile times and failures while the engine thread records
arrivals, cache hits and timeouts, so one lock guards them; the engine copies them into
a snapshot's `GrammarSection` between steps.
"""

from __future__ import annotations

import math
import threading

from llmd.metrics.bucket_histogram import COMPILE_BUCKETS_S, BucketHistogram
from llmd.metrics.histogram import SlidingHistogram
from llmd.protocol.grammar_section import GrammarSection
from llmd.structured_outputs import KINDS

NUM_RECENT_COMPILES = 256
"""Compiles the percentiles cover: the newest ones, however old (compiles are rare)."""


class GrammarStats:
    """Thread-safe counters and compile-time histograms of one engine's grammars."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests_by_kind = dict.fromkeys(KINDS, 0)
        self._num_compiles = 0
        self._num_cache_hits = 0
        self._num_failures = 0
        self._num_timeouts = 0
        self._recent = SlidingHistogram(math.inf, max_samples=NUM_RECENT_COMPILES)
        self._lifetime = BucketHistogram(COMPILE_BUCKETS_S)

    def record_request(self, kind: str) -> None:
        """A constrained request arrived."""
        with self._lock:
            self._requests_by_kind[kind] = self._requests_by_kind.get(kind, 0) + 1

    def record_lookup(self, is_hit: bool) -> None:
        """The compile cache was asked for a grammar: found (or compiling), or a new compile."""
        with self._lock:
            if is_hit:
                self._num_cache_hits += 1
            else:
                self._num_compiles += 1

    def record_compile(self, seconds: float) -> None:
        """A compile succeeded after `seconds`."""
        with self._lock:
            self._recent.add(seconds, 0.0)
            self._lifetime.add(seconds)

    def record_failure(self) -> None:
        """A compile failed (the grammar cannot be built for this tokenizer)."""
        with self._lock:
            self._num_failures += 1

    def record_timeout(self) -> None:
        """A request failed because its compile passed the engine's limit."""
        with self._lock:
            self._num_timeouts += 1

    @property
    def num_compiles(self) -> int:
        """Grammars compiled (cache misses) since start."""
        return self._num_compiles

    @property
    def num_cache_hits(self) -> int:
        """Lookups served by a compiled or compiling grammar since start."""
        return self._num_cache_hits

    def section(self, num_waiting: int) -> GrammarSection:
        """The figures now, with `num_waiting` requests waiting for their grammar."""
        with self._lock:
            return GrammarSection(
                requests_by_kind=dict(self._requests_by_kind),
                num_compiles=self._num_compiles,
                num_cache_hits=self._num_cache_hits,
                num_compile_failures=self._num_failures,
                num_compile_timeouts=self._num_timeouts,
                num_waiting=num_waiting,
                compile_time=self._recent.summary(0.0),
                compile_histogram=self._lifetime.data(),
            )
