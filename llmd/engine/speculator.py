"""Speculative decoding in the scheduler: which requests draft, how many tokens, what is kept.

A decoding request may get `1 + k` tokens in a step: its last sampled token plus k drafts
from a proposer. The runner samples the target at each of those positions as usual; a
draft token is accepted while it equals the target's sample at its position, and the first
sample that differs (or the one after the last draft) is emitted too. With a one-hot draft
this is exact rejection sampling (accepted with probability p(draft), otherwise a sample
from p with the draft removed), so the output distribution is the target's at any
temperature, and greedy or seeded output is the same token for token. Pure Python.

With async scheduling a step is planned while the previous one runs, so a decode's last
token is still on the device: drafts need it, and the plan after a verify step needs its
accepted length. So a plan drafts only with no step in flight (`begin_step`'s `may_draft`),
and before each step the engine asks `wants_drafts` whether to apply the step in flight
first (that step loses its overlap) or to go on pipelining plain decodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from llmd.engine.request import FinishReason, Request
from llmd.engine.scheduler_output import PENDING_TOKEN_ID, ScheduledChunk
from llmd.engine.spec_decode_counts import SpecDecodeCounts
from llmd.engine.stop_rules import check_stop, grammar_stop
from llmd.spec.draft_ask import DraftAsk

if TYPE_CHECKING:
    from llmd.config import EngineConfig
    from llmd.engine.block_manager import BlockManager

NO_DRAFT: list[int] = []
"""Shared by the (many) requests that draft nothing in a step; never mutated."""
MAX_DRAFT_BACKOFF = 32
"""Most output tokens a request decodes plainly after drafts that were all rejected: its
text does not repeat (yet), and each rejected draft costs a verify step's extra tokens."""


class DraftProposer(Protocol):
    """Where draft tokens come from, one request at a time (`NgramProposer`)."""

    def propose(self, token_ids: Sequence[int], max_num_tokens: int) -> list[int]:
        """Up to `max_num_tokens` guesses of the tokens after `token_ids`."""
        ...


@runtime_checkable
class BatchProposer(Protocol):
    """Where draft tokens come from for all of a step's decodes at once, with state kept per
    request (`llmd.spec.draft_model_proposer.DraftModelProposer`): a model runs them batched."""

    def propose_batch(self, asks: Sequence[DraftAsk]) -> list[list[int]]:
        """Each ask's guesses (up to its `max_num_tokens`; often fewer, or none)."""
        ...

    def release(self, request_id: str) -> None:
        """Forget a finished or preempted request's state (a no-op for one it has none of)."""
        ...


def accepted_run(draft_ids: Sequence[int], sampled_ids: Sequence[int]) -> list[int]:
    """The tokens a verify step emits: samples while each equals the draft token at its
    position, then the first one that differs (or the bonus after the last draft).

    `sampled_ids` has one more entry than `draft_ids`: sample j was taken after the chunk's
    first j + 1 tokens, so it is the target's choice where draft token j stands.
    """
    num_accepted = 0
    for draft_id, sampled_id in zip(draft_ids, sampled_ids):
        if draft_id != sampled_id:
            break
        num_accepted += 1
    return list(sampled_ids[: num_accepted + 1])


