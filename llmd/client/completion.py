"""What the clients return: a finished generation, and the events a stream yields.

Streams yield the protocol's own messages (Accepted, PrefillProgress, TokenDelta,
Finished); a blocking `generate` folds them into one Completion.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmd.protocol import Accepted, Finished, LogprobEntry, PrefillProgress, TokenDelta
from llmd.wait_breakdown import WaitBreakdown

StreamEvent = Accepted | PrefillProgress | TokenDelta | Finished
"""What `Client.stream` yields; Finished is always last."""


@dataclass(frozen=True)
class Completion:
    """A finished generation."""

    id: str
    """The client's request id."""
    request_id: str
    """The engine's request id (as shown by stats and `llmd top`)."""
    text: str
    token_ids: list[int]
    finish_reason: str
    """stop, length or abort."""
    stop_reason: int | str | None
    num_prompt_tokens: int
    usage: dict[str, int]
    """prompt_tokens, completion_tokens, cached_tokens."""
    timings: dict[str, float | None]
    """Seconds: queue, prefill, ttft, decode, tpot, e2e."""
    logprobs: list[LogprobEntry] | None = None
    num_preemptions: int = 0
    waits: WaitBreakdown | None = None
    """Why it waited, its prefill chunks and prefix hits (None from a daemon that does not say)."""
    prompt_logprobs: list[LogprobEntry | None] | None = None
    """Per prompt token (null for the first), when `prompt_logprobs` was asked for."""
    prompt_text: str | None = None
    """The prompt's text, when `echo` was asked for."""
    prompt_tokens: list[str] | None = None
    """Each prompt token's text, when `echo` was asked for."""
    spec_decode: dict[str, int] | None = None
    """Speculative decoding: num_drafts, num_draft_tokens, num_accepted_tokens (None: no
    draft was verified for it)."""

    @classmethod
    def from_finished(cls, accepted: Accepted | None, finished: Finished, text: str) -> Completion:
        """Combine a request's accepted and finished messages."""
        return cls(
            id=finished.id,
            request_id=accepted.request_id if accepted is not None else "",
            text=text,
            token_ids=finished.token_ids,
            finish_reason=finished.finish_reason,
            stop_reason=finished.stop_reason,
            num_prompt_tokens=finished.usage.get("prompt_tokens", 0),
            usage=finished.usage,
            timings=finished.timings,
            logprobs=finished.logprobs,
            num_preemptions=finished.num_preemptions,
            waits=WaitBreakdown.from_dict(finished.breakdown),
            prompt_logprobs=finished.prompt_logprobs,
            prompt_text=finished.prompt_text,
            prompt_tokens=finished.prompt_tokens,
            spec_decode=finished.spec_decode,
        )
