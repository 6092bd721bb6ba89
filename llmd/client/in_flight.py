"""What a client knows of the daemon serving it and of its own requests in flight.

The client core feeds every daemon message through one `InFlight`: it learns the daemon's
instance id and message limit, records which instance holds each request, and says which
requests are lost when a health reply shows a restarted daemon or one that has no record
of them, so a waiting caller fails at once instead of waiting on a request nobody runs.
"""

from __future__ import annotations

from llmd.client.errors import DaemonRestartedError, RequestLostError
from llmd.errors import LLMDError
from llmd.protocol import (
    DEFAULT_MAX_MESSAGE_BYTES,
    Accepted,
    ErrorReply,
    Finished,
    HealthReply,
    Keepalive,
    StatsReply,
)

_UNKNOWN = ""
"""Instance of a request sent before the client heard from any daemon."""


class InFlight:
    """The client's requests that still expect replies, and the daemon instance of each."""

    def __init__(self) -> None:
        self.instance_id: str | None = None
        """The daemon instance this client last heard from."""
        self.max_message_bytes = DEFAULT_MAX_MESSAGE_BYTES
        """The daemon's message limit, once a health reply told it."""
        self._instances: dict[str, str] = {}
        """Request id -> the instance that accepted it (or the one known when it was sent)."""
        self._ends_on_reply: set[str] = set()
        """One-shot requests (stats) that the first reply ends."""

    def sent(self, request_id: str, is_one_shot: bool = False) -> None:
        """A request left the client (call only after the socket took it)."""
        self._instances[request_id] = self.instance_id or _UNKNOWN
        if is_one_shot:
            self._ends_on_reply.add(request_id)

    def forget(self, request_id: str) -> None:
        """The caller stopped waiting (stream closed, unsubscribed)."""
        self._instances.pop(request_id, None)
        self._ends_on_reply.discard(request_id)

    def request_ids(self) -> list[str]:
        """Ids to ask about in a health probe."""
        return list(self._instances)

    def on_message(self, message: object) -> list[tuple[str, LLMDError]]:
        """Learn from one daemon message; return (request id, error) for each lost request."""
        if isinstance(message, (Finished, ErrorReply, StatsReply)):
            if message.id is not None and not (
                isinstance(message, StatsReply) and message.id not in self._ends_on_reply
            ):
                self.forget(message.id)  # its last message (a subscription goes on)
        elif isinstance(message, Accepted) and message.instance_id is not None:
            if message.id in self._instances:
                self._instances[message.id] = message.instance_id
            self.instance_id = message.instance_id
        elif isinstance(message, Keepalive):
            self.instance_id = message.instance_id
        elif isinstance(message, HealthReply):
            return self._on_health(message)
        return []

    def _on_health(self, reply: HealthReply) -> list[tuple[str, LLMDError]]:
        if reply.max_message_bytes is not None:
            self.max_message_bytes = reply.max_message_bytes
        instance = reply.instance_id
        if instance is None:
            return []
        self.instance_id = instance
        unknown = set(reply.unknown_request_ids)
        lost = []
        for request_id, held_by in list(self._instances.items()):
            if held_by not in (_UNKNOWN, instance):
                error: LLMDError = DaemonRestartedError(
                    f"the daemon restarted (instance {held_by} is gone, {instance} now "
                    f"serves); request {request_id!r} was lost with it",
                    None,
                )
            elif request_id in unknown:
                error = RequestLostError(
                    f"the daemon (instance {instance}) has no record of request "
                    f"{request_id!r}: the connection was reset or the daemon restarted",
                    None,
                )
            else:
                continue
            self.forget(request_id)
            lost.append((request_id, error))
        return lost
