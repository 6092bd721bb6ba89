"""The blocking client: generate, stream, abort, stats, subscribe, health, shutdown.

One DEALER socket carries any number of requests; replies for requests other than the
one being waited on are kept in per-request inboxes. This shell only sends, polls and
receives: the protocol logic is the shared `ClientCore`. Not thread-safe: use one Client
per thread (they are cheap).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING

import zmq

from llmd.client.client_core import health_dict, one_shot_reply
from llmd.client.client_shell import DEFAULT_TIMEOUT_S, ClientShell
from llmd.client.completion import Completion, StreamEvent
from llmd.client.errors import daemon_not_running
from llmd.client.wire import encode_request, make_socket, with_expiry
from llmd.protocol import (
    AbortRequest,
    Accepted,
    DaemonMessage,
    DetokenizeReply,
    DetokenizeRequest,
    Finished,
    GenerateRequest,
    HealthRequest,
    ProtocolError,
    ShutdownRequest,
    StatsReply,
    StatsRequest,
    StatsSnapshot,
    SubscribeRequest,
    TokenizeReply,
    TokenizeRequest,
    UnsubscribeRequest,
    WireMessage,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is Python 3.11+

    from llmd.client.request_options import GenerateOptions, SnapshotOptions


class Client(ClientShell[Generator[StreamEvent, None, None], Iterator[StatsSnapshot]]):
    """Talks to one llmd daemon; use as a context manager or call close()."""

    def __init__(self, address: str | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        super().__init__(address, timeout)
        self._context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        self._socket: zmq.Socket[bytes] | None = None

    # ---------------------------------------------------------------- public API

    def generate(self, prompt: str | None = None, **options: Unpack[GenerateOptions]) -> Completion:
        """Generate and return the whole completion (the text arrives in one message).

        `options` are those of `GenerateOptions`: messages or prompt_token_ids instead of
        `prompt`, params, priority and label.
        """
        request = self._core.generate_request(prompt, False, **options)
        accepted: Accepted | None = None
        for event in self._events(request):
            if isinstance(event, Accepted):
                accepted = event
            elif isinstance(event, Finished):
                return Completion.from_finished(accepted, event, event.text or "")
        raise ProtocolError("the daemon ended the request without a finished message")

    def abort(self, request_id: str) -> None:
        """Abort this client's request `request_id` (the `id` of its events)."""
        self._send(AbortRequest(request_id))

    def stats(self, **options: Unpack[SnapshotOptions]) -> StatsSnapshot:
        """One metrics snapshot (keys documented in docs/protocol.md)."""
        reply = self._request(StatsRequest(self._core.new_id(), **options))
        assert isinstance(reply, StatsReply)  # the daemon answers stats with stats
        return reply.snapshot

    def tokenize(
        self,
        prompt: str | None = None,
        messages: list[dict[str, object]] | None = None,
        add_special_tokens: bool = True,
    ) -> TokenizeReply:
        """Token ids of `prompt` (or of chat `messages` through the template), and the
        model's context length, from the daemon's tokenizer."""
        message = TokenizeRequest(self._core.new_id(), prompt, messages, add_special_tokens)
        reply = self._request(message)
        assert isinstance(reply, TokenizeReply)  # the daemon answers tokenize with tokenized
        return reply

    def detokenize(self, token_ids: list[int]) -> str:
        """The text of `token_ids` (special tokens included), from the daemon's tokenizer."""
        reply = self._request(DetokenizeRequest(self._core.new_id(), list(token_ids)))
        assert isinstance(reply, DetokenizeReply)  # the daemon answers detokenize so
        return reply.text

    def health(self) -> dict[str, object]:
        """The daemon's health reply as a dict (status, is_healthy, pid, model, ...)."""
        return health_dict(self._request(HealthRequest(self._core.new_id())))

    def shutdown(
        self, now: bool = False, timeout: float | None = None, wait: bool = True
    ) -> str | None:
        """Ask the daemon to drain (or abort, with `now`) and exit; wait until it has.

        Returns the daemon's last acknowledgement ("stopped: drained N, aborted M") if read.
        """
        request = ShutdownRequest(self._core.new_id(), now, timeout)
        self._core.open(request.id)
        try:
            self._send_request(request)
            self._next_for(request.id)  # "draining"
            if wait:
                stopped = self._next_for(request.id)  # "stopped: drained N, aborted M"
                return getattr(stopped, "message", None)
        except Exception as error:
            # A daemon that vanished without the last ack has stopped too.
            if not wait or getattr(error, "code", None) != "daemon_not_running":
                raise
        finally:
            self._core.close(request.id)
        return None

    def close(self) -> None:
        """Abort open streams, end subscriptions and close the socket."""
        if self._socket is None:
            return
        for message in self._core.farewells():
            self._send_quietly(message)
        self._socket.close()
        self._socket = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---------------------------------------------------------------- internals

    def _connected(self) -> zmq.Socket[bytes]:
        if self._socket is None:
            socket = make_socket(self._context, self.address)
            try:
                self._handshake(socket)
            except BaseException:
                socket.close(linger=0)
                raise
            self._socket = socket
        return self._socket

    def _handshake(self, socket: zmq.Socket[bytes]) -> None:
        """Ask a new connection's daemon for its instance id and message limit."""
        hello = self._core.hello()
        self._core.open(hello.id)
        try:
            deadline = time.monotonic() + self.timeout
            self._send_on(socket, encode_request(hello))
            while self._core.take(hello.id) is None:
                remaining_s = deadline - time.monotonic()
                if remaining_s <= 0 or not socket.poll(max(1, int(remaining_s * 1000))):
                    raise daemon_not_running(self.address, f"no reply for {self.timeout:g}s")
                self._read_available(socket)
        finally:
            self._core.close(hello.id)

    def _send(self, message: WireMessage) -> None:
        payload = encode_request(message)  # a bad value fails here, connected or not
        socket = self._connected()
        self._core.check_size(payload)
        self._send_on(socket, payload)

    def _send_on(self, socket: zmq.Socket[bytes], payload: bytes) -> None:
        if not socket.poll(int(self.timeout * 1000), zmq.POLLOUT):
            raise daemon_not_running(self.address, f"could not send for {self.timeout:g}s")
        try:
            socket.send(payload, zmq.NOBLOCK)
        except zmq.Again:
            raise daemon_not_running(self.address, "the connection was lost") from None

    def _send_request(self, message: WireMessage) -> None:
        """Send a request that expects replies (the core starts its silence clock)."""
        self._send(message)
        self._core.sent(message)

    def _send_quietly(self, message: WireMessage) -> None:
        if self._socket is None:
            return  # closed: close() already sent the aborts and unsubscribes
        with contextlib.suppress(Exception):  # the daemon may already be gone
            self._send(message)

    def _request(
        self, message: HealthRequest | StatsRequest | TokenizeRequest | DetokenizeRequest
    ) -> DaemonMessage:
        """Send and return the single reply (raising an error reply as its exception)."""
        self._core.open(message.id)
        try:
            self._send_request(message)
            return one_shot_reply(self._next_for(message.id))
        finally:
            self._core.close(message.id)

    def _events(self, request: GenerateRequest) -> Generator[StreamEvent, None, None]:
        self._core.open(request.id, is_stream=True)
        is_ended = False
        try:
            self._send_request(with_expiry(request, self.timeout))
            while not is_ended:
                event = self._next_for(request.id)
                is_ended = isinstance(event, Finished)
                yield event  # type: ignore[misc]
        except Exception:
            is_ended = True  # an error reply (or a dead daemon) ended the request
            raise
        finally:
            self._core.close(request.id)
            if not is_ended:
                self._send_quietly(AbortRequest(request.id))

    def _snapshots(self, request: SubscribeRequest) -> Iterator[StatsSnapshot]:
        self._core.open(request.id, is_subscription=True)
        try:
            self._send_request(request)
            while True:
                reply = self._next_for(request.id)
                if isinstance(reply, StatsReply):
                    yield reply.snapshot
        finally:
            self._core.close(request.id)
            self._send_quietly(UnsubscribeRequest(request.id))

    def _next_for(self, request_id: str) -> DaemonMessage:
        """The next message about `request_id`; error replies are raised."""
        socket = self._connected()
        while (message := self._core.take(request_id)) is None:
            if socket.poll(int(self._core.liveness.wait_s() * 1000), zmq.POLLIN):
                self._read_available(socket)
            elif (probe := self._core.check_silence()) is not None:
                self._send(probe)
        return message

    def _read_available(self, socket: zmq.Socket[bytes]) -> None:
        while True:
            try:
                frames = socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._core.receive_frames(frames)  # a message may carry several replies
