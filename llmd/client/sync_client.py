"""The blocking client: generate, stream, abort, stats, subscribe, health, shutdown.

One DEALER socket carries any number of requests; replies for requests other than the
one being waited on are kept in per-request inboxes. Not thread-safe: use one Client
per thread (they are cheap).
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

import zmq

from llmd.client.completion import Completion, StreamEvent
from llmd.client.errors import daemon_not_running
from llmd.client.in_flight import InFlight
from llmd.client.wire import (
    Liveness,
    build_generate,
    check_size,
    encode_request,
    is_duplicate_refusal,
    make_socket,
    new_id_prefix,
    raise_error,
    with_expiry,
)
from llmd.protocol import (
    AbortRequest,
    Accepted,
    Ack,
    DaemonMessage,
    ErrorReply,
    Finished,
    HealthReply,
    HealthRequest,
    ProtocolError,
    ShutdownRequest,
    StatsReply,
    StatsRequest,
    SubscribeRequest,
    UnsubscribeRequest,
    WireMessage,
    decode_daemon_message,
    default_address,
)
from llmd.sampling_params import SamplingParams

DEFAULT_TIMEOUT_S = 5.0


class Client:
    """Talks to one llmd daemon; use as a context manager or call close()."""

    def __init__(self, address: str | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.address = address or default_address()
        self.timeout = timeout
        """Seconds of silence after which the daemon is considered gone."""
        self._context = zmq.Context.instance()
        self._socket: zmq.Socket | None = None
        self._prefix = new_id_prefix()
        self._counter = itertools.count(1)
        self._inboxes: dict[str, deque[DaemonMessage | Exception]] = {}
        self._open_streams: set[str] = set()
        self._subscriptions: set[str] = set()
        self._liveness = Liveness(timeout)
        self._in_flight = InFlight()

    # ---------------------------------------------------------------- public API

    def generate(
        self,
        prompt: str | None = None,
        *,
        messages: Sequence[dict[str, str]] | None = None,
        prompt_token_ids: Sequence[int] | None = None,
        params: SamplingParams | dict[str, Any] | None = None,
        priority: int = 0,
        label: str | None = None,
    ) -> Completion:
        """Generate and return the whole completion (the text arrives in one message).

        `label` (letters, digits, `-_.:/+=@`) names the request in the daemon's log lines
        and in `llmd top`.
        """
        request = build_generate(
            self._new_id(), prompt, messages, prompt_token_ids, params, priority, False, label
        )
        accepted: Accepted | None = None
        for event in self._events(request):
            if isinstance(event, Accepted):
                accepted = event
            elif isinstance(event, Finished):
                return Completion.from_finished(accepted, event, event.text or "")
        raise ProtocolError("the daemon ended the request without a finished message")

    def stream(
        self,
        prompt: str | None = None,
        *,
        messages: Sequence[dict[str, str]] | None = None,
        prompt_token_ids: Sequence[int] | None = None,
        params: SamplingParams | dict[str, Any] | None = None,
        priority: int = 0,
        label: str | None = None,
    ) -> Iterator[StreamEvent]:
        """Yield Accepted, PrefillProgress, TokenDelta and finally Finished events.

        The request is sent on the first next(); closing the iterator early aborts it.
        """
        request = build_generate(
            self._new_id(), prompt, messages, prompt_token_ids, params, priority, True, label
        )
        return self._events(request)

    def abort(self, request_id: str) -> None:
        """Abort this client's request `request_id` (the `id` of its events)."""
        self._send(AbortRequest(request_id))

    def stats(
        self,
        *,
        include_requests: bool = True,
        include_block_map: bool = True,
        timeline_request_id: str | None = None,
        max_requests: int = 64,
    ) -> dict[str, Any]:
        """One metrics snapshot (keys documented in docs/protocol.md)."""
        request = StatsRequest(
            self._new_id(), include_requests, include_block_map, timeline_request_id, max_requests
        )
        reply = self._request(request)
        assert isinstance(reply, StatsReply)  # _request checked the type
        return reply.snapshot

    def subscribe(
        self,
        interval_ms: int = 1000,
        *,
        include_requests: bool = True,
        include_block_map: bool = True,
        timeline_request_id: str | None = None,
        max_requests: int = 64,
    ) -> Iterator[dict[str, Any]]:
        """Yield a snapshot every `interval_ms`; closing the iterator unsubscribes."""
        request = SubscribeRequest(
            self._new_id(),
            interval_ms,
            include_requests,
            include_block_map,
            timeline_request_id,
            max_requests,
        )
        return self._snapshots(request)

    def health(self) -> dict[str, Any]:
        """The daemon's health reply as a dict (status, is_healthy, pid, model, ...)."""
        reply = self._request(HealthRequest(self._new_id()))
        assert isinstance(reply, HealthReply)  # _request checked the type
        data = reply.to_wire()
        del data["type"], data["v"]
        return data

    def shutdown(
        self, now: bool = False, timeout: float | None = None, wait: bool = True
    ) -> str | None:
        """Ask the daemon to drain (or abort, with `now`) and exit; wait until it has.

        Returns the daemon's last acknowledgement ("stopped: drained N, aborted M") if read.
        """
        request = ShutdownRequest(self._new_id(), now, timeout)
        self._inboxes[request.id] = deque()
        try:
            self._send_request(request, is_tracked=False)
            self._next_for(request.id)  # "draining"
            if wait:
                stopped = self._next_for(request.id)  # "stopped: drained N, aborted M"
                return getattr(stopped, "message", None)
        except Exception as error:
            # A daemon that vanished without the last ack has stopped too.
            if not wait or getattr(error, "code", None) != "daemon_not_running":
                raise
        finally:
            self._inboxes.pop(request.id, None)
        return None

    def close(self) -> None:
        """Abort open streams, end subscriptions and close the socket."""
        if self._socket is None:
            return
        for request_id in list(self._open_streams):
            self._send_quietly(AbortRequest(request_id))
        for subscription_id in list(self._subscriptions):
            self._send_quietly(UnsubscribeRequest(subscription_id))
        self._socket.close()
        self._socket = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # ---------------------------------------------------------------- internals

    def _new_id(self) -> str:
        return f"{self._prefix}-{next(self._counter)}"

    def _connected(self) -> zmq.Socket:
        if self._socket is None:
            socket = make_socket(self._context, self.address)
            try:
                self._handshake(socket)
            except BaseException:
                socket.close(linger=0)
                raise
            self._socket = socket
        return self._socket

    def _handshake(self, socket: zmq.Socket) -> None:
        """Ask a new connection's daemon for its instance id and message limit."""
        hello = HealthRequest(f"{self._prefix}-hello")
        deadline = time.monotonic() + self.timeout
        if not socket.poll(int(self.timeout * 1000), zmq.POLLOUT):
            raise daemon_not_running(self.address, f"could not send for {self.timeout:g}s")
        socket.send(encode_request(hello), zmq.NOBLOCK)
        while (remaining_s := deadline - time.monotonic()) > 0:
            if not socket.poll(max(1, int(remaining_s * 1000)), zmq.POLLIN):
                break
            message = decode_daemon_message(socket.recv())
            self._in_flight.on_message(message)
            if isinstance(message, HealthReply) and message.id == hello.id:
                self._liveness.heard()
                return
        raise daemon_not_running(self.address, f"no reply for {self.timeout:g}s")

    def _send(self, message: WireMessage) -> None:
        payload = encode_request(message)  # a bad value fails here, connected or not
        socket = self._connected()
        check_size(payload, self._in_flight.max_message_bytes)
        if not socket.poll(int(self.timeout * 1000), zmq.POLLOUT):
            raise daemon_not_running(self.address, f"could not send for {self.timeout:g}s")
        try:
            socket.send(payload, zmq.NOBLOCK)
        except zmq.Again:
            raise daemon_not_running(self.address, "the connection was lost") from None

    def _send_request(
        self, message: WireMessage, is_tracked: bool = True, is_one_shot: bool = False
    ) -> None:
        """Send a request that expects replies: its silence clock starts now.

        A tracked request is one the daemon keeps a record of until its last reply, which
        health probes ask about.
        """
        self._send(message)
        if is_tracked:
            self._in_flight.sent(message.id, is_one_shot)  # type: ignore[attr-defined]
        self._liveness.heard()

    def _send_quietly(self, message: WireMessage) -> None:
        if self._socket is None:
            return  # closed: close() already sent the aborts and unsubscribes
        with contextlib.suppress(Exception):  # the daemon may already be gone
            self._send(message)

    def _request(self, message: WireMessage) -> DaemonMessage:
        """Send and return the single reply (raising an error reply as its exception)."""
        request_id = message.id  # type: ignore[attr-defined]
        self._inboxes[request_id] = deque()
        try:
            is_stats = isinstance(message, StatsRequest)
            self._send_request(message, is_tracked=is_stats, is_one_shot=True)
            reply = self._next_for(request_id)
        finally:
            self._inboxes.pop(request_id, None)
            self._in_flight.forget(request_id)
        if not isinstance(reply, (StatsReply, HealthReply, Ack)):
            raise ProtocolError(f"unexpected {type(reply).__name__} reply", "type")
        return reply

    def _events(self, request: Any) -> Iterator[StreamEvent]:
        self._inboxes[request.id] = deque()
        self._open_streams.add(request.id)
        is_done = False
        try:
            self._send_request(with_expiry(request, self.timeout))
            while True:
                event = self._next_for(request.id)
                if isinstance(event, Finished):
                    is_done = True
                    yield event
                    return
                yield event  # type: ignore[misc]
        except Exception:
            is_done = True  # an error reply (or a dead daemon) ended the request
            raise
        finally:
            self._open_streams.discard(request.id)
            self._inboxes.pop(request.id, None)
            self._in_flight.forget(request.id)
            if not is_done:
                self._send_quietly(AbortRequest(request.id))

    def _snapshots(self, request: SubscribeRequest) -> Iterator[dict[str, Any]]:
        self._inboxes[request.id] = deque()
        self._subscriptions.add(request.id)
        try:
            self._send_request(request)
            while True:
                reply = self._next_for(request.id)
                if isinstance(reply, StatsReply):
                    yield reply.snapshot
        finally:
            self._subscriptions.discard(request.id)
            self._inboxes.pop(request.id, None)
            self._in_flight.forget(request.id)
            self._send_quietly(UnsubscribeRequest(request.id))

    def _next_for(self, request_id: str) -> DaemonMessage:
        """The next message about `request_id`; error replies are raised."""
        inbox = self._inboxes.setdefault(request_id, deque())
        socket = self._connected()
        while not inbox:
            if socket.poll(int(self._liveness.wait_s() * 1000), zmq.POLLIN):
                self._read_available(socket)
                continue
            if self._liveness.is_dead():
                raise daemon_not_running(self.address, f"no reply for {self.timeout:g}s")
            if self._liveness.should_probe():
                probe = HealthRequest(f"{self._prefix}-probe", self._in_flight.request_ids())
                self._send(probe)
                self._liveness.probe_sent()
        message = inbox.popleft()
        if isinstance(message, Exception):
            raise message
        if isinstance(message, ErrorReply):
            raise_error(message)
        return message

    def _read_available(self, socket: zmq.Socket) -> None:
        while True:
            try:
                payload = socket.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._liveness.heard()
            message = decode_daemon_message(payload, len(payload))
            for request_id, error in self._in_flight.on_message(message):
                lost_inbox = self._inboxes.get(request_id)
                if lost_inbox is not None:
                    lost_inbox.append(error)
            message_id = getattr(message, "id", None)
            inbox = self._inboxes.get(message_id) if message_id is not None else None
            if inbox is not None and not is_duplicate_refusal(message):
                inbox.append(message)
