"""What one iteration of the engine thread hands the text thread: a batch of frozen records.

Queued requests, refusals, requests ended from outside the step, each request's new
tokens and prompts still prefilling; a finished request comes as its `EndedRequest` copy,
so the text thread never reads an object the engine thread may still change.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmd.engine.ended_request import EndedRequest
from llmd.errors import LLMDError
from llmd.outputs import TokenLogprob


@dataclass(frozen=True)
class UpdateRecord:
    """A request's new tokens from one step; `is_finished` is as of that step."""

    request_id: str
    new_token_ids: list[int]
    new_logprobs: list[TokenLogprob] | None
    is_finished: bool
    request: EndedRequest | None = None
    """Its final state, copied when `is_finished` (None while it runs)."""
    prompt_logprobs: list[TokenLogprob | None] | None = None
    """Every prompt token's entry, on its first output token's record (when asked for)."""


@dataclass
class EngineBatch:
    """What one iteration of the engine loop produced, for the text thread."""

    added: list[tuple[str, int]] = field(default_factory=list)
    """(request id, prompt tokens) of requests the engine queued."""
    rejected: list[tuple[str, LLMDError]] = field(default_factory=list)
    ended: list[EndedRequest] = field(default_factory=list)
    """Requests finished from outside the step (abort, stop string), copied as they ended."""
    updates: list[UpdateRecord] = field(default_factory=list)
    progress: list[tuple[str, int, int]] = field(default_factory=list)
    """(request id, computed prompt tokens, prompt tokens) of prompts still prefilling."""

    def __bool__(self) -> bool:
        return bool(self.added or self.rejected or self.ended or self.updates or self.progress)
