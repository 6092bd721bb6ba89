"""The plan of one engine step, handed from the scheduler to the model runner.

Plain data, so the runner needs nothing from the scheduler but this: the requests it has
not seen yet (`NewRequestData`), per scheduled request its tokens and new blocks by id
(`ScheduledChunk`), and the ids whose per-request state it must free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llmd.sampling_params import SamplingParams

if TYPE_CHECKING:
    from llmd.engine.request import Request

PENDING_TOKEN_ID = -1
"""Stands in for an output token sampled on the device but not yet read back (async
scheduling); the runner feeds the device-side value, and the engine replaces it."""


@dataclass(frozen=True, slots=True)
class NewRequestData:
    """What the runner keeps of a request it has not seen (admitted, resumed or re-sent).

    Its first chunk in the same plan carries its position, input tokens and every block.
    """

    request_id: str
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    """Tokens generated so far: none for a new request, the history of a resumed one."""
    sampling_params: SamplingParams
    eos_token_ids: tuple[int, ...] = ()


@dataclass(slots=True)
class ScheduledChunk:
    """Compute `num_new_tokens` tokens of one request, from `num_computed_tokens` on.

    `request` is the engine's own handle, for applying the step (None in plans the runner
    makes itself); the runner reads only the data fields (tests/test_import_rules.py).
    """

    request: Request | None
    num_new_tokens: int
    is_sampling: bool
    """True when the chunk reaches the request's last token, so this step samples one."""
    request_id: str = ""
    num_computed_tokens: int = 0
    """Position of the chunk's first token (tokens before it have K/V in the cache)."""
    token_ids: list[int] = field(default_factory=list)
    """The chunk's input ids, `num_new_tokens` of them; the last may be PENDING_TOKEN_ID."""
    new_block_ids: list[int] = field(default_factory=list)
    """Blocks appended to the request's table since the runner was last sent it (all of
    them for a request in the plan's `new_requests`)."""
    num_blocks: int = 0
    """Length of the request's block table once `new_block_ids` are appended."""
    num_draft_tokens: int = 0
    """Speculative decoding: the last this many `token_ids` are drafts to verify (the
    first is the request's last sampled token), and the runner samples at every position
    of the chunk, not only its last; 0 for every other chunk."""

    @property
    def is_decode(self) -> bool:
        """A decode is a one-token sampling chunk (the previous step's output)."""
        return self.num_new_tokens == 1 and self.is_sampling

    @property
    def is_verify(self) -> bool:
        """A verify chunk: a decode followed by draft tokens (speculative decoding)."""
        return self.num_draft_tokens > 0


@dataclass(frozen=True, slots=True)
class GrammarBitmask:
    """Allowed next tokens of a step's constrained requests (structured outputs)."""

    request_ids: list[str]
    """The request of each mask row: the constrained sampling requests, a verify chunk's
    once per position (its draft positions in order, then its own row)."""
    bitmask: Any
    """numpy int32 [len(request_ids), ceil(vocab / 32)]: bit t % 32 of word t // 32 is set
    when token t is allowed."""
    fill_s: float = 0.0
    """Host time spent filling the masks, seconds (a slice of the step in metrics)."""
    draft_offsets: list[int] = field(default_factory=list)
    """Per mask row, -1 for its chunk's own sampling row, or j for the verify chunk's draft
    row j (the position after j drafts); empty reads as -1 for every row."""


@dataclass
class SchedulerOutput:
    """Everything the runner must compute in one step; decodes come before prefills.

    The runner first frees the state of `finished_request_ids` and
    `preempted_request_ids`, then takes in `new_requests`, then runs `chunks`.
    """

    chunks: list[ScheduledChunk] = field(default_factory=list)
    num_prefill_tokens: int = 0
    num_decode_tokens: int = 0
    num_verify_tokens: int = 0
    """Tokens of verify chunks (each a decode plus its drafts; speculative decoding)."""
    new_requests: list[NewRequestData] = field(default_factory=list)
    preempted_request_ids: list[str] = field(default_factory=list)
    """Requests preempted by this plan: the runner frees their rows (sampling state stays,
    for their resumption)."""
    finished_request_ids: list[str] = field(default_factory=list)
    """Requests that ended since the previous plan: the runner frees all their state."""
    num_waiting: int = 0
    num_running: int = 0
    grammar_bitmask: GrammarBitmask | None = None
    """Token masks of the constrained rows, filled by the engine just before launch."""

    @property
    def num_batched_tokens(self) -> int:
        """Tokens computed this step."""
        return self.num_prefill_tokens + self.num_decode_tokens + self.num_verify_tokens

    @property
    def is_empty(self) -> bool:
        """True when there is nothing to run."""
        return not self.chunks

    @property
    def samples_constrained(self) -> bool:
        """True when the plan samples a request that has a grammar (structured outputs)."""
        return any(
            chunk.is_sampling and chunk.request is not None and chunk.request.grammar is not None
            for chunk in self.chunks
        )
