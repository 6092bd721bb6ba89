"""Messages the chat's workers post to the app; handlers on the app own every state change.

Each reply event carries the number of the reply it belongs to, so events from a reply
that was already stopped are recognised and dropped. The messages are dataclasses (as
Textual's own are): Message's `__post_init__` runs from the generated `__init__`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.message import Message

from llmd.client.context_fit import MaxTokensCut
from llmd.protocol import Finished, StatsSnapshot


@dataclass
class ReplyEvent(Message):
    """Something happened to reply number `reply_number`."""

    reply_number: int


@dataclass
class ReplyAccepted(ReplyEvent):
    """The daemon queued the request."""

    client_id: str
    request_id: str
    num_prompt_tokens: int


@dataclass
class ReplyPrefill(ReplyEvent):
    """A long prompt is being computed in chunks."""

    num_computed_tokens: int
    num_prompt_tokens: int


@dataclass
class ReplyDelta(ReplyEvent):
    """New text of the reply."""

    text: str


@dataclass
class ReplyFinished(ReplyEvent):
    """The daemon's last message about the reply (finish reason, usage, timings)."""

    finished: Finished


@dataclass
class ReplyCut(ReplyEvent):
    """The daemon refused max_tokens for the context; the reply was sent again for less."""

    cut: MaxTokensCut


@dataclass
class ReplyFailed(ReplyEvent):
    """The request failed or the daemon went away; `error` is a typed llmd error."""

    error: Exception


@dataclass
class DaemonInfo(Message):
    """The daemon's health reply (model, address, ...), or the error that kept it away."""

    health: dict[str, Any] | None
    error: Exception | None = None


@dataclass
class StatsFetched(Message):
    """A stats snapshot asked for by /stats, or the error that prevented it."""

    snapshot: StatsSnapshot | None
    error: Exception | None = None
