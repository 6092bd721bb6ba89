"""What generation returns: finished outputs and their per-request latency metrics.

Pure standard library, so the offline API, the daemon and the clients share one definition
of TTFT, TPOT and the rest, computed from the request's monotonic timestamps.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from llmd.engine.ended_request import EndedRequest
from llmd.engine.request import Request
from llmd.tools.reply_delta import ToolCall
from llmd.wait_breakdown import WaitBreakdown


@dataclass(frozen=True)
class RequestMetrics:
    """Latency breakdown of one request, in seconds (None when the phase never happened)."""

    num_prompt_tokens: int
    num_generated_tokens: int
    num_cached_tokens: int
    """Prompt tokens served from the prefix cache."""
    num_preemptions: int
    queue_time: float | None
    """Arrival to first scheduled."""
    prefill_time: float | None
    """First scheduled to first token (includes every prefill chunk)."""
    ttft: float | None
    """Arrival to first token: what a user waits before text appears."""
    decode_time: float | None
    """First token to last token."""
    tpot: float | None
    """Mean time per output token after the first."""
    e2e: float | None
    """Arrival to finish."""
    itl: tuple[float, ...] = field(default=(), repr=False)
    """Inter-token latencies: the gaps between consecutive output tokens."""
    waits: WaitBreakdown = field(default_factory=WaitBreakdown, repr=False)
    """Why it waited for admission (seconds per reason, adding up to `queue_time` plus any
    waits after preemptions), its prefill chunks and prefix-cache hits."""
    num_drafts: int = 0
    """Speculative decoding: its verify steps (steps that scored draft tokens)."""
    num_draft_tokens: int = 0
    """Draft tokens scored for it."""
    num_accepted_tokens: int = 0
    """Draft tokens accepted (tokens it got without a step of their own)."""

    @property
    def mean_acceptance_length(self) -> float | None:
        """Tokens per verify step: 1 + accepted / drafts (None: it verified no draft)."""
        if not self.num_drafts:
            return None
        return 1 + self.num_accepted_tokens / self.num_drafts

    @classmethod
    def from_request(cls, request: Request, num_output_tokens: int | None = None) -> RequestMetrics:
        """Derive every latency from a request's timestamps.

        `num_output_tokens` counts only the first tokens (those delivered before a stop
        string that matched outside the engine), whatever was sampled after them.
        """
        return cls.from_ended(EndedRequest.of(request), num_output_tokens)

    @classmethod
    def from_ended(
        cls, ended: EndedRequest, num_output_tokens: int | None = None
    ) -> RequestMetrics:
        """Derive every latency from a request's frozen final state (one path for both)."""
        request, waits = ended, ended.waits
        times = request.times
        token_times = times.token_times[:num_output_tokens]  # a copy: the engine may truncate
        itl = tuple(b - a for a, b in itertools.pairwise(token_times))
        decode_time = token_times[-1] - token_times[0] if len(token_times) > 1 else None
        return cls(
            num_prompt_tokens=request.num_prompt_tokens,
            num_generated_tokens=min(request.num_output_tokens, len(token_times)),
            num_cached_tokens=request.num_cached_tokens,
            num_preemptions=request.num_preemptions,
            queue_time=_span(times.arrival, times.first_scheduled),
            prefill_time=_span(times.first_scheduled, times.first_token),
            ttft=_span(times.arrival, times.first_token),
            decode_time=decode_time,
            tpot=decode_time / (len(token_times) - 1) if decode_time is not None else None,
            e2e=_span(times.arrival, times.finished),
            itl=itl,
            waits=waits,
            num_drafts=request.num_drafts,
            num_draft_tokens=request.num_draft_tokens,
            num_accepted_tokens=request.num_accepted_tokens,
        )

    def to_dict(self) -> dict:
        """Plain form (without the per-token ITL list)."""
        return {
            "num_prompt_tokens": self.num_prompt_tokens,
            "num_generated_tokens": self.num_generated_tokens,
            "num_cached_tokens": self.num_cached_tokens,
            "num_preemptions": self.num_preemptions,
            "queue_time": self.queue_time,
            "prefill_time": self.prefill_time,
            "ttft": self.ttft,
            "decode_time": self.decode_time,
            "tpot": self.tpot,
            "e2e": self.e2e,
            "waits": self.waits.to_dict(),
        }


def _span(start: float | None, end: float | None) -> float | None:
    if start is None or end is None:
        return None
    return end - start


@dataclass(frozen=True)
class TokenLogprob:
    """Log-probability of a sampled token and the top alternatives at that position."""

    token_id: int
    logprob: float
    rank: int
    top_token_ids: tuple[int, ...]
    top_logprobs: tuple[float, ...]


@dataclass
class RequestOutput:
    """A finished request as the offline API returns it."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str
    """stop, length, abort or error."""
    stop_reason: int | str | None
    """The stop token id or stop string that ended generation, if any."""
    metrics: RequestMetrics
    logprobs: list[TokenLogprob] | None = None
    tool_calls: list[ToolCall] | None = None
    """With tools (`LLM.chat(tools=...)`): the calls parsed from `text`, in order (possibly
    none); None when no tools were offered."""
    content: str | None = None
    """With tools: `text` less its calls (None when the reply is only calls); None without."""
    prompt_logprobs: list[TokenLogprob | None] | None = None
    """Per prompt token (None for the first): its logprob and the top alternatives, when
    `SamplingParams.prompt_logprobs` asked for them."""
