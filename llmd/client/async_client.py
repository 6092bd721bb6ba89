"""The asyncio client: the same API as Client with coroutines and async iterators.

One reader task receives everything on the socket and hands each message to the queue
of the request it answers, so any number of coroutines can stream at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Sequence
from typing import Any

import zmq
import zmq.asyncio

from llmd.client.completion import Completion, StreamEvent
from llmd.client.deadline import get_within, wait_within
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


class AsyncClient:
    """Talks to one llmd daemon from asyncio code; `async with` it or await close()."""

    def __init__(self, address: str | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.address = address or default_address()
        self.timeout = timeout
        self._context = zmq.asyncio.Context.instance()
        self._socket: zmq.asyncio.Socket | None = None
        self._reader: asyncio.Task | None = None
        self._prefix = new_id_prefix()
        self._counter = itertools.count(1)
        self._queues: dict[str, asyncio.Queue] = {}
        self._open_streams: set[str] = set()
        self._subscriptions: set[str] = set()
        self._liveness = Liveness(timeout)
        self._in_flight = InFlight()
        self._hello: asyncio.Task | None = None
        """The handshake of the current socket (shared by every coroutine that waits on it)."""

    # ---------------------------------------------------------------- public API

    async def generate(
        self,
        prompt: str | None = None,
        *,
        messages: Sequence[dict[str, str]] | None = None,
        prompt_token_ids: Sequence[int] | None = None,
        params: SamplingParams | dict[str, Any] | None = None,
        priority: int = 0,
        label: str | None = None,
    ) -> Completion:
        """Generate and return the whole completion.

        `label` (letters, digits, `-_.:/+=@`) names the request in the daemon's log lines
        and in `llmd top`.
        """
        request = build_generate(
            self._new_id(), prompt, messages, prompt_token_ids, params, priority, False, label
        )
        accepted: Accepted | None = None
        async with contextlib.aclosing(self._events(request)) as events:
            async for event in events:
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
    ) -> AsyncIterator[StreamEvent]:
        """Async-iterate Accepted, PrefillProgress, TokenDelta and finally Finished.

        Closing the iterator early (`contextlib.aclosing`, or garbage collection) aborts it.
        """
        request = build_generate(
            self._new_id(), prompt, messages, prompt_token_ids, params, priority, True, label
        )
        return self._events(request)

    async def abort(self, request_id: str) -> None:
        """Abort this client's request `request_id`."""
        await self._send(AbortRequest(request_id))

    async def stats(
        self,
        *,
        include_requests: bool = True,
        include_block_map: bool = True,
        timeline_request_id: str | None = None,
        max_requests: int = 64,
    ) -> dict[str, Any]:
        """One metrics snapshot."""
        request = StatsRequest(
            self._new_id(), include_requests, include_block_map, timeline_request_id, max_requests
        )
        reply = await self._request(request)
        assert isinstance(reply, StatsReply)  # _request waits for the one reply
        return reply.snapshot

    def subscribe(
        self,
        interval_ms: int = 1000,
        *,
        include_requests: bool = True,
        include_block_map: bool = True,
        timeline_request_id: str | None = None,
        max_requests: int = 64,
    ) -> AsyncIterator[dict[str, Any]]:
        """Async-iterate a snapshot every `interval_ms`; closing it unsubscribes."""
        request = SubscribeRequest(
            self._new_id(),
            interval_ms,
            include_requests,
            include_block_map,
            timeline_request_id,
            max_requests,
        )
        return self._snapshots(request)

    async def health(self) -> dict[str, Any]:
        """The daemon's health reply as a dict."""
        reply = await self._request(HealthRequest(self._new_id()))
        assert isinstance(reply, HealthReply)  # _request waits for the one reply
        data = reply.to_wire()
        del data["type"], data["v"]
        return data

    async def shutdown(
        self, now: bool = False, timeout: float | None = None, wait: bool = True
    ) -> None:
        """Ask the daemon to drain (or abort, with `now`) and exit; wait until it has."""
        request = ShutdownRequest(self._new_id(), now, timeout)
        queue = self._queue_for(request.id)
        try:
            await self._send_request(request, is_tracked=False)
            await self._next(request.id, queue)  # "draining"
            if wait:
                await self._next(request.id, queue)  # "stopped"
        except Exception as error:
            if not wait or getattr(error, "code", None) != "daemon_not_running":
                raise
        finally:
            self._queues.pop(request.id, None)

    async def close(self) -> None:
        """Abort open streams, end subscriptions and close the socket."""
        if self._socket is None:
            return
        for request_id in list(self._open_streams):
            await self._send_quietly(AbortRequest(request_id))
        for subscription_id in list(self._subscriptions):
            await self._send_quietly(UnsubscribeRequest(subscription_id))
        await self._drop_socket(linger=None)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()

    # ---------------------------------------------------------------- internals

    def _new_id(self) -> str:
        return f"{self._prefix}-{next(self._counter)}"

    async def _connected(self) -> zmq.asyncio.Socket:
        """The socket, connected and past its handshake (one per socket, shared)."""
        loop = asyncio.get_running_loop()
        if self._socket is None:
            self._socket = make_socket(self._context, self.address)  # type: ignore[assignment]
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
        return self._socket  # type: ignore[return-value]

    async def _handshake(self) -> None:
        """Ask a new connection's daemon for its instance id and message limit."""
        hello = HealthRequest(f"{self._prefix}-hello")
        queue = self._queue_for(hello.id)
        socket = self._socket
        assert socket is not None  # set by _connected
        try:
            await wait_within(socket.send(encode_request(hello)), self.timeout)
            reply = await get_within(queue, self.timeout)
        except asyncio.TimeoutError:
            raise daemon_not_running(self.address, f"no reply for {self.timeout:g}s") from None
        finally:
            self._queues.pop(hello.id, None)
        if isinstance(reply, BaseException):
            raise reply
        self._liveness.heard()

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

    def _queue_for(self, request_id: str) -> asyncio.Queue:
        queue: asyncio.Queue = asyncio.Queue()
        self._queues[request_id] = queue
        return queue

    async def _send(self, message: WireMessage) -> None:
        payload = encode_request(message)  # a bad value fails here, connected or not
        socket = await self._connected()
        check_size(payload, self._in_flight.max_message_bytes)
        try:
            await wait_within(socket.send(payload), self.timeout)
        except asyncio.TimeoutError:
            raise daemon_not_running(
                self.address, f"could not send for {self.timeout:g}s"
            ) from None

    async def _send_request(
        self, message: WireMessage, is_tracked: bool = True, is_one_shot: bool = False
    ) -> None:
        """Send a request that expects replies: its silence clock starts now.

        A tracked request is one the daemon keeps a record of until its last reply, which
        health probes ask about.
        """
        await self._send(message)
        if is_tracked:
            self._in_flight.sent(message.id, is_one_shot)  # type: ignore[attr-defined]
        self._liveness.heard()

    async def _send_quietly(self, message: WireMessage) -> None:
        if self._socket is None:
            return  # closed: close() already sent the aborts and unsubscribes
        with contextlib.suppress(Exception):  # the daemon may already be gone
            await self._send(message)

    async def _request(self, message: WireMessage) -> DaemonMessage:
        request_id = message.id  # type: ignore[attr-defined]
        queue = self._queue_for(request_id)
        try:
            is_stats = isinstance(message, StatsRequest)
            await self._send_request(message, is_tracked=is_stats, is_one_shot=True)
            return await self._next(request_id, queue)
        finally:
            self._queues.pop(request_id, None)
            self._in_flight.forget(request_id)

    async def _events(self, request: Any) -> AsyncIterator[StreamEvent]:
        queue = self._queue_for(request.id)
        self._open_streams.add(request.id)
        is_done = False
        try:
            await self._send_request(with_expiry(request, self.timeout))
            while True:
                event = await self._next(request.id, queue)
                if isinstance(event, Finished):
                    is_done = True
                    yield event
                    return
                yield event  # type: ignore[misc]
        except Exception:  # an error reply or a dead daemon ended it (not close or cancel)
            is_done = True
            raise
        finally:
            self._open_streams.discard(request.id)
            self._queues.pop(request.id, None)
            self._in_flight.forget(request.id)
            if not is_done:
                await self._send_quietly(AbortRequest(request.id))

    async def _snapshots(self, request: SubscribeRequest) -> AsyncIterator[dict[str, Any]]:
        queue = self._queue_for(request.id)
        self._subscriptions.add(request.id)
        try:
            await self._send_request(request)
            while True:
                reply = await self._next(request.id, queue)
                if isinstance(reply, StatsReply):
                    yield reply.snapshot
        finally:
            self._subscriptions.discard(request.id)
            self._queues.pop(request.id, None)
            self._in_flight.forget(request.id)
            await self._send_quietly(UnsubscribeRequest(request.id))

    async def _next(self, request_id: str, queue: asyncio.Queue) -> DaemonMessage:
        """The next message about `request_id`, probing the daemon during long silences."""
        while True:
            try:
                message = await get_within(queue, self._liveness.wait_s())
            except asyncio.TimeoutError:
                if self._liveness.is_dead():
                    raise daemon_not_running(
                        self.address, f"no reply for {self.timeout:g}s"
                    ) from None
                if self._liveness.should_probe():
                    probe_id = f"{self._prefix}-probe"
                    await self._send(HealthRequest(probe_id, self._in_flight.request_ids()))
                    self._liveness.probe_sent()
                continue
            if isinstance(message, BaseException):
                raise message
            if isinstance(message, ErrorReply):
                raise_error(message)
            return message

    async def _read_forever(self) -> None:
        socket = self._socket
        assert socket is not None  # started by _connected
        try:
            while True:
                payload = await socket.recv()
                self._liveness.heard()
                message = decode_daemon_message(payload, len(payload))
                for request_id, error in self._in_flight.on_message(message):
                    lost_queue = self._queues.get(request_id)
                    if lost_queue is not None:
                        lost_queue.put_nowait(error)
                message_id = getattr(message, "id", None)
                queue = self._queues.get(message_id) if message_id is not None else None
                if queue is not None and not is_duplicate_refusal(message):
                    queue.put_nowait(message)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a broken socket: wake every waiter with the error
            for queue in self._queues.values():
                queue.put_nowait(error)
