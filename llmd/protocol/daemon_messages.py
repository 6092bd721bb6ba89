"""Messages the daemon sends: accepted, prefill_progress, token, finished, error, stats, ...

Every reply carries the client's `id`, so one connection can run many requests and
subscriptions at once; a client reads them as a stream of typed events.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmd.errors import LLMDError, RequestRejectedError
from llmd.protocol.errors import error_from_code
from llmd.protocol.logprob_entry import LogprobEntry
from llmd.protocol.schema import WireMessage, message_types
from llmd.protocol.stats_snapshot import StatsSnapshot

FINISH_REASONS = ("stop", "length", "abort", "error")
HEALTH_STATES = ("warming", "ok", "draining", "dead")


@dataclass(frozen=True)
class Reply(WireMessage):
    """What every answer to a client message carries first: that message's `id`.

    A base rather than a field written into each reply, so the id is declared once, in
    the same place on every reply as on every client message (ClientRequest).
    """

    id: str


@dataclass(frozen=True)
class Accepted(Reply):
    """The engine queued the request: `request_id` is its id in the engine and in stats."""

    TYPE = "accepted"
    request_id: str
    num_prompt_tokens: int
    instance_id: str | None = None
    """The daemon run that accepted it (random per start): a health reply naming another
    instance means the request died with the daemon that had it."""


@dataclass(frozen=True)
class PrefillProgress(Reply):
    """A long prompt is being computed in chunks: `num_computed_tokens` of the prompt's."""

    TYPE = "prefill_progress"
    num_computed_tokens: int
    num_prompt_tokens: int


class PromptFields(Reply):
    """The optional prompt results a request asked for, left off the wire when None.

    `prompt_logprobs`: one entry per prompt token, null for the first (vLLM's shape);
    `prompt_text` and `prompt_tokens`: the prompt and each of its tokens' texts (echo).
    A streaming request gets them on its first `token` message, any other on `finished`.
    """

    def to_wire(self) -> dict[str, object]:
        data = super().to_wire()
        for name in PROMPT_FIELDS:
            if data[name] is None:
                del data[name]
        return data


PROMPT_FIELDS = ("prompt_logprobs", "prompt_text", "prompt_tokens")


@dataclass(frozen=True)
class TokenDelta(PromptFields):
    """New output of a streaming request: text that became safe to show and the token ids."""

    TYPE = "token"
    text: str
    token_ids: list[int]
    logprobs: list[LogprobEntry] | None = None
    """Per token: {token_id, logprob, rank, top_token_ids, top_logprobs}."""
    prompt_logprobs: list[LogprobEntry | None] | None = None
    prompt_text: str | None = None
    prompt_tokens: list[str] | None = None


@dataclass(frozen=True)
class Finished(PromptFields):
    """The request ended; the last message about it."""

    TYPE = "finished"
    finish_reason: str
    """stop, length or abort."""
    stop_reason: int | str | None
    """The stop token id or stop string that ended generation, if any."""
    token_ids: list[int]
    """Every generated token id."""
    usage: dict[str, int]
    """prompt_tokens, completion_tokens, cached_tokens."""
    timings: dict[str, float | None]
    """Seconds: queue, prefill, ttft, decode, tpot, e2e (null when a phase never happened)."""
    text: str | None = None
    """The full text when the request did not stream, else null (the deltas add up to it)."""
    logprobs: list[LogprobEntry] | None = None
    """Every token's logprobs when the request did not stream and asked for them."""
    num_preemptions: int = 0
    breakdown: dict[str, object] | None = None
    """Why the request waited and how its prompt was computed: llmd.wait_breakdown's wire
    form (wait seconds and steps per reason, prefill chunks, prefix hits, preemptions)."""
    prompt_logprobs: list[LogprobEntry | None] | None = None
    prompt_text: str | None = None
    prompt_tokens: list[str] | None = None
    spec_decode: dict[str, int] | None = None
    """Speculative decoding: this request's num_drafts, num_draft_tokens and
    num_accepted_tokens; null when it verified no draft."""


