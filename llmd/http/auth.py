"""Bearer-token authentication of the /v1 routes and /flush_cache, as an ASGI middleware.

Health, version and metrics stay open (as in vLLM) so probes and scrapers need no key;
the key is compared in constant time.
"""

from __future__ import annotations

import hmac

from starlette.types import ASGIApp, Receive, Scope, Send

from llmd.http.errors import HttpError

PROTECTED_PREFIXES = ("/v1", "/flush_cache")
"""The API, and the one worker-contract route that changes the engine's state."""


class BearerAuth:
    """Answers 401 to a /v1 or /flush_cache request without `Authorization: Bearer <api_key>`."""

    def __init__(self, app: ASGIApp, api_key: str | None) -> None:
        self.app = app
        self.expected = None if api_key is None else f"Bearer {api_key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            self.expected is not None
            and scope["type"] == "http"
            and scope["path"].startswith(PROTECTED_PREFIXES)
        ):
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                error = HttpError(
                    401,
                    "missing or wrong API key: send 'Authorization: Bearer <key>'",
                    None,
                    "authentication_error",
                    "invalid_api_key",
                    {"WWW-Authenticate": "Bearer"},
                )
                await error.response()(scope, receive, send)
                return
        await self.app(scope, receive, send)
