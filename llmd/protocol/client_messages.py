"""Messages a client sends to the daemon: generate, abort, stats, subscribe, health, shutdown.

Each is validated on construction, so a bad request fails in the client before it is sent
and, identically, in the daemon when it arrives from a client that skipped the checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmd.errors import InvalidParameterError, require
from llmd.protocol.request_label import check_label
from llmd.protocol.schema import WireMessage, message_types
from llmd.sampling_params import SamplingParams

MAX_ID_CHARS = 128
MAX_PRIORITY = 2**31
MIN_SUBSCRIBE_INTERVAL_MS = 100
"""Ten snapshots a second, faster than anyone reads a dashboard: at 50 ms, 64 subscriptions
slowed a generate by 27% on a 2-core machine (scripts/soak.py --scenario stats)."""
MAX_SUBSCRIBE_INTERVAL_MS = 60_000
MAX_TABLE_ROWS = 1024
MAX_PROBED_IDS = 100_000
"""Most request ids one health probe may ask about."""


def check_message_id(value: str, name: str = "id") -> None:
    """Client request ids are non-empty strings of at most MAX_ID_CHARS characters."""
    require(0 < len(value) <= MAX_ID_CHARS, name, f"must have 1 to {MAX_ID_CHARS} characters")


def check_max_requests(value: int) -> None:
    """A snapshot's request table has 0 to MAX_TABLE_ROWS rows."""
    require(0 <= value <= MAX_TABLE_ROWS, "max_requests", f"must be in [0, {MAX_TABLE_ROWS}]")


def check_messages(messages: list[dict[str, object]]) -> None:
    """Chat messages map names to strings, but for an assistant's `tool_calls` (maps)."""
    for index, message in enumerate(messages):
        for key, value in message.items():
            if key == "tool_calls":
                is_valid = isinstance(value, list) and all(isinstance(c, dict) for c in value)
                require(is_valid, "messages", f"message {index}: tool_calls must be a list of maps")
            else:
                require(
                    isinstance(value, str),
                    "messages",
                    f"message {index}: {key!r} must be a string",
                )


@dataclass(frozen=True)
class ClientRequest(WireMessage):
    """What every message to the daemon carries: the client's id, echoed in each reply.

    A base rather than a field written into each message, so that the id's type and its
    check are stated once; subclasses add their fields after it and extend `validate`.
    """

    id: str

    def validate(self) -> None:
        check_message_id(self.id)


@dataclass(frozen=True)
class GenerateRequest(ClientRequest):
    """Generate text for exactly one of `prompt`, `prompt_token_ids` or `messages`."""

    TYPE = "generate"
    prompt: str | None = None
    prompt_token_ids: list[int] | None = None
    messages: list[dict[str, object]] | None = None
    sampling_params: dict[str, object] = field(default_factory=dict)
    stream: bool = True
    priority: int = 0
    expires_at: float | None = None
    """Unix time after which the daemon must not start this request: its client gave up."""
    label: str | None = None
    """The client's name for the request (an HTTP X-Request-Id): in the daemon's log lines
    about it and in `llmd top`."""
    tools: list[dict[str, object]] | None = None
    """Function tools (OpenAI's shape) the chat template lists for `messages`; left off the
    wire when None, so a daemon that predates tools still reads every other request."""
    echo: bool = False
    """Send the prompt's text and its tokens' texts back (OpenAI's `echo`); left off the
    wire when False."""

    def to_wire(self) -> dict[str, object]:
        data = super().to_wire()
        if self.tools is None:
            del data["tools"]
        if not self.echo:
            del data["echo"]
        return data

    def validate(self) -> None:
        super().validate()
        if self.label is not None:
            check_label(self.label)
        if self.tools is not None and self.messages is None:
            raise InvalidParameterError("tools need chat messages", "tools")
        if self.messages is not None:
            check_messages(self.messages)
        require(isinstance(self.echo, bool), "echo", "must be a boolean")
        if self.echo and self.messages is not None:
            raise InvalidParameterError("echo needs a prompt, not chat messages", "echo")
        num_inputs = sum(
            value is not None for value in (self.prompt, self.prompt_token_ids, self.messages)
        )
        if num_inputs != 1:
            raise InvalidParameterError(
                "give exactly one of prompt, prompt_token_ids or messages", "prompt"
            )
        require(
            -MAX_PRIORITY <= self.priority < MAX_PRIORITY,
            "priority",
            f"must be in [-2**31, 2**31), got {self.priority}",
        )
        self.params()  # raises a typed error naming the bad sampling parameter

    def params(self) -> SamplingParams:
        """The validated sampling parameters."""
        stop = self.sampling_params.get("stop", ())
        require(isinstance(stop, (str, list, tuple)), "stop", "must be a string or a list")
        stop_token_ids = self.sampling_params.get("stop_token_ids", ())
        require(isinstance(stop_token_ids, (list, tuple)), "stop_token_ids", "must be a list")
        return SamplingParams.from_dict(self.sampling_params)


