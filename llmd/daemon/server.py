"""The daemon's I/O thread: the only owner of the ROUTER socket.

It validates every incoming message, routes requests to the text and engine threads,
sends what they post to the outbox, runs subscriptions and drains on shutdown; peers are
told apart by their ROUTER identity and requests by (identity, client request id).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from typing import Any

import zmq

from llmd.daemon.admission import Admission
from llmd.daemon.connection_gate import ConnectionGate
from llmd.daemon.cpu_placement import CpuPlacement, pin_current_thread
from llmd.daemon.daemon_status import daemon_facts, health_reply
from llmd.daemon.engine_facts import serving_metrics
from llmd.daemon.engine_loop import EngineLoop, label_text
from llmd.daemon.engine_thread import EngineThread
from llmd.daemon.keepalive import KeepaliveSchedule
from llmd.daemon.listener import Listener
from llmd.daemon.outbox import (
    ConnectionClosed,
    Drain,
    EngineDied,
    EngineWarm,
    Outbox,
    Send,
    SnapshotReady,
)
from llmd.daemon.router_socket import LINGER_MS, bind_router
from llmd.daemon.routes import RouteTable
from llmd.daemon.serve_options import ServeOptions
from llmd.daemon.stats_publisher import StatsPublisher
from llmd.daemon.text_worker import AbortJob, NewRequest, TextWorker
from llmd.errors import (
    EngineDeadError,
    LLMDError,
    OverloadedError,
    ShuttingDownError,
)
from llmd.protocol import (
    CLIENT_MESSAGE_TYPES,
    AbortRequest,
    Ack,
    Address,
    DuplicateRequestIdError,
    ErrorReply,
    GenerateRequest,
    HealthRequest,
    Keepalive,
    ProtocolError,
    RequestExpiredError,
    ShutdownRequest,
    StatsRequest,
    SubscribeRequest,
    UnsubscribeRequest,
    WireMessage,
    encode,
    message_id,
    parse_message,
    unpack,
)
from llmd.protocol.codec import peek_id

logger = logging.getLogger(__name__)

POLL_INTERVAL_MS = 100
"""The loop wakes at least this often to check drain deadlines and subscriptions."""
MAX_MESSAGES_PER_WAKE = 256
FORCED_STOP_GRACE_S = 5.0
"""After aborting everything, how long to wait for the aborts' replies before exiting."""


