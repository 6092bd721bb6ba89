"""The X-Request-Id header: checked, echoed on every response, generated when absent.

A router's other id headers (X-Correlation-Id, ...) are read when X-Request-Id is absent.

The id becomes the daemon request's `label`, so one name follows a request from the
client's logs through the daemon's log lines to `llmd top`; a malformed one is a 400
naming the header, before any work.
"""

from __future__ import annotations

import uuid

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from llmd.errors import InvalidParameterError
from llmd.http.errors import from_llmd_error
from llmd.protocol.request_label import check_label

HEADER = "X-Request-Id"
FALLBACK_HEADERS = ("X-Correlation-Id", "X-Trace-Id", "Request-Id")
"""Read, in this order, when X-Request-Id is absent: the other names routers such as
vllm-router and SMG take a request's id from (`--request-id-headers`) and pass on."""
STATE_KEY = "request_label"
"""Where the route finds the id: `request.state.request_label`."""


def new_request_id() -> str:
    """An id for a request that came without one."""
    return uuid.uuid4().hex


class RequestIdMiddleware:
    """Puts the request's id in its state and its X-Request-Id on the response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header, given = _given_ids(scope["headers"])
        try:
            request_id = _checked(given, header)
        except InvalidParameterError as error:
            await from_llmd_error(error).response()(scope, receive, send)
            return
        scope.setdefault("state", {})[STATE_KEY] = request_id

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[HEADER] = request_id
            await send(message)

        await self.app(scope, receive, send_with_id)


def _given_ids(headers: list[tuple[bytes, bytes]]) -> tuple[str, list[bytes]]:
    """The first id header present (X-Request-Id, then the fallbacks) and its values."""
    for header in (HEADER, *FALLBACK_HEADERS):
        values = [value for name, value in headers if name == header.lower().encode()]
        if values:
            return header, values
    return HEADER, []


def _checked(values: list[bytes], header: str = HEADER) -> str:
    """The one valid id among the header's values, or a new one when there is none."""
    if not values:
        return new_request_id()
    if len(values) > 1:
        raise InvalidParameterError("must be given once", header)
    try:
        text = values[0].decode("ascii")
    except UnicodeDecodeError:
        raise InvalidParameterError("must be ASCII", header) from None
    check_label(text, header)
    return text
