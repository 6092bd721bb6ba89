"""The daemon's own settings (address, limits, SLOs), separate from the engine's config.

`llmd serve` builds one from its flags; `--detach` hands it to the child process as JSON,
so the child runs with exactly the settings the parent validated.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from llmd.errors import InvalidParameterError, require
from llmd.protocol.codec import DEFAULT_MAX_MESSAGE_BYTES
from llmd.tools.parser_choice import PARSER_OPTIONS

LOG_LEVELS = ("debug", "info", "warning", "error")
API_KEY_ENV = "LLMD_API_KEY"
"""The HTTP API key travels in the environment, never on a command line (visible to `ps`)."""
ADMISSION_POLICIES = ("queue", "slo")


@dataclass(frozen=True)
class ServeOptions:
    """Everything `llmd serve` takes besides the engine flags (which ride in engine_kwargs)."""

    address: str | None = None
    """ipc://PATH or tcp://HOST:PORT; None means llmd.protocol.default_address()."""
    allow_remote: bool = False
    """Allow a non-loopback tcp bind (the protocol has no authentication)."""
    kv_events: str | None = None
    """Publish KV-cache events (blocks stored in and evicted from the prefix cache) in vLLM's
    format on this ZeroMQ PUB address, e.g. tcp://127.0.0.1:5557 (None: off); a
    non-loopback one needs allow_remote."""
    detach: bool = False
    """Run in the background and return once the daemon answers health checks."""
    log_file: str | None = None
    """Where a detached daemon logs; None: in the runtime directory."""
    max_queued_requests: int = 1024
    """Most requests in flight (tokenizing, waiting or running); more get `overloaded`."""
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    """Largest message a client may send."""
    max_connections: int | None = None
    """Most client connections at once; more are shut down with a log line (None: half the
    file descriptors free at start, after the soft limit is raised to the hard one)."""
    reserved_cpus: int | None = None
    """On the CPU device, cores kept off the forward pass for the I/O, text, tokenizer and
    HTTP work, which then runs pinned to them while the forward pass's OpenMP team is
    pinned to the rest; 0: no pinning (None: 1 when the daemon may use 4 or more cores,
    else 0)."""
    admission: str = "queue"
    """`queue`: every request under max_queued_requests waits its turn; `slo`: one that could
    not start within slo_ttft_ms (its prefill behind the prefill work queued ahead, at the
    rate recent steps achieved) is refused at once with `overloaded` (HTTP 429)."""
    slo_ttft_ms: float | None = None
    """Time-to-first-token target for goodput (None: not enforced)."""
    slo_tpot_ms: float | None = None
    """Time-per-output-token target for goodput (None: not enforced)."""
    drain_timeout_s: float = 30.0
    """On SIGTERM or a graceful shutdown, how long in-flight requests may take to finish."""
    metrics_window_s: float = 60.0
    """Sliding window of the latency histograms and rates."""
    ready_timeout_s: float = 600.0
    """With --detach, how long the parent waits for the daemon to become healthy."""
    log_level: str = "info"
    """Least severe log messages written."""
    is_warmup_enabled: bool = True
    """Run the warm-up workload on the engine thread before reporting healthy (`--no-warmup`
    skips it): the first minute of serving is then as fast as the tenth."""
    is_http_enabled: bool = True
    """Also serve the OpenAI-compatible HTTP API (`--no-http` turns it off)."""
    http_host: str = "127.0.0.1"
    """HTTP listen host; a non-loopback one needs allow_remote."""
    http_port: int = 8000
    """HTTP listen port."""
    api_key: str | None = field(default=None, repr=False)
    """Bearer key the /v1 routes require (None: none). Never written to the detached
    child's command line: it travels in LLMD_API_KEY instead."""
    tool_call_parser: str = "auto"
    """How `tool_choice: auto` replies are read for tool calls: `hermes` (`<tool_call>` tags,
    Qwen2.5/Qwen3), `llama3` (a bare JSON object, Llama 3.x), or `auto`: chosen from the
    chat template (hermes when it names neither)."""
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    """EngineConfig keyword arguments."""

    def __post_init__(self) -> None:
        _positive("max_queued_requests", self.max_queued_requests, integer=True)
        _positive("max_message_bytes", self.max_message_bytes, integer=True)
        if self.max_connections is not None:
            _positive("max_connections", self.max_connections, integer=True)
        if self.reserved_cpus is not None:
            _positive("reserved_cpus", self.reserved_cpus, integer=True, allow_zero=True)
        for name in ("slo_ttft_ms", "slo_tpot_ms"):
            value = getattr(self, name)
            if value is not None:
                _positive(name, value)
        _positive("drain_timeout_s", self.drain_timeout_s, allow_zero=True)
        _positive("metrics_window_s", self.metrics_window_s)
        _positive("ready_timeout_s", self.ready_timeout_s)
        require(
            self.admission in ADMISSION_POLICIES,
            "admission",
            f"must be one of {ADMISSION_POLICIES}, got {self.admission!r}",
        )
        require(
            self.admission != "slo" or self.slo_ttft_ms is not None,
            "admission",
            "admission 'slo' needs a TTFT target (--slo-ttft-ms)",
        )
        require(self.log_level in LOG_LEVELS, "log_level", f"must be one of {LOG_LEVELS}")
        _positive("http_port", self.http_port, integer=True)
        require(self.http_port < 65536, "http_port", f"must be below 65536, got {self.http_port}")
        require(self.api_key != "", "api_key", "must not be empty")
        require(
            self.tool_call_parser in PARSER_OPTIONS,
            "tool_call_parser",
            f"must be one of {PARSER_OPTIONS}, got {self.tool_call_parser!r}",
        )

    def to_json(self) -> str:
        """JSON for the detached child's command line."""
        data = dataclasses.asdict(self)
        del data["api_key"]  # a command line is visible to every user (ps)
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> ServeOptions:
        """Inverse of to_json; unknown keys raise a typed error naming them."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise InvalidParameterError("must be a JSON object", "options")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidParameterError("unknown serve option", unknown[0])
        return cls(**data)


def _positive(name: str, value: object, integer: bool = False, allow_zero: bool = False) -> None:
    kinds = int if integer else (int, float)
    ok = False
    if isinstance(value, kinds) and not isinstance(value, bool):
        ok = value >= 0 if allow_zero else value > 0
    require(
        ok, name, f"must be a {'non-negative' if allow_zero else 'positive'} number, got {value!r}"
    )
