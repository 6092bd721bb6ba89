"""One generation request's state as the scheduler and runner see it.

It is the single source of truth for a request's tokens, progress, KV block table and
timestamps, so metrics and scheduling never disagree; pure standard library.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from llmd.engine.scheduler_output import PENDING_TOKEN_ID
from llmd.engine.wait_ledger import WaitLedger
from llmd.sampling_params import SamplingParams

if TYPE_CHECKING:
    from collections.abc import Sequence

    from llmd.outputs import TokenLogprob

__all__ = [
    "PENDING_TOKEN_ID",
    "FinishReason",
    "Request",
    "RequestStatus",
    "RequestTimes",
    "TokenGrammar",
]


class TokenGrammar(Protocol):
    """What the scheduler needs of a request's grammar (llmd.structured.GrammarMatcher)."""

    def accept(self, token_id: int) -> bool:
        """Advance by one sampled token; False if the grammar forbids it."""
        ...

    @property
    def is_terminated(self) -> bool:
        """True once nothing more may follow: the request ends."""
        ...

    def fill_mask(self, address: int, num_bytes: int) -> None:
        """Write the next token's allowed-token bitmask at `address`."""
        ...

    def num_allowed(self, token_ids: Sequence[int]) -> int:
        """How many of `token_ids`, from the first, may follow in a row (state unchanged)."""
        ...

    def fill_draft_masks(self, draft_ids: Sequence[int], address: int, num_bytes: int) -> None:
        """Write the masks after each prefix of `draft_ids` (none to all) from `address`."""
        ...


class RequestStatus(enum.Enum):
    """Where a request is in its lifecycle."""

    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"


class FinishReason(str, enum.Enum):
    """Why a request finished; the values are sent over the wire."""

    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"
    ERROR = "error"


@dataclass
class RequestTimes:
    """Monotonic timestamps (time.monotonic seconds) for latency metrics."""

    arrival: float
    first_scheduled: float | None = None
    first_token: float | None = None
    token_times: list[float] = field(default_factory=list)
    finished: float | None = None


