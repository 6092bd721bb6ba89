"""HTTP errors in OpenAI's JSON shape, and the status each llmd error code maps to.

Clients written for OpenAI branch on the status and read `error.message`/`error.param`,
so every failure, ours or the daemon's, leaves as the same body with the right status.
"""

from __future__ import annotations

from starlette.responses import JSONResponse

from llmd.errors import LLMDError

RETRY_AFTER_S = 1
"""What Retry-After tells an overloaded or draining client to wait."""

# llmd error code -> (HTTP status, OpenAI error type, OpenAI error code)
_CODE_STATUS: dict[str, tuple[int, str, str | None]] = {
    "invalid_parameter": (400, "invalid_request_error", None),
    "request_too_large": (400, "invalid_request_error", "context_length_exceeded"),
    "overloaded": (429, "rate_limit_error", "overloaded"),
    "shutting_down": (503, "service_unavailable", "shutting_down"),
    "daemon_not_running": (503, "service_unavailable", "daemon_not_running"),
    "engine_dead": (500, "internal_server_error", "engine_dead"),
    "cache_busy": (409, "conflict_error", "cache_busy"),
}


class HttpError(Exception):
    """An error answered with `status` and an OpenAI error body."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        error_type: str = "invalid_request_error",
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.error_type = error_type
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, object]:
        """OpenAI's error object: {"error": {message, type, param, code}}."""
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self) -> JSONResponse:
        """The JSON response carrying this error."""
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def from_llmd_error(error: LLMDError) -> HttpError:
    """The HTTP error for a typed llmd error (unknown codes are a 500 keeping their code)."""
    status, error_type, code = _CODE_STATUS.get(
        error.code, (500, "internal_server_error", error.code)
    )
    headers = {"Retry-After": str(RETRY_AFTER_S)} if status in (429, 503) else None
    return HttpError(status, error.message, error.parameter, error_type, code, headers)


def bad_request(message: str, param: str | None) -> HttpError:
    """A 400 naming the field that was wrong."""
    return HttpError(400, message, param)


def not_found(message: str, param: str | None = None, code: str = "not_found") -> HttpError:
    """A 404 (unknown model or route)."""
    return HttpError(404, message, param, "not_found_error", code)
