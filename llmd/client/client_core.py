"""The sans-IO protocol core of both clients: ids, inboxes, routing, liveness, in-flight.

`Client` and `AsyncClient` only move bytes and wait; everything a daemon message means
(whose it is, which requests it proves lost, when silence calls for a probe or means the
daemon is gone) is decided here once, so the two clients cannot drift apart and the logic
is tested without a socket.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Mapping, Sequence

from llmd.client.errors import daemon_not_running
from llmd.client.in_flight import InFlight
from llmd.client.wire import (
    Liveness,
    check_size,
    is_duplicate_refusal,
    new_id_prefix,
)
from llmd.errors import InvalidParameterError
from llmd.protocol import (
    AbortRequest,
    Ack,
    CacheFlushed,
    DaemonMessage,
    DetokenizeReply,
    ErrorReply,
    GenerateRequest,
    HealthReply,
    HealthRequest,
    ProtocolError,
    StatsReply,
    StatsRequest,
    SubscribeRequest,
    TokenizeReply,
    UnsubscribeRequest,
    WireMessage,
    decode_daemon_message,
)
from llmd.sampling_params import SamplingParams

Inbox = deque[DaemonMessage | Exception]
"""What arrived for one request and was not read yet (an exception ends the request)."""


class ClientCore:
    """One client's protocol state: its requests, what arrived for each, and the daemon's."""

    def __init__(self, address: str, timeout: float) -> None:
        self.address = address
        self.liveness = Liveness(timeout)
        """The silence clock; its `timeout` is the client's."""
        self.in_flight = InFlight()
        self.open_stream_ids: set[str] = set()
        """Streams a caller still reads: closing the client aborts them."""
        self.subscription_ids: set[str] = set()
        """Subscriptions a caller still reads: closing the client ends them."""
        self._prefix = new_id_prefix()
        self._counter = itertools.count(1)
        self._inboxes: dict[str, Inbox] = {}

    # ---------------------------------------------------------------- requests

    def new_id(self) -> str:
        """A request id no other request of this client (or of another client) uses."""
        return f"{self._prefix}-{next(self._counter)}"

    def generate_request(
        self,
        prompt: str | None,
        stream: bool,
        *,
        messages: Sequence[Mapping[str, object]] | None = None,
        tools: Sequence[Mapping[str, object]] | None = None,
        prompt_token_ids: Sequence[int] | None = None,
        params: SamplingParams | dict[str, object] | None = None,
        priority: int = 0,
        label: str | None = None,
        echo: bool = False,
    ) -> GenerateRequest:
        """A validated generate under a new id (raises typed errors before anything is sent).

        The keywords, and their defaults, are those of the clients' generate and stream.
        """
        if isinstance(params, SamplingParams):
            params_dict = params.to_dict()
        elif params is None:
            params_dict = {}
        elif isinstance(params, dict):
            params_dict = dict(params)
        else:
            raise InvalidParameterError("must be SamplingParams, a dict or None", "params")
        return GenerateRequest(
            id=self.new_id(),
            prompt=prompt,
            prompt_token_ids=None if prompt_token_ids is None else list(prompt_token_ids),
            messages=None if messages is None else [dict(m) for m in messages],
            tools=None if tools is None else [dict(t) for t in tools],
            sampling_params=params_dict,
            stream=stream,
            priority=priority,
            label=label,
            echo=echo,
        )

    def hello(self) -> HealthRequest:
        """The handshake of a new connection: it learns the daemon's instance and limit."""
        return HealthRequest(f"{self._prefix}-hello")

    def check_size(self, payload: bytes) -> None:
        """Refuse locally a payload larger than the daemon said it accepts."""
        check_size(payload, self.in_flight.max_message_bytes)

    def sent(self, message: WireMessage) -> None:
        """A request that expects replies left the client: its silence clock starts now.

        Generates, subscriptions and stats are the requests the daemon keeps a record of
        until their last reply, so health probes ask about them.
        """
        if isinstance(message, (GenerateRequest, SubscribeRequest, StatsRequest)):
            self.in_flight.sent(message.id, is_one_shot=isinstance(message, StatsRequest))
        self.liveness.heard()

    def farewells(self) -> list[WireMessage]:
        """What closing the client sends: an abort per open stream, an unsubscribe per
        subscription."""
        aborts: list[WireMessage] = [AbortRequest(i) for i in self.open_stream_ids]
        return aborts + [UnsubscribeRequest(i) for i in self.subscription_ids]

    # ---------------------------------------------------------------- inboxes

    def open(self, request_id: str, is_stream: bool = False, is_subscription: bool = False) -> None:
        """Start keeping what arrives for `request_id` (call before sending it)."""
        self._inboxes[request_id] = deque()
        if is_stream:
            self.open_stream_ids.add(request_id)
        if is_subscription:
            self.subscription_ids.add(request_id)

    def close(self, request_id: str) -> None:
        """The caller stopped waiting on `request_id`: later messages for it are dropped."""
        self._inboxes.pop(request_id, None)
        self.open_stream_ids.discard(request_id)
        self.subscription_ids.discard(request_id)
        self.in_flight.forget(request_id)

    def take(self, request_id: str) -> DaemonMessage | None:
        """The next message for `request_id`, None if none is waiting; errors are raised."""
        inbox = self._inboxes.get(request_id)
        if not inbox:
            return None
        message = inbox.popleft()
        if isinstance(message, Exception):
            raise message
        if isinstance(message, ErrorReply):
            raise message.to_error()
        return message

    # ---------------------------------------------------------------- arrivals

    def receive(self, payload: bytes) -> list[str]:
        """Decode and route one payload from the daemon; returns the request ids it reached."""
        self.liveness.heard()
        return self.route(decode_daemon_message(payload, len(payload)))

    def receive_frames(self, frames: list[bytes]) -> list[str]:
        """Route every frame of one daemon message in order (the daemon sends a burst of
        replies as one message); returns the request ids reached, each once."""
        reached: dict[str, None] = {}
        for payload in frames:
            reached.update(dict.fromkeys(self.receive(payload)))
        return list(reached)

    def route(self, message: DaemonMessage) -> list[str]:
        """Learn from one message, then put it (and any requests it proves lost) in inboxes.

        A duplicate-id refusal answers a message this client never sent as a new request
        (it never reuses an id), so it neither ends the stream that owns the id nor stops
        the probes asking after it.
        """
        if is_duplicate_refusal(message):
            return []
        reached = [
            request_id
            for request_id, error in self.in_flight.on_message(message)
            if self._deliver(request_id, error)
        ]
        message_id = getattr(message, "id", None)
        if message_id is not None and self._deliver(message_id, message):
            reached.append(message_id)
        return reached

    def fail_all(self, error: Exception) -> list[str]:
        """The connection broke: every waiting request gets `error`; returns their ids."""
        for inbox in self._inboxes.values():
            inbox.append(error)
        return list(self._inboxes)

    def check_silence(self) -> HealthRequest | None:
        """After a wait that heard nothing: raise once the daemon is gone, else the health
        probe to send when one is due (it lists the requests still waited on)."""
        if self.liveness.is_dead():
            raise daemon_not_running(self.address, f"no reply for {self.liveness.timeout:g}s")
        if not self.liveness.should_probe():
            return None
        self.liveness.probe_sent()
        return HealthRequest(f"{self._prefix}-probe", self.in_flight.request_ids())

    def _deliver(self, request_id: str, item: DaemonMessage | Exception) -> bool:
        inbox = self._inboxes.get(request_id)
        if inbox is None:
            return False
        inbox.append(item)
        return True


def one_shot_reply(reply: DaemonMessage) -> DaemonMessage:
    """The reply to stats, health, shutdown, tokenize, detokenize or flush_cache, checked to be
    of a type that can answer one."""
    one_shot = (StatsReply, HealthReply, Ack, TokenizeReply, DetokenizeReply, CacheFlushed)
    if not isinstance(reply, one_shot):
        raise ProtocolError(f"unexpected {type(reply).__name__} reply", "type")
    return reply


def health_dict(reply: DaemonMessage) -> dict[str, object]:
    """A health reply as the dict `health()` returns (status, is_healthy, pid, model, ...)."""
    if not isinstance(reply, HealthReply):
        raise ProtocolError(f"unexpected {type(reply).__name__} reply to health", "type")
    data = reply.to_wire()
    del data["type"], data["v"]
    return data
