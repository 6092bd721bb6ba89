"""Errors that exist only on the wire, and the map from an error code back to its class.

A client turns each `error` reply into the same exception class the daemon raised, so
callers can catch `OverloadedError` or `InvalidParameterError` whichever side failed.
"""

from __future__ import annotations

from llmd import errors
from llmd.errors import LLMDError


class ProtocolError(LLMDError):
    """A message could not be decoded: not msgpack, not a map, unknown type or version."""

    code = "protocol_error"


class DuplicateRequestIdError(LLMDError):
    """A generate reused the id of this connection's request still in flight; only it is refused.

    A code of its own, so that a peer never mistakes the refusal of the new message for
    the end of the live request that has the same id.
    """

    code = "duplicate_request_id"


class RequestExpiredError(LLMDError):
    """A generate arrived after its `expires_at`: its client had given up, so it never ran."""

    code = "request_expired"


class RequestFailedError(LLMDError):
    """The engine failed while computing this request (other requests were not affected)."""

    code = "request_failed"


def _error_classes() -> dict[str, type[LLMDError]]:
    classes: dict[str, type[LLMDError]] = {"internal": LLMDError}
    candidates = [getattr(errors, name) for name in dir(errors)]
    candidates += [ProtocolError, RequestFailedError, DuplicateRequestIdError, RequestExpiredError]
    for candidate in candidates:
        if isinstance(candidate, type) and issubclass(candidate, LLMDError):
            classes.setdefault(candidate.code, candidate)
    return classes


ERROR_CLASSES: dict[str, type[LLMDError]] = _error_classes()
"""Error code -> exception class, for every typed error llmd can send."""


def register_error_class(error_class: type[LLMDError]) -> None:
    """Make `error_class` the class clients raise for its code (client-only errors use this)."""
    ERROR_CLASSES.setdefault(error_class.code, error_class)


def error_from_code(code: str, message: str, parameter: str | None = None) -> LLMDError:
    """Rebuild the exception a daemon reported; unknown codes keep their code on a base error."""
    error_class = ERROR_CLASSES.get(code)
    if error_class is None:
        error = LLMDError(message, parameter)
        error.code = code
        return error
    return error_class(message, parameter)