@dataclass(frozen=True)
class ErrorReply(WireMessage):
    """A request failed or was refused; `code` is an llmd error code."""

    TYPE = "error"
    id: str | None
    """The client id of the message it answers, when that could be read."""
    code: str
    message: str
    parameter: str | None = None
    """The field or option that was wrong, when one was."""
    num_prompt_tokens: int | None = None
    """A `request_too_large` refusal for max_model_len: the prompt's tokens."""
    max_model_len: int | None = None
    """The same refusal: the model's context, in tokens."""
    max_fitting_tokens: int | None = None
    """The same refusal: the largest max_tokens that fits after the prompt (0: none does)."""

    def to_wire(self) -> dict[str, object]:
        """The plain dict; absent refusal numbers are left out, so other errors travel as before."""
        data = super().to_wire()
        for name in CONTEXT_FIELDS:
            if data[name] is None:
                del data[name]
        return data

    @classmethod
    def from_error(cls, client_id: str | None, error: LLMDError) -> ErrorReply:
        """The reply that reports `error`, its refusal numbers included."""
        numbers = {name: getattr(error, name, None) for name in CONTEXT_FIELDS}
        return cls(client_id, error.code, error.message, error.parameter, **numbers)

    def to_error(self) -> LLMDError:
        """The exception the daemon reported, rebuilt with its class and refusal numbers."""
        error = error_from_code(self.code, self.message, self.parameter)
        if isinstance(error, RequestRejectedError):
            for name in CONTEXT_FIELDS:
                setattr(error, name, getattr(self, name))
        return error


CONTEXT_FIELDS = ("num_prompt_tokens", "max_model_len", "max_fitting_tokens")
"""The optional fields of an `error` that give a max_model_len refusal's numbers."""


@dataclass(frozen=True)
class StatsReply(Reply):
    """One metrics snapshot (see docs/protocol.md for its keys)."""

    TYPE = "stats"
    snapshot: StatsSnapshot


@dataclass(frozen=True)
class HealthReply(Reply):
    """Liveness: `is_healthy` is false once the engine died or the daemon is draining."""

    TYPE = "health"
    status: str
    """ok, draining or dead."""
    is_healthy: bool
    pid: int
    model: str
    address: str
    uptime_s: float
    num_in_flight: int
    version: str
    protocol_version: int
    message: str | None = None
    """Why the daemon is unhealthy, when it is."""
    instance_id: str | None = None
    """Random per daemon start: a change means the daemon restarted."""
    max_message_bytes: int | None = None
    """The largest message the daemon accepts (its --max-message-bytes)."""
    unknown_request_ids: list[str] = field(default_factory=list)
    """Those of the probe's `request_ids` this daemon has no record of for this connection."""


@dataclass(frozen=True)
class Keepalive(WireMessage):
    """Sent to a connection with requests in flight that got nothing else for a second.

    Its delivery failing is how the daemon notices, within seconds, a client that is gone,
    and it tells the client that the daemon still works on its requests.
    """

    TYPE = "keepalive"
    instance_id: str


@dataclass(frozen=True)
class Ack(Reply):
    """Confirms an unsubscribe or a shutdown step ("draining", "stopped")."""

    TYPE = "ack"
    message: str


@dataclass(frozen=True)
class TokenizeReply(Reply):
    """A `tokenize` answered: the token ids and the model's context, in tokens."""

    TYPE = "tokenized"
    token_ids: list[int]
    max_model_len: int


@dataclass(frozen=True)
class DetokenizeReply(Reply):
    """A `detokenize` answered: the text of the ids."""

    TYPE = "detokenized"
    text: str


@dataclass(frozen=True)
class CacheFlushed(Reply):
    """Answers a flush_cache: how many cached blocks the engine dropped."""

    TYPE = "cache_flushed"
    num_blocks_dropped: int


DaemonMessage = (
    Accepted
    | PrefillProgress
    | TokenDelta
    | Finished
    | ErrorReply
    | StatsReply
    | HealthReply
    | Ack
    | CacheFlushed
    | Keepalive
    | TokenizeReply
    | DetokenizeReply
)

DAEMON_MESSAGE_TYPES: dict[str, type[WireMessage]] = message_types(DaemonMessage)
