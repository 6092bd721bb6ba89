"""Why the I/O thread refuses a generate before any thread sees it, as a typed error.

Checked in order: expired on arrival (its client gave up), the daemon's state (draining
or dead), a request id already live on the connection, and the in-flight cap; each check
is O(1), so a flood of refusals costs the I/O thread almost nothing.
"""

from __future__ import annotations

import logging
import time

from llmd.daemon.engine_loop import label_text
from llmd.daemon.routes import RouteTable
from llmd.daemon.serving_state import ServingState
from llmd.errors import LLMDError, OverloadedError
from llmd.protocol import DuplicateRequestIdError, GenerateRequest, RequestExpiredError

logger = logging.getLogger("llmd.daemon.server")


def generate_refusal(
    peer: bytes,
    message: GenerateRequest,
    serving: ServingState,
    routes: RouteTable,
    max_queued_requests: int,
) -> LLMDError | None:
    """The refusal of `peer`'s generate `message`, or None when the daemon takes it."""
    if message.expires_at is not None and time.time() > message.expires_at:
        late_s = time.time() - message.expires_at
        logger.info(
            "dropping request %r%s of peer %s: it expired %.1fs before it arrived "
            "(its client gave up waiting)",
            message.id,
            label_text(message.label),
            peer.hex(),
            late_s,
        )
        return RequestExpiredError(
            f"the request arrived {late_s:.1f}s after its expires_at and was not run "
            "(the client gave up, or its clock is ahead of the daemon's)",
            "expires_at",
        )
    refusal = serving.refusal()
    if refusal is not None:
        return refusal
    if routes.engine_id(peer, message.id) is not None:
        return DuplicateRequestIdError(
            f"request {message.id!r} is already in flight on this connection; this new "
            "generate is refused and the live request goes on",
            "id",
        )
    if len(routes) >= max_queued_requests:
        return OverloadedError(
            f"{len(routes)} requests are in flight (the limit is "
            f"{max_queued_requests}); retry later"
        )
    return None
