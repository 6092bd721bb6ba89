"""Typed errors shared by the engine, the daemon and the clients.

Every error carries a stable machine-readable `code` (sent over the wire) and, where it
concerns one input, the `parameter` it names, so a client can say exactly what was wrong.
"""

from __future__ import annotations


class LLMDError(Exception):
    """Base class of llmd's errors; `code` is stable across versions for clients to match."""

    code = "internal"

    def __init__(self, message: str, parameter: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.parameter = parameter

    def __str__(self) -> str:
        if self.parameter:
            return f"{self.parameter}: {self.message}"
        return self.message


class InvalidParameterError(LLMDError, ValueError):
    """A configuration or request value is out of range or of the wrong type."""

    code = "invalid_parameter"


class RequestRejectedError(LLMDError):
    """A request can never be served with this engine (too long for the model or the KV pool).

    A refusal for `max_model_len` also carries its numbers, so a client can ask again for
    what fits without reading the message: `max_fitting_tokens` is the largest max_tokens
    that fits after the prompt (0 when the prompt alone fills the context). Each is None
    when the refusal is about something else (the KV pool, an untokenized prompt text).
    """

    code = "request_too_large"

    def __init__(
        self,
        message: str,
        parameter: str | None = None,
        *,
        num_prompt_tokens: int | None = None,
        max_model_len: int | None = None,
        max_fitting_tokens: int | None = None,
    ) -> None:
        super().__init__(message, parameter)
        self.num_prompt_tokens = num_prompt_tokens
        self.max_model_len = max_model_len
        self.max_fitting_tokens = max_fitting_tokens


class UnsupportedModelError(LLMDError):
    """The checkpoint's architecture or features are not implemented by llmd."""

    code = "unsupported_model"


class UnsupportedQuantizationError(UnsupportedModelError):
    """A checkpoint's quantization (method, format, scheme) or one of its quantized tensors
    is not one llmd reads; the message names the method, the field or the tensor."""

    code = "unsupported_quantization"


class ModelNotFoundError(LLMDError):
    """The model path or hub id cannot be resolved (absent locally and not downloadable)."""

    code = "model_not_found"


class OverloadedError(LLMDError):
    """The daemon's request queue is full; the client should retry later."""

    code = "overloaded"


class EngineDeadError(LLMDError):
    """The engine loop has died; in-flight requests cannot complete."""

    code = "engine_dead"


class ShuttingDownError(LLMDError):
    """The daemon is draining and accepts no new requests."""

    code = "shutting_down"


class CacheBusyError(LLMDError):
    """The prefix cache cannot be flushed now: requests still run or wait and hold blocks."""

    code = "cache_busy"


class KVCacheIntegrityError(LLMDError, RuntimeError):
    """The KV block pool's bookkeeping disagrees with itself (a bug, never bad input).

    Raised by the block manager's checks so the engine can tell a corrupted pool from a
    failing model step, report it and rebuild the pool; it stays inside the engine.
    """

    code = "kv_cache_integrity"


class SchedulerStallError(LLMDError):
    """The scheduler could run nothing although requests wait and none runs (a bug, not load).

    `request_id` names the request at the head of the queue that could not be admitted; the
    engine fails that request with this error (clients see `request_failed`) instead of
    stepping empty plans forever.
    """

    code = "scheduler_stall"

    def __init__(self, message: str, parameter: str | None = None, *, request_id: str = "") -> None:
        super().__init__(message, parameter)
        self.request_id = request_id


def require(condition: bool, parameter: str, message: str) -> None:
    """Raise InvalidParameterError naming `parameter` when `condition` is false."""
    if not condition:
        raise InvalidParameterError(message, parameter)


CODE_WORDS = {
    "overloaded": "the daemon is overloaded",
    "shutting_down": "the daemon is shutting down",
    "engine_dead": "the engine has died",
}
"""What an error code means, said in words, for codes whose messages do not say it."""
INTERNAL_PARAMETERS = ("command", "setting")
"""Parameters that name no field the user typed; user-facing messages leave them out."""
SELF_NAMING_CODES = ("daemon_not_running",)
"""Codes whose messages always name their subject (the address): no `parameter:` prefix."""


def user_message(error: BaseException) -> str:
    """An error as a user should read it: no internal code, no internal parameter name."""
    message = getattr(error, "message", None)
    if message is None:
        return str(error).strip() or type(error).__name__
    parameter = getattr(error, "parameter", None)
    if getattr(error, "code", "") in SELF_NAMING_CODES:
        parameter = None
    if parameter and parameter not in INTERNAL_PARAMETERS and parameter not in message:
        message = f"{parameter}: {message}"
    words = CODE_WORDS.get(getattr(error, "code", ""))
    if words and words.split()[-1] not in message:
        message = f"{words}: {message}"
    return message
