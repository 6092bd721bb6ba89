"""The engine's structured-output front door: compile, hold, admit or fail, and mask.

It keeps the one rule of constrained requests in one place: a request enters the
scheduler only with a matcher, and every step that samples it carries its mask. The
engine calls it at three points: on arrival, at the top of each step, before launch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from llmd.engine.request import FinishReason, Request
from llmd.engine.scheduler import Scheduler
from llmd.engine.scheduler_output import SchedulerOutput
from llmd.engine.servability import check_servable
from llmd.engine.step_result import RequestUpdate
from llmd.errors import InvalidParameterError
from llmd.structured.compiling_requests import CompilingRequests, GrammarTimeoutError
from llmd.structured.grammar_compiler import GrammarCompiler, build_llg_tokenizer
from llmd.structured.grammar_stats import GrammarStats
from llmd.structured.step_bitmask import build_step_bitmask

if TYPE_CHECKING:
    from llmd.engine.tokenizer import Tokenizer

logger = logging.getLogger(__name__)

GRAMMAR_COMPILE_TIMEOUT_S = 30.0
"""A constraint whose grammar takes longer than this to compile fails its request."""
IDLE_WAIT_S = 0.01
"""With only compiles pending, a step waits this long for one (then the loop reads input)."""


class GrammarAdmission:
    """Compiles constrained requests' grammars and admits them when ready."""

    def __init__(
        self, make_tokenizer: Callable[[], Any], vocab_size: int, stats: GrammarStats | None = None
    ) -> None:
        self.compiler = GrammarCompiler(make_tokenizer, stats=stats)
        self.compiling = CompilingRequests(GRAMMAR_COMPILE_TIMEOUT_S)
        self.vocab_size = vocab_size
        self.stats = self.compiler.stats
        """Requests by kind, compiles, cache hits, failures and timeouts (for snapshots)."""

    @classmethod
    def for_tokenizer(
        cls, tokenizer: Tokenizer, vocab_size: int, eos_token_ids: Sequence[int],
        stats: GrammarStats,
    ) -> GrammarAdmission:  # fmt: skip
        """Admission for a model of `vocab_size` logits whose grammars compile against
        `tokenizer` (llguidance's view of it is built on the compile thread, once)."""

        def make_tokenizer() -> Any:
            return build_llg_tokenizer(tokenizer.to_json(), vocab_size, eos_token_ids)

        return cls(make_tokenizer, vocab_size, stats)

    def add(self, request: Request, scheduler: Scheduler, now: float) -> None:
        """Admit `request` at once if its grammar is compiled, else hold it until it is; one
        the scheduler would refuse (its id in use, never servable) is refused now."""
        if request.request_id in scheduler.requests:
            raise InvalidParameterError(
                f"request id {request.request_id!r} is already in use", "request_id"
            )
        check_servable(request, scheduler.config.max_model_len, scheduler.block_manager)
        spec = request.sampling_params.structured_outputs
        assert spec is not None  # the engine checks
        self.stats.record_request(spec.kind)
        future = self.compiler.submit(spec)
        if future.done() and future.exception() is None:
            request.grammar = future.result().new_matcher()
            scheduler.add_request(request, now)
        else:
            self.compiling.add(request, future, now)

    def admit_ready(self, scheduler: Scheduler, now: float) -> list[RequestUpdate]:
        """Move compiled requests into the scheduler; end the failed ones (their updates)."""
        if not len(self.compiling):
            return []
        ready, failed = self.compiling.take_done(now)
        for request, compiled in ready:
            request.grammar = compiled.new_matcher()
            scheduler.add_request(request, now)
        updates = []
        for request, error in failed:
            if isinstance(error, GrammarTimeoutError):
                self.stats.record_timeout()
            logger.info("request %s: grammar failed: %s", request.request_id, error)
            request.finish(FinishReason.ERROR, now)
            request.error_message = f"{type(error).__name__}: {error}"
            updates.append(RequestUpdate(request, []))
        return updates

    def abort(self, request_id: str) -> Request | None:
        """End a request still waiting for its grammar (None if it is not here)."""
        request = self.compiling.remove(request_id)
        if request is not None:
            request.finish(FinishReason.ABORT, time.monotonic())
        return request

    def attach_masks(self, plan: SchedulerOutput) -> None:
        """Fill the plan's grammar masks from its requests' matchers (just before launch)."""
        plan.grammar_bitmask = build_step_bitmask(plan, self.vocab_size)

    def wait_if_idle(self) -> None:
        """Nothing to run but compiles: wait briefly for one instead of spinning."""
        self.compiling.wait(IDLE_WAIT_S)

    def close(self) -> None:
        """Stop the compile pool."""
        self.compiler.close()