class Daemon:
    """Serves one engine on one address until drained."""

    def __init__(
        self,
        engine: Any,
        options: ServeOptions,
        address: Address,
        placement: CpuPlacement | None = None,
        engine_thread: EngineThread | None = None,
    ) -> None:
        self.engine = engine
        self.options = options
        self.address = address
        self.placement = placement
        """Cores of the forward pass and of the other threads (None: not pinned)."""
        self.started_at = time.monotonic()
        self.instance_id = uuid.uuid4().hex[:16]
        """Random per start, in `accepted` and `health`: clients see a restart by it."""
        # Measuring the host's peaks runs torch: on the engine's thread, or this thread
        # would start a second OpenMP pool (see engine_thread.py).
        self.metrics = (
            serving_metrics(engine, options)
            if engine_thread is None
            else engine_thread.call(serving_metrics, engine, options)
        )
        self.outbox = Outbox()
        admission = None
        if options.admission == "slo" and options.slo_ttft_ms is not None:
            tpot_s = None if options.slo_tpot_ms is None else options.slo_tpot_ms / 1000
            admission = Admission(options.slo_ttft_ms / 1000, tpot_s)
        self.engine_loop = EngineLoop(
            engine,
            self.metrics,
            self._on_engine_batch,
            lambda m: self.outbox.post(EngineDied(m)),
            admission,
            (lambda report: self.outbox.post(EngineWarm(report.seconds)))
            if options.is_warmup_enabled
            else None,
            engine_thread,  # the thread that loaded the engine steps it (`llmd serve`)
        )
        self.text_worker = TextWorker(
            engine, self.engine_loop, self.outbox, self.metrics, self.instance_id
        )
        self.routes = RouteTable()
        self.stats = StatsPublisher(
            self.engine_loop,
            self.outbox,
            self.routes,
            self.metrics,
            lambda: daemon_facts(self),
            self._send,
        )
        self.state = "warming" if options.is_warmup_enabled else "ok"
        """warming (until the engine's warm-up ends), ok, draining or dead."""
        self.dead_message: str | None = None
        self._gone_peers: set[bytes] = set()
        self._keepalives = KeepaliveSchedule()
        self._drain_deadline: float | None = None
        self._aborted_at: float | None = None
        self._shutdown_requesters: list[tuple[bytes, str]] = []
        self._num_in_flight_at_drain = 0
        self._num_aborted_at_drain = 0
        self._context = zmq.Context()
        self._socket: zmq.Socket | None = None
        self.gate: ConnectionGate | None = None
        self._listener: Listener | None = None
        self._is_close_posted = False
        self._is_stopped = False

    def _on_engine_batch(self, batch: Any) -> None:
        self.text_worker.submit(batch)

    # ---------------------------------------------------------------- lifecycle

    def bind(self) -> None:
        """Create the ROUTER socket and bind it to llmd's own listening socket (`Listener`)."""
        bound = bind_router(self._context, self.options, self.address, self._on_connection_closed)
        self._socket = bound.socket
        self._listener = bound.listener
        self.gate = bound.gate

    def request_drain(self, now: bool = False, timeout_s: float | None = None) -> None:
        """Begin a graceful (or immediate) shutdown; safe from any thread or signal handler."""
        self.outbox.post(Drain(now, timeout_s))

    def serve_forever(self) -> None:
        """Run the I/O loop until drained, then stop the threads and close the socket."""
        if self._socket is None:
            self.bind()
        assert self._socket is not None and self.gate is not None  # bind() sets them
        self.engine_loop.start()  # on the forward pass's cores, if pinned
        if self.placement is not None:
            pin_current_thread(self.placement.serving_cpu_ids)  # and the threads started next
        self.text_worker.start()
        self.gate.start()
        poller = zmq.Poller()
        poller.register(self._socket, zmq.POLLIN)
        poller.register(self.outbox.fileno(), zmq.POLLIN)
        logger.info("serving %s on %s (pid %d)", self.engine.model_name, self.address, os.getpid())
        try:
            while not self._is_stopped:
                events = dict(poller.poll(self.stats.poll_timeout_ms(POLL_INTERVAL_MS)))
                if self._socket in events:
                    self._receive_all()
                for item in self.outbox.drain():
                    self._on_outbox_item(item)
                self._check_threads()
                self._send_keepalives()
                self.stats.run_due()
                self._check_drain()
        finally:
            self._close()

    def _close(self) -> None:
        for peer, client_id in self._shutdown_requesters:
            num_drained = self._num_in_flight_at_drain - self._num_aborted_at_drain
            summary = f"drained {num_drained}, aborted {self._num_aborted_at_drain}"
            self._send_message(peer, Ack(client_id, f"stopped: {summary}"))
        self.text_worker.stop()
        self.engine_loop.stop()
        if self.gate is not None:
            self.gate.close()  # resumes accepting: libzmq must close the real socket
        if self._socket is not None:
            self._socket.close(linger=LINGER_MS)
        self._context.term()
        if self._listener is not None:
            self._listener.close()
        if self.address.scheme == "ipc":  # clients then fail fast instead of timing out
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.address.path)
        self.outbox.close()
        logger.info("daemon stopped")

    # ---------------------------------------------------------------- incoming

    def _receive_all(self) -> None:
        assert self._socket is not None  # only called while serving
        for _ in range(MAX_MESSAGES_PER_WAKE):
            try:
                frames = self._socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._on_frames(frames)

    def _on_frames(self, frames: list[bytes]) -> None:
        peer, body = frames[0], frames[1:]
        self._gone_peers.discard(peer)
        if len(body) == 2 and body[0] == b"":
            body = body[1:]  # a REQ-style empty delimiter
        if len(body) != 1:
            self._reply_error(peer, None, ProtocolError("expected one frame per message"))
            return
        if len(body[0]) > self.options.max_message_bytes:  # refused under its id when it has one
            limit = self.options.max_message_bytes
            error = ProtocolError(f"message of {len(body[0])} bytes exceeds the limit of {limit}")
            self._reply_error(peer, peek_id(body[0]), error)
            return
        try:
            data = unpack(body[0], self.options.max_message_bytes)
        except ProtocolError as error:
            self._reply_error(peer, None, error)
            return
        client_id = message_id(data)
        try:
            message = parse_message(data, CLIENT_MESSAGE_TYPES)
            self._dispatch(peer, message)
        except LLMDError as error:
            self._reply_error(peer, client_id, error)
        except Exception as error:  # a bug handling one message must not stop the daemon
            logger.exception("failed to handle a %s message", data.get("type"))
            self._reply_error(peer, client_id, LLMDError(f"internal error: {error}"))

    def _dispatch(self, peer: bytes, message: WireMessage) -> None:
        if isinstance(message, GenerateRequest):
            self._on_generate(peer, message)
        elif isinstance(message, AbortRequest):
            engine_id = self.routes.engine_id(peer, message.id)
            if engine_id is not None:
                self.text_worker.submit(AbortJob(engine_id))
        elif isinstance(message, StatsRequest):
            self.stats.request(peer, message)
        elif isinstance(message, SubscribeRequest):
            self.stats.subscribe(peer, message)
        elif isinstance(message, UnsubscribeRequest):
            self.stats.unsubscribe(peer, message.id)
            self._send_message(peer, Ack(message.id, "unsubscribed"))
        elif isinstance(message, HealthRequest):
            self._send_message(peer, health_reply(self, peer, message))
        elif isinstance(message, ShutdownRequest):
            self._send_message(peer, Ack(message.id, "draining"))
            self._on_drain(Drain(message.now, message.timeout_s, (peer, message.id)))

    def _on_generate(self, peer: bytes, message: GenerateRequest) -> None:
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
            raise RequestExpiredError(
                f"the request arrived {late_s:.1f}s after its expires_at and was not run "
                "(the client gave up, or its clock is ahead of the daemon's)",
                "expires_at",
            )
        if self.state == "draining":
            raise ShuttingDownError("the daemon is shutting down and accepts no new requests")
        if self.state == "dead":
            raise EngineDeadError(f"the engine has died ({self.dead_message})")
        if self.routes.engine_id(peer, message.id) is not None:
            raise DuplicateRequestIdError(
                f"request {message.id!r} is already in flight on this connection; this new "
                "generate is refused and the live request goes on",
                "id",
            )
        if len(self.routes) >= self.options.max_queued_requests:
            raise OverloadedError(
                f"{len(self.routes)} requests are in flight (the limit is "
                f"{self.options.max_queued_requests}); retry later"
            )
        engine_id = self.routes.add(peer, message.id)
        self.text_worker.submit(NewRequest(engine_id, peer, message, time.monotonic()))

    # ---------------------------------------------------------------- outgoing

    def _on_outbox_item(self, item: Any) -> None:
        if isinstance(item, Send):
            self._send(item.peer, item.payload)
            if item.release_key is not None:
                self._release(item.release_key)
        elif isinstance(item, SnapshotReady):
            self.stats.on_ready(item)
        elif isinstance(item, EngineDied):
            self._on_engine_death(item.message)
        elif isinstance(item, Drain):
            self._on_drain(item)
        elif isinstance(item, EngineWarm):
            if self.state == "warming":
                self.state = "ok"
            logger.info("ready (warm-up took %.1f s)", item.seconds)
        elif isinstance(item, ConnectionClosed):
            self._is_close_posted = False
            self._keepalives.on_disconnect()  # a connection closed: find whose, now

    def _on_connection_closed(self) -> None:
        """The gate's thread saw a connection close; one wake-up of the I/O thread is enough."""
        if not self._is_close_posted:
            self._is_close_posted = True
            self.outbox.post(ConnectionClosed())

    def _send_message(self, peer: bytes, message: WireMessage) -> None:
        self._send(peer, encode(message))

    def _reply_error(self, peer: bytes, client_id: str | None, error: LLMDError) -> None:
        self._send_message(peer, ErrorReply.from_error(client_id, error))

    def _send(self, peer: bytes, payload: bytes) -> None:
        if peer in self._gone_peers or self._socket is None:
            return
        try:
            self._socket.send_multipart([peer, payload], zmq.NOBLOCK)
        except zmq.ZMQError as error:
            if error.errno not in (zmq.EHOSTUNREACH, zmq.EAGAIN):
                raise
            self._on_peer_gone(peer)
            return
        self._keepalives.on_sent(peer)

    def _send_keepalives(self) -> None:
        """Probe each connection with work in flight that heard nothing lately."""
        busy_peers = (set(self.routes.peers()) | self.stats.peers()) - self._gone_peers
        due = self._keepalives.due(busy_peers)
        if due:
            keepalive = encode(Keepalive(self.instance_id))
            for peer in due:
                self._send(peer, keepalive)

    def _on_peer_gone(self, peer: bytes) -> None:
        """The peer disconnected (or stopped reading): abort its requests, drop its streams."""
        routes = self.routes.of_peer(peer)
        logger.info("peer %s is gone; aborting %d request(s)", peer.hex(), len(routes))
        if routes:
            self._gone_peers.add(peer)
        for _, engine_id in routes:
            self.text_worker.submit(AbortJob(engine_id))
        self.stats.drop_peer(peer)

    def _release(self, key: tuple[bytes, str]) -> None:
        self.routes.release(key)
        if key[0] in self._gone_peers and not self.routes.has_peer(key[0]):
            self._gone_peers.discard(key[0])

    # ---------------------------------------------------------------- failure and drain

    def _check_threads(self) -> None:
        if self.state != "dead" and not self.text_worker.is_alive:
            self._on_engine_death("the text worker thread stopped")

    def _on_engine_death(self, message: str) -> None:
        """Fail every in-flight request with engine_dead; keep answering health and stats."""
        if self.dead_message is None:
            logger.error("engine is dead: %s", message)
            self.dead_message = message
        if self.state != "draining":
            self.state = "dead"
        self.stats.answer_pending()
        error = EngineDeadError(f"the engine has died ({message})")
        for key, _ in self.routes.items():
            self._reply_error(key[0], key[1], error)
            self._release(key)

    def _on_drain(self, drain: Drain) -> None:
        if drain.requester is not None:
            self._shutdown_requesters.append(drain.requester)
        timeout = self.options.drain_timeout_s if drain.timeout_s is None else drain.timeout_s
        deadline = time.monotonic() + (0.0 if drain.now else timeout)
        if self._drain_deadline is None or deadline < self._drain_deadline:
            self._drain_deadline = deadline
        if self.state != "draining":
            logger.info("draining %d request(s) (limit %.1fs)", len(self.routes), timeout)
            self._num_in_flight_at_drain = len(self.routes)
            self.state = "draining"
        self._check_drain()

    def _check_drain(self) -> None:
        if self._drain_deadline is None:
            return
        now = time.monotonic()
        if not self.routes:
            self._is_stopped = True
        elif self._aborted_at is None and now >= self._drain_deadline:
            logger.info("drain limit reached; aborting %d request(s)", len(self.routes))
            self._aborted_at = now
            self._num_aborted_at_drain = len(self.routes)
            for _, engine_id in self.routes.items():
                self.text_worker.submit(AbortJob(engine_id))
        elif self._aborted_at is not None and now > self._aborted_at + FORCED_STOP_GRACE_S:
            error = ShuttingDownError("the daemon stopped before this request finished")
            for key, _ in self.routes.items():
                self._reply_error(key[0], key[1], error)
                self._release(key)
            self._is_stopped = True
