"""Messages the chat's workers post to the app; handlers on the app own every state change.

Each reply event carries the number of the reply it belongs to, so events from a reply
that was already stopped are recognised and dropped.
"""

from __future__ import annotations

from typing import Any

from textual.message import Message

from llmd.client.context_fit import MaxTokensCut
from llmd.protocol import Finished, StatsSnapshot


class ReplyEvent(Message):
    """Something happened to reply number `reply_number`."""

    def __init__(self, reply_number: int) -> None:
        super().__init__()
        self.reply_number = reply_number


class ReplyAccepted(ReplyEvent):
    """The daemon queued the request."""

    def __init__(
        self, reply_number: int, client_id: str, request_id: str, num_prompt_tokens: int
    ) -> None:
        super().__init__(reply_number)
        self.client_id = client_id
        self.request_id = request_id
        self.num_prompt_tokens = num_prompt_tokens


class ReplyPrefill(ReplyEvent):
    """A long prompt is being computed in chunks."""

    def __init__(self, reply_number: int, num_computed_tokens: int, num_prompt_tokens: int) -> None:
        super().__init__(reply_number)
        self.num_computed_tokens = num_computed_tokens
        self.num_prompt_tokens = num_prompt_tokens


class ReplyDelta(ReplyEvent):
    """New text of the reply."""

    def __init__(self, reply_number: int, text: str) -> None:
        super().__init__(reply_number)
        self.text = text


class ReplyFinished(ReplyEvent):
    """The daemon's last message about the reply (finish reason, usage, timings)."""

    def __init__(self, reply_number: int, finished: Finished) -> None:
        super().__init__(reply_number)
        self.finished = finished


class ReplyCut(ReplyEvent):
    """The daemon refused max_tokens for the context; the reply was sent again for less."""

    def __init__(self, reply_number: int, cut: MaxTokensCut) -> None:
        super().__init__(reply_number)
        self.cut = cut


class ReplyFailed(ReplyEvent):
    """The request failed or the daemon went away; `error` is a typed llmd error."""

    def __init__(self, reply_number: int, error: Exception) -> None:
        super().__init__(reply_number)
        self.error = error


class DaemonInfo(Message):
    """The daemon's health reply (model, address, ...), or the error that kept it away."""

    def __init__(self, health: dict[str, Any] | None, error: Exception | None = None) -> None:
        super().__init__()
        self.health = health
        self.error = error


class StatsFetched(Message):
    """A stats snapshot asked for by /stats, or the error that prevented it."""

    def __init__(self, snapshot: StatsSnapshot | None, error: Exception | None = None) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.error = error