class Request:
    """A prompt, its generated tokens, its progress (`num_computed_tokens`) and its KV blocks."""

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        sampling_params: SamplingParams,
        eos_token_ids: tuple[int, ...] = (),
        priority: int = 0,
        arrival_time: float | None = None,
        label: str | None = None,
    ) -> None:
        self.request_id = request_id
        self.label = label
        """The client's name for the request (an HTTP X-Request-Id), for logs and `llmd top`."""
        self.sampling_params = sampling_params
        self.eos_token_ids = eos_token_ids
        self.priority = priority
        self.all_token_ids: list[int] = list(prompt_token_ids)
        self.num_prompt_tokens = len(prompt_token_ids)
        self.num_computed_tokens = 0
        """Tokens whose K/V are in the cache; the scheduler catches this up to num_tokens."""
        self.num_cached_tokens = 0
        """Prompt tokens served by a prefix-cache hit at the last admission."""
        self.block_ids: list[int] = []
        """The block table: KV block holding tokens [i*block_size, (i+1)*block_size)."""
        self.block_hashes: list[int] = []
        """Chained hashes of this request's full blocks, computed once, reused on re-admission."""
        self.status = RequestStatus.WAITING
        self.finish_reason: FinishReason | None = None
        self.stop_reason: int | str | None = None
        """The stop token id or stop string that ended the request, if any."""
        self.error_message: str | None = None
        self.num_preemptions = 0
        arrival = time.monotonic() if arrival_time is None else arrival_time
        self.times = RequestTimes(arrival=arrival)
        self.events: list[tuple[float, str, int]] = []
        """Timeline (time, kind, num_tokens) of prefill chunks, decodes and preemptions."""
        self.num_prefill_chunks = 0
        self.num_drafts = 0
        """Verify steps this request ran (speculative decoding)."""
        self.num_draft_tokens = 0
        """Draft tokens verified for it."""
        self.num_accepted_tokens = 0
        """Draft tokens accepted: tokens it got without a step of their own."""
        self.num_missed_drafts = 0
        """Verify steps in a row that accepted no draft token (the speculator backs off)."""
        self.no_draft_until = 0
        """Output count before which the request drafts nothing (after missed drafts)."""
        self.waits = WaitLedger()
        """Why and how long it waited for admission, and its prefill stalls (WaitTracker)."""
        self.grammar: TokenGrammar | None = None
        """The constraint's matcher (structured outputs), set once its grammar compiled."""
        self.prompt_logprobs: list[TokenLogprob | None] | None = None
        """Per prompt token, its logprob entry (None for the first), filled as prefill chunks
        are computed; None when `sampling_params.prompt_logprobs` is."""
        if sampling_params.prompt_logprobs is not None:
            self.prompt_logprobs = [None]

    @property
    def prompt_token_ids(self) -> list[int]:
        """The prompt's token ids."""
        return self.all_token_ids[: self.num_prompt_tokens]

    @property
    def output_token_ids(self) -> list[int]:
        """The generated token ids so far."""
        return self.all_token_ids[self.num_prompt_tokens :]

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens."""
        return len(self.all_token_ids)

    @property
    def num_output_tokens(self) -> int:
        """Generated tokens so far."""
        return len(self.all_token_ids) - self.num_prompt_tokens

    @property
    def max_num_tokens(self) -> int:
        """Prompt plus the most tokens this request may generate."""
        return self.num_prompt_tokens + self.sampling_params.max_tokens

    @property
    def is_finished(self) -> bool:
        """True once a finish reason is set."""
        return self.status is RequestStatus.FINISHED

    def add_prompt_logprobs(self, first_position: int, entries: list[TokenLogprob]) -> None:
        """Record the entries of positions from `first_position` on (each predicts the next
        prompt token); positions recorded already (a recomputation) are skipped."""
        kept = self.prompt_logprobs
        if kept is None:
            return
        for index, entry in enumerate(entries, start=first_position + 1):
            if index == len(kept):
                kept.append(entry)

    @property
    def is_prompt_logprobs_complete(self) -> bool:
        """True when every prompt token after the first has its entry."""
        kept = self.prompt_logprobs
        return kept is not None and len(kept) == self.num_prompt_tokens

    def append_token(self, token_id: int, now: float) -> None:
        """Record one sampled token and its arrival time."""
        self.all_token_ids.append(token_id)
        if self.times.first_token is None:
            self.times.first_token = now
        self.times.token_times.append(now)

    def resolve_pending_token(self, token_id: int, now: float) -> None:
        """Replace the trailing `PENDING_TOKEN_ID` with the sampled id (async scheduling)."""
        if not self.all_token_ids or self.all_token_ids[-1] != PENDING_TOKEN_ID:
            raise RuntimeError(f"{self!r} has no pending token to resolve")
        self.all_token_ids[-1] = token_id
        if self.times.first_token is None:
            self.times.first_token = now
        self.times.token_times.append(now)

    def finish(
        self, reason: FinishReason, now: float, stop_reason: int | str | None = None
    ) -> None:
        """Mark finished; the scheduler frees its blocks.

        A sample still in flight (async scheduling) is never emitted, so its placeholder
        goes too: a finished request's tokens and counts hold only sampled ids.
        """
        if self.all_token_ids[-1:] == [PENDING_TOKEN_ID]:
            self.all_token_ids.pop()
        self.status = RequestStatus.FINISHED
        self.finish_reason = reason
        self.stop_reason = stop_reason
        self.times.finished = now

    def keep_output_tokens(self, num_output_tokens: int) -> None:
        """Forget generated tokens past the first `num_output_tokens` (and their times).

        A stop string is matched outside the engine, which may have sampled on meanwhile;
        those tokens were never delivered, so the request's counts must not include them.
        """
        if num_output_tokens < self.num_output_tokens:
            del self.all_token_ids[self.num_prompt_tokens + num_output_tokens :]
            del self.times.token_times[num_output_tokens:]

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id!r}, status={self.status.value}, "
            f"tokens={self.num_tokens}, computed={self.num_computed_tokens}, "
            f"blocks={len(self.block_ids)})"
        )
