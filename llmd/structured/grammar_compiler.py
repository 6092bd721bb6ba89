"""Compiles `StructuredOutputs` constraints into matchers off the engine thread, cached by spec.

A schema can take from microseconds to seconds to compile, and the engine thread must
never wait for one: compiles run on a small thread pool (llguidance drops the GIL while it
builds), each distinct constraint is compiled once (later requests copy the compiled
matcher), and the engine polls the futures between steps.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from llmd.errors import InvalidParameterError
from llmd.structured.grammar_matcher import GrammarMatcher
from llmd.structured.grammar_source import grammar_source
from llmd.structured.grammar_stats import GrammarStats
from llmd.structured_outputs import FIELD, StructuredOutputs

logger = logging.getLogger(__name__)

NUM_COMPILE_THREADS = 1
"""Compiles run one at a time beside the engine: on a small CPU a second would take a core
from the forward pass, and a compile is rare next to the steps (its result is cached)."""
MAX_CACHED_GRAMMARS = 256
"""Distinct constraints kept compiled; the least recently used is dropped beyond this."""


@dataclass(frozen=True)
class CompiledGrammar:
    """A compiled constraint: a matcher at its start state, copied for each request."""

    kind: str
    template: Any
    """The llguidance LLMatcher in its initial state (never advanced itself)."""
    compile_s: float
    """How long the compile took, seconds."""
    vocab_size: int
    """Token ids the tokenizer knows (the model's logit width)."""

    def new_matcher(self) -> GrammarMatcher:
        """A fresh matcher for one request (a cheap copy of the compiled state)."""
        return GrammarMatcher(self.template.deep_copy(), self.kind, self.vocab_size)


def build_llg_tokenizer(tokenizer_json: str, vocab_size: int, eos_token_ids: Sequence[int]) -> Any:
    """llguidance's view of a HF fast tokenizer: `vocab_size` is the model's logit width."""
    import llguidance

    return llguidance.LLTokenizer(
        tokenizer_json, n_vocab=vocab_size, eos_token=list(eos_token_ids) or None
    )


class GrammarCompiler:
    """Compiles constraints for one tokenizer on a thread pool and caches the results."""

    def __init__(
        self,
        make_tokenizer: Callable[[], Any],
        num_threads: int = NUM_COMPILE_THREADS,
        max_cached: int = MAX_CACHED_GRAMMARS,
        compile_delay_s: float = 0.0,
        stats: GrammarStats | None = None,
    ) -> None:
        self._make_tokenizer = make_tokenizer
        self._tokenizer: Any = None
        self._tokenizer_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(num_threads, thread_name_prefix="llmd-grammar")
        self._cache: OrderedDict[tuple[str, str], Future[CompiledGrammar]] = OrderedDict()
        self._max_cached = max_cached
        self.compile_delay_s = compile_delay_s
        """Added to every compile (tests stand in a slow grammar with it)."""
        self.compile_gate: threading.Event | None = None
        """When set, every compile first waits for this event: tests and benchmarks hold a
        compile pending for exactly as long as they need, with no timing assumption."""
        self.stats = stats or GrammarStats()
        """Cache hits and misses, compile times and failures."""

    def submit(self, spec: StructuredOutputs) -> Future[CompiledGrammar]:
        """The compiled grammar of `spec`: a cached future, or a new compile on the pool."""
        key = spec.cache_key
        future = self._cache.get(key)
        if future is not None and not (future.done() and future.exception() is not None):
            self._cache.move_to_end(key)
            self.stats.record_lookup(is_hit=True)
            return future
        future = self._pool.submit(self._compile, spec)
        self.stats.record_lookup(is_hit=False)
        self._cache[key] = future
        while len(self._cache) > self._max_cached:
            self._cache.popitem(last=False)
        return future

    @property
    def num_compiles(self) -> int:
        """Compiles started since start (the cache's misses)."""
        return self.stats.num_compiles

    @property
    def num_cache_hits(self) -> int:
        """Lookups served by a compiled or compiling grammar since start."""
        return self.stats.num_cache_hits

    def close(self) -> None:
        """Stop the pool; compiles under way finish, queued ones are dropped."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _compile(self, spec: StructuredOutputs) -> CompiledGrammar:
        """Build `spec`'s matcher on the pool, timing a success and counting a failure."""
        try:
            compiled = self._build(spec)
        except Exception:
            self.stats.record_failure()
            raise
        self.stats.record_compile(compiled.compile_s)
        return compiled

    def _build(self, spec: StructuredOutputs) -> CompiledGrammar:
        import llguidance

        started = time.perf_counter()
        if self.compile_gate is not None:
            self.compile_gate.wait()
        if self.compile_delay_s:
            time.sleep(self.compile_delay_s)
        source = grammar_source(spec)
        tokenizer = self._llg_tokenizer()
        matcher = llguidance.LLMatcher(tokenizer, source, log_level=0)
        if matcher.is_error():
            raise InvalidParameterError(
                f"is invalid or not supported: {matcher.get_error().strip()}",
                f"{FIELD}.{spec.kind}",
            )
        return CompiledGrammar(
            spec.kind, matcher, time.perf_counter() - started, tokenizer.vocab_size
        )

    def _llg_tokenizer(self) -> Any:
        with self._tokenizer_lock:  # built once, on first use, off the engine thread
            if self._tokenizer is None:
                self._tokenizer = self._make_tokenizer()
            return self._tokenizer
