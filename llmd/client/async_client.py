"""The asyncio client: the same API as Client with coroutines and async iterators.

One reader task receives everything on the socket and hands it to the shared
`ClientCore`, which files each reply (every frame of a message) in the inbox of the
request it answers; the reader then wakes those requests' waiters once per message, so
any number of coroutines can stream at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from typing import TYPE_CHECKING

import zmq
import zmq.asyncio

from llmd.client.client_core import health_dict, one_shot_reply
from llmd.client.client_shell import DEFAULT_TIMEOUT_S, ClientShell
from llmd.client.completion import Completion, StreamEvent
from llmd.client.deadline import Wakeups, wait_within
from llmd.client.errors import daemon_not_running
from llmd.client.wire import encode_request, make_socket, with_expiry
from llmd.protocol import (
    AbortRequest,
    Accepted,
    CacheFlushed,
    DaemonMessage,
    DetokenizeReply,
    DetokenizeRequest,
    Finished,
    FlushCacheRequest,
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


class AsyncClient(ClientShell[AsyncGenerator[StreamEvent, None], AsyncIterator[StatsSnapshot]]):
    """Talks to one llmd daemon from asyncio code; `async with` it or await close()."""

    def __init__(self, address: str | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        super().__init__(address, timeout)
        self._context = zmq.asyncio.Context.instance()
        self._socket: zmq.asyncio.Socket | None = None
        self._reader: asyncio.Task[None] | None = None
        self._wakeups = Wakeups()
        """Wakes the coroutine of an open request when the core filed something for it."""
        self._hello: asyncio.Task[None] | None = None
        """The handshake of the current socket (shared by every coroutine that waits on it)."""

    # ---------------------------------------------------------------- public API

    async def generate(
        self, prompt: str | None = None, **options: Unpack[GenerateOptions]
    ) -> Completion:
        """Generate and return the whole completion.

        `options` are those of `GenerateOptions`: messages or prompt_token_ids instead of
        `prompt`, params, priority and label.
        """
        request = self._core.generate_request(prompt, False, **options)
        accepted: Accepted | None = None
        async with contextlib.aclosing(self._events(request)) as events:
            async for event in events:
                if isinstance(event, Accepted):
                    accepted = event
                elif isinstance(event, Finished):
                    return Completion.from_finished(accepted, event, event.text or "")
        raise ProtocolError("the daemon ended the request without a finished message")

    async def abort(self, request_id: str) -> None:
        """Abort this client's request `request_id`."""
        await self._send(AbortRequest(request_id))

    async def stats(self, **options: Unpack[SnapshotOptions]) -> StatsSnapshot:
        """One metrics snapshot."""
        reply = await self._request(StatsRequest(self._core.new_id(), **options))
        assert isinstance(reply, StatsReply)  # the daemon answers stats with stats
        return reply.snapshot

    async def tokenize(
        self,
        prompt: str | None = None,
        messages: list[dict[str, object]] | None = None,
        add_special_tokens: bool = True,
    ) -> TokenizeReply:
        """Token ids of `prompt` (or of chat `messages` through the template), and the
        model's context length, from the daemon's tokenizer."""
        message = TokenizeRequest(self._core.new_id(), prompt, messages, add_special_tokens)
        reply = await self._request(message)
        assert isinstance(reply, TokenizeReply)  # the daemon answers tokenize with tokenized
        return reply

    async def detokenize(self, token_ids: list[int]) -> str:
        """The text of `token_ids` (special tokens included), from the daemon's tokenizer."""
        reply = await self._request(DetokenizeRequest(self._core.new_id(), list(token_ids)))
        assert isinstance(reply, DetokenizeReply)  # the daemon answers detokenize so
        return reply.text

    async def health(self) -> dict[str, object]:
        """The daemon's health reply as a dict."""
        return health_dict(await self._request(HealthRequest(self._core.new_id())))

    async def flush_cache(self) -> int:
        """Drop the engine's cached prefixes; the number of blocks dropped (refused while
        requests run or wait: `CacheBusyError`)."""
        reply = await self._request(FlushCacheRequest(self._core.new_id()))
        assert isinstance(reply, CacheFlushed)  # the daemon answers flush_cache so
        return reply.num_blocks_dropped

    async def shutdown(
        self, now: bool = False, timeout: float | None = None, wait: bool = True
    ) -> None:
        """Ask the daemon to drain (or abort, with `now`) and exit; wait until it has."""
        request = ShutdownRequest(self._core.new_id(), now, timeout)
        self._open(request.id)
        try:
            await self._send_request(request)
            await self._next(request.id)  # "draining"
            if wait:
                await self._next(request.id)  # "stopped"
        except Exception as error:
            if not wait or getattr(error, "code", None) != "daemon_not_running":
                raise
        finally:
            self._close(request.id)

    async def close(self) -> None:
        """Abort open streams, end subscriptions and close the socket."""
        if self._socket is None:
            return
        for message in self._core.farewells():
            await self._send_quietly(message)
        await self._drop_socket(linger=None)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ---------------------------------------------------------------- internals

    async def _connected(self) -> zmq.asyncio.Socket:
        """The socket, connected and past its handshake (one per socket, shared)."""
        loop = asyncio.get_running_loop()
        if self._socket is None:
            self._socket = make_socket(self._context, self.address)
            self._hello = None
        if self._reader is None or self._reader.done():
            self._reader = loop.create_task(self._read_forever())
        if self._hello is None:
            self._hello = loop.create_task(self._handshake())
        try:
            await asyncio.shield(self._hello)
        except Exception:
            await self._drop_socket(linger=0)
            raise
        return self._socket

    async def _handshake(self) -> None:
        """Ask a new connection's daemon for its instance id and message limit."""
        hello = self._core.hello()
        self._open(hello.id)
        socket = self._socket
        assert socket is not None  # set by _connected
        try:
            await wait_within(socket.send(encode_request(hello)), self.timeout)
            reply = await self._wait(hello.id, self.timeout)
        except asyncio.TimeoutError:
            reply = None
        finally:
            self._close(hello.id)
        if reply is None:
            raise daemon_not_running(self.address, f"no reply for {self.timeout:g}s")

    async def _drop_socket(self, linger: int | None) -> None:
        """Stop the reader and close the socket (a later call connects afresh)."""
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
            self._reader = None
        if self._socket is not None:
            self._socket.close(linger=linger)
            self._socket = None
        self._hello = None

    def _open(
        self, request_id: str, is_stream: bool = False, is_subscription: bool = False
    ) -> None:
        """Keep what arrives for `request_id`, and a wake-up for the coroutine waiting on it."""
        self._core.open(request_id, is_stream, is_subscription)
        self._wakeups.open(request_id)

    def _close(self, request_id: str) -> None:
        self._core.close(request_id)
        self._wakeups.close(request_id)

    def _wake(self, request_ids: Iterable[str]) -> None:
        for request_id in request_ids:
            self._wakeups.wake(request_id)

    async def _send(self, message: WireMessage) -> None:
        payload = encode_request(message)  # a bad value fails here, connected or not
        socket = await self._connected()
        self._core.check_size(payload)
        try:
            await wait_within(socket.send(payload), self.timeout)
        except asyncio.TimeoutError:
            raise daemon_not_running(
                self.address, f"could not send for {self.timeout:g}s"
            ) from None

    async def _send_request(self, message: WireMessage) -> None:
        """Send a request that expects replies (the core starts its silence clock)."""
        await self._send(message)
        self._core.sent(message)

    async def _send_quietly(self, message: WireMessage) -> None:
        if self._socket is None:
            return  # closed: close() already sent the aborts and unsubscribes
        with contextlib.suppress(Exception):  # the daemon may already be gone
            await self._send(message)

    async def _request(
        self,
        message: HealthRequest
        | StatsRequest
        | TokenizeRequest
        | DetokenizeRequest
        | FlushCacheRequest,
    ) -> DaemonMessage:
        """Send and return the single reply (raising an error reply as its exception)."""
        self._open(message.id)
        try:
            await self._send_request(message)
            return one_shot_reply(await self._next(message.id))
        finally:
            self._close(message.id)

    async def _events(self, request: GenerateRequest) -> AsyncGenerator[StreamEvent, None]:
        self._open(request.id, is_stream=True)
        is_ended = False
        try:
            await self._send_request(with_expiry(request, self.timeout))
            while not is_ended:
                event = await self._next(request.id)
                is_ended = isinstance(event, Finished)
                yield event  # type: ignore[misc]
        except Exception:  # an error reply or a dead daemon ended it (not close or cancel)
            is_ended = True
            raise
        finally:
            self._close(request.id)
            if not is_ended:
                await self._send_quietly(AbortRequest(request.id))

    async def _snapshots(self, request: SubscribeRequest) -> AsyncIterator[StatsSnapshot]:
        self._open(request.id, is_subscription=True)
        try:
            await self._send_request(request)
            while True:
                reply = await self._next(request.id)
                if isinstance(reply, StatsReply):
                    yield reply.snapshot
        finally:
            self._close(request.id)
            await self._send_quietly(UnsubscribeRequest(request.id))

    async def _next(self, request_id: str) -> DaemonMessage:
        """The next message about `request_id`, probing the daemon during long silences."""
        while (message := await self._wait(request_id, self._core.liveness.wait_s())) is None:
            probe = self._core.check_silence()
            if probe is not None:
                await self._send(probe)
        return message

    async def _wait(self, request_id: str, timeout_s: float) -> DaemonMessage | None:
        """The next message about `request_id`, or None when `timeout_s` passed without one."""
        message = self._core.take(request_id)
        if message is None:
            await self._wakeups.sleep(request_id, timeout_s)
            message = self._core.take(request_id)
        return message

    async def _read_forever(self) -> None:
        socket = self._socket
        assert socket is not None  # started by _connected
        try:
            while True:
                self._wake(self._core.receive_frames(await socket.recv_multipart()))
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a broken socket: wake every waiter with the error
            self._wake(self._core.fail_all(error))