class Speculator:
    """Drafts tokens for eligible decoding requests and applies their verified runs."""

    def __init__(
        self,
        proposer: DraftProposer | BatchProposer,
        num_speculative_tokens: int,
        max_model_len: int,
        max_batch_size: int | None = None,
    ) -> None:
        self.proposer = proposer
        self.num_speculative_tokens = num_speculative_tokens
        self.max_model_len = max_model_len
        self.max_batch_size = max_batch_size
        """Steps with more running requests draft nothing (None: no limit)."""
        self.totals = SpecDecodeCounts()
        """Counts since start (or the last reset)."""
        self.step_counts = SpecDecodeCounts()
        """Counts of the steps applied since `take_step_counts` last ran."""
        self.step_drafts: dict[str, list[int]] = {}
        """A batch proposer's drafts for the step being scheduled, by request id."""
        self.step_may_draft = True
        """Whether the step being scheduled may draft: not while another is in flight."""

    def can_speculate(self, request: Request) -> bool:
        """Whether the request may draft: opted in and its last token already known (a
        grammar's request too: `drafts_for` cuts its drafts at the first one refused)."""
        return _may_speculate(request) and request.all_token_ids[-1] != PENDING_TOKEN_ID

    def max_num_drafts(self, request: Request, budget: int) -> int:
        """How many draft tokens a decoding request may verify within the token budget,
        max_tokens and max_model_len (its verified run never passes either); 0: none."""
        if not self.step_may_draft or not self.can_speculate(request):
            return 0
        return self._draft_room(request, budget)

    def _draft_room(self, request: Request, budget: int) -> int:
        """`max_num_drafts` of a request that may speculate: 0 while it backs off."""
        if request.num_output_tokens < request.no_draft_until:
            return 0
        return min(
            self.num_speculative_tokens,
            budget - 1,
            request.sampling_params.max_tokens - request.num_output_tokens - 1,
            self.max_model_len - request.num_tokens - 1,
        )

    def wants_drafts(self, running: Sequence[Request], budget: int) -> bool:
        """Whether some running decode would draft in the next plan once its sample in
        flight is known: it may speculate, is not backing off, has room, and its proposer
        would guess (a draft model always does; prompt lookup is tried on the tokens known,
        one behind). Asked before each step with async scheduling, where True costs the
        step its overlap; it looks up at most once per decode, as drafting does."""
        if not self.is_batch_small_enough(running):
            return False
        for request in running:
            if not _is_decode(request) or not _may_speculate(request):
                continue
            if self._draft_room(request, budget) <= 0:
                continue
            if isinstance(self.proposer, BatchProposer):
                return True
            token_ids = request.all_token_ids
            if token_ids[-1] == PENDING_TOKEN_ID:
                token_ids = token_ids[:-1]
            if self.proposer.propose(token_ids, 1):
                return True
        return False

    def is_batch_small_enough(self, running: Sequence[Request]) -> bool:
        """Whether a step of these running requests may draft (`max_batch_size`)."""
        return self.max_batch_size is None or len(running) <= self.max_batch_size

    def begin_step(self, running: Sequence[Request], budget: int, may_draft: bool = True) -> None:
        """Start scheduling a step, which drafts only if `may_draft` (no step in flight); a
        batch proposer is then asked, once, for the drafts of every running decode that may
        draft (`budget`: the step's whole token budget), and a per-request proposer later,
        by `drafts_for`, only for the decodes the budget reaches."""
        may_draft = may_draft and self.is_batch_small_enough(running)
        self.step_may_draft, self.step_drafts = may_draft, {}
        if not may_draft or not isinstance(self.proposer, BatchProposer):
            return
        asks = []
        for request in running:
            if not _is_decode(request):
                continue  # a prefill chunk, or waiting for its sample
            num_tokens = self.max_num_drafts(request, budget)
            if num_tokens > 0:
                asks.append(DraftAsk(request.request_id, request.all_token_ids, num_tokens))
        drafts = self.proposer.propose_batch(asks) if asks else []
        self.step_drafts = {ask.request_id: ids for ask, ids in zip(asks, drafts, strict=True)}

    def drafts_for(self, request: Request, budget: int) -> list[int]:
        """Draft tokens for a decoding request's step, within `max_num_drafts`; often none."""
        num_tokens = self.max_num_drafts(request, budget)
        if num_tokens <= 0:
            return NO_DRAFT
        if isinstance(self.proposer, BatchProposer):
            draft_ids = self.step_drafts.get(request.request_id, NO_DRAFT)[:num_tokens]
        else:
            draft_ids = self.proposer.propose(request.all_token_ids, num_tokens)[:num_tokens]
        if request.grammar is not None and draft_ids:  # the target never samples a refused one
            draft_ids = draft_ids[: request.grammar.num_allowed(draft_ids)]
        return draft_ids

    def release(self, request_id: str) -> None:
        """A request finished or was preempted: a batch proposer drops its state."""
        if isinstance(self.proposer, BatchProposer):
            self.proposer.release(request_id)

    def allocate_drafts(
        self, request: Request, budget: int, block_manager: BlockManager, num_reserved_blocks: int
    ) -> list[int]:
        """A decode's drafts, with blocks for them and its last token allocated; none when
        it drafts nothing or the pool cannot spare the blocks and `num_reserved_blocks`
        more (it then decodes plainly): drafts never preempt anyone."""
        draft_ids = self.drafts_for(request, budget)
        if draft_ids and not block_manager.allocate_slots(
            request, 1 + len(draft_ids), num_reserved_blocks=num_reserved_blocks
        ):
            return NO_DRAFT
        return draft_ids

    def apply_verified(
        self,
        chunk: ScheduledChunk,
        sampled_ids: Sequence[int],
        block_manager: BlockManager,
        now: float,
    ) -> tuple[FinishReason | None, int | None]:
        """Keep a verify chunk's accepted run; returns the finish reason it ended with.

        The chunk's input token and its accepted drafts have their K/V cached now, so
        `num_computed_tokens` moves past them only: blocks that only rejected drafts reached
        go back to the pool (the rest of their slots are written over by the next step), and
        only full blocks of accepted tokens are cached. The run's tokens are appended one at
        a time under the stop rules; none after a stop is kept.
        """
        request = chunk.request
        assert request is not None  # the scheduler's own plans carry their requests
        draft_ids = chunk.token_ids[1:]
        run = accepted_run(draft_ids, sampled_ids)
        num_accepted = len(run) - 1
        self.step_counts.add_draft(len(draft_ids), num_accepted)
        self.totals.add_draft(len(draft_ids), num_accepted)
        request.num_draft_tokens += len(draft_ids)
        request.num_accepted_tokens += num_accepted
        request.num_drafts += 1
        if num_accepted:
            request.num_missed_drafts = 0
        else:  # back off: 1, 2, 4, ... plain decodes after each miss in a row
            request.num_missed_drafts += 1
            backoff = min(1 << (request.num_missed_drafts - 1), MAX_DRAFT_BACKOFF)
            request.no_draft_until = request.num_output_tokens + 1 + backoff
        reason, stop_reason, num_kept = None, None, 0
        for token_id in run:
            request.append_token(token_id, now)
            num_kept += 1
            reason, stop_reason = check_stop(request, token_id, self.max_model_len)
            if reason is None and request.grammar is not None:
                reason = grammar_stop(request, token_id)
            if reason is not None:
                break
        # The input token and the drafts before the last kept token have their K/V now.
        request.num_computed_tokens += num_kept
        block_manager.cache_full_blocks(request)
        if reason is None:  # the next step writes the last kept token's K/V: keep its slot
            block_manager.free_tail(request, request.num_computed_tokens + 1)
        return reason, stop_reason

    def take_step_counts(self) -> SpecDecodeCounts:
        """The counts since the last call (one step's; the totals have them already)."""
        counts, self.step_counts = self.step_counts, SpecDecodeCounts()
        return counts

    def reset_counters(self) -> None:
        """Zero the totals (after a warm-up)."""
        self.totals = SpecDecodeCounts()
        self.step_counts = SpecDecodeCounts()