@dataclass(frozen=True)
class AbortRequest(ClientRequest):
    """Stop the generation this client started with request `id`; its KV is freed at once."""

    TYPE = "abort"


@dataclass(frozen=True)
class SnapshotQuery(ClientRequest):
    """What a stats snapshot includes: the options that `stats` and `subscribe` share."""

    include_requests: bool = True
    """Include the per-request table (live and recently finished requests)."""
    include_block_map: bool = True
    """Include the KV block map (owner of each block, run-length encoded)."""
    timeline_request_id: str | None = None
    """Engine request id whose event timeline to include."""
    max_requests: int = 64
    """Most rows in the request table."""

    def validate(self) -> None:
        super().validate()
        check_max_requests(self.max_requests)


@dataclass(frozen=True)
class StatsRequest(SnapshotQuery):
    """Ask for one metrics snapshot."""

    TYPE = "stats"


@dataclass(frozen=True, kw_only=True)
class SubscribeRequest(SnapshotQuery):
    """Receive a stats snapshot every `interval_ms` until unsubscribe or disconnect."""

    TYPE = "subscribe"
    interval_ms: int = 1000

    def validate(self) -> None:
        super().validate()
        require(
            MIN_SUBSCRIBE_INTERVAL_MS <= self.interval_ms <= MAX_SUBSCRIBE_INTERVAL_MS,
            "interval_ms",
            f"must be in [{MIN_SUBSCRIBE_INTERVAL_MS}, {MAX_SUBSCRIBE_INTERVAL_MS}]",
        )

    def stats_request(self) -> StatsRequest:
        """The one-shot request each tick of this subscription answers."""
        return StatsRequest(
            self.id,
            self.include_requests,
            self.include_block_map,
            self.timeline_request_id,
            self.max_requests,
        )


@dataclass(frozen=True)
class UnsubscribeRequest(ClientRequest):
    """End the subscription started with `id`."""

    TYPE = "unsubscribe"


@dataclass(frozen=True)
class HealthRequest(ClientRequest):
    """Is the daemon alive and its engine healthy?"""

    TYPE = "health"
    request_ids: list[str] | None = None
    """Ids of this connection's requests the client still waits on; the reply names the
    ones the daemon has no record of (lost in a crash or with a dropped connection)."""

    def validate(self) -> None:
        super().validate()
        if self.request_ids is not None:
            require(
                len(self.request_ids) <= MAX_PROBED_IDS,
                "request_ids",
                f"must list at most {MAX_PROBED_IDS} ids",
            )


@dataclass(frozen=True)
class ShutdownRequest(ClientRequest):
    """Stop the daemon: drain in-flight requests (up to `timeout_s`), or abort them (`now`)."""

    TYPE = "shutdown"
    now: bool = False
    timeout_s: float | None = None
    """Drain time limit; afterwards remaining requests are aborted. None: the daemon's."""

    def validate(self) -> None:
        super().validate()
        if self.timeout_s is not None:
            require(self.timeout_s >= 0, "timeout_s", "must be >= 0")


@dataclass(frozen=True)
class TokenizeRequest(ClientRequest):
    """Token ids of exactly one of `prompt` or chat `messages` (rendered by the template)."""

    TYPE = "tokenize"
    prompt: str | None = None
    messages: list[dict[str, object]] | None = None
    add_special_tokens: bool = True
    """Let the tokenizer add BOS and the like to a prompt (chat templates write their own)."""

    def validate(self) -> None:
        super().validate()
        if (self.prompt is None) == (self.messages is None):
            raise InvalidParameterError("give exactly one of prompt or messages", "prompt")
        if self.messages is not None:
            check_messages(self.messages)


@dataclass(frozen=True)
class DetokenizeRequest(ClientRequest):
    """The text of `token_ids` (special tokens included)."""

    TYPE = "detokenize"
    token_ids: list[int]

    def validate(self) -> None:
        super().validate()
        for token_id in self.token_ids:
            require(0 <= token_id < 2**31, "token_ids", f"token id {token_id} is out of range")


@dataclass(frozen=True)
class FlushCacheRequest(ClientRequest):
    """Drop every cached prefix the engine holds (refused while requests run or wait)."""

    TYPE = "flush_cache"


ClientMessage = (
    GenerateRequest
    | AbortRequest
    | StatsRequest
    | SubscribeRequest
    | UnsubscribeRequest
    | HealthRequest
    | ShutdownRequest
    | TokenizeRequest
    | DetokenizeRequest
    | FlushCacheRequest
)

CLIENT_MESSAGE_TYPES: dict[str, type[WireMessage]] = message_types(ClientMessage)