def make_speculator(
    config: EngineConfig, max_model_len: int, vocab_size: int, num_target_blocks: int
) -> Speculator | None:
    """The speculator `config` asks for, or None when speculative decoding is off.

    A draft model must have the target's `vocab_size`; its own KV pool is sized from the
    target's `num_target_blocks` (see `load_draft_proposer`).
    """
    if config.speculative_method is None:
        return None
    proposer: DraftProposer | BatchProposer
    if config.speculative_method == "draft":
        from llmd.spec.draft_model_proposer import load_draft_proposer  # torch: only here

        proposer = load_draft_proposer(config, max_model_len, vocab_size, num_target_blocks)
    else:
        from llmd.spec.ngram_proposer import NgramProposer  # numpy: only when speculating

        proposer = NgramProposer(config.prompt_lookup_min, config.prompt_lookup_max)
    return Speculator(
        proposer, config.num_speculative_tokens, max_model_len, config.speculative_max_batch_size
    )


def _may_speculate(request: Request) -> bool:
    """`Speculator.can_speculate` whatever the request's last token (a sample in flight)."""
    return request.sampling_params.can_speculate


def _is_decode(request: Request) -> bool:
    """Whether the request's next chunk is a decode: one token to compute, an output."""
    return request.num_tokens - request.num_computed_tokens == 1 and request.num_output_tokens > 0
