"""The daemon's I/O thread: the only owner of the ROUTER socket.

It validates every incoming message, routes requests to the text and engine threads,
sends what they post to the outbox, runs subscriptions and drains on shutdown; peers are
told apart by their ROUTER identity and requests by (identity, client request id). Its
parts live apart: the socket's two ends in `PeerTransport`, the requests in flight in
`InFlightRequests`, health in `ServingState` and the drain's timing in `DrainSchedule`;
this class wires them to the engine and text threads and dispatches each message.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from typing import TYPE_CHECKING

import zmq

from llmd.daemon.admission import admission_for
from llmd.daemon.cache_flush import flush_cache
from llmd.daemon.connection_gate import ConnectionGate
from llmd.daemon.cpu_placement import CpuPlacement, pin_current_thread
from llmd.daemon.daemon_status import daemon_facts, health_reply
from llmd.daemon.drain_schedule import DrainSchedule, DrainStep
from llmd.daemon.engine_facts import serving_metrics
from llmd.daemon.engine_loop import EngineLoop
from llmd.daemon.engine_thread import EngineThread
from llmd.daemon.generate_refusal import generate_refusal
from llmd.daemon.in_flight_requests import InFlightRequests
from llmd.daemon.kv_event_publisher import KVEventPublisher, check_kv_events_address
from llmd.daemon.outbox import (
    ConnectionClosed,
    Drain,
    DrainedItem,
    EngineDied,
    EngineWarm,
    Outbox,
    SendBatch,
    SnapshotReady,
    batched,
)
from llmd.daemon.peer_transport import PeerTransport
from llmd.daemon.prompt_limits import PromptLimits
from llmd.daemon.router_socket import BoundRouter, bind_router, close_router
from llmd.daemon.routes import RouteTable
from llmd.daemon.serve_options import ServeOptions
from llmd.daemon.serving_state import ServingState
from llmd.daemon.stats_publisher import StatsPublisher
from llmd.daemon.text_worker import TextWorker
from llmd.errors import EngineDeadError, InvalidParameterError, LLMDError, ShuttingDownError
from llmd.protocol import (
    CLIENT_MESSAGE_TYPES,
    AbortRequest,
    Ack,
    Address,
    DetokenizeRequest,
    FlushCacheRequest,
    GenerateRequest,
    HealthRequest,
    ShutdownRequest,
    StatsRequest,
    SubscribeRequest,
    TokenizeRequest,
    UnsubscribeRequest,
    WireMessage,
    message_id,
    parse_message,
)
from llmd.tools.parser_choice import resolve_parser_name

if TYPE_CHECKING:
    from llmd.llm_engine import LLMEngine

logger = logging.getLogger(__name__)

POLL_INTERVAL_MS = 100
"""The loop wakes at least this often to check drain deadlines and subscriptions."""


class Daemon:
    """Serves one engine on one address until drained."""

    def __init__(
        self,
        engine: LLMEngine,
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
        # The engine's facts (all the daemon reads of it but the request API) and the host's
        # peaks: measuring them runs torch, so on the engine's thread when there is one, or
        # this thread would start a second OpenMP pool (see engine_thread.py).
        if engine_thread is None:
            self.facts = engine.facts()
            self.metrics = serving_metrics(self.facts, options)
        else:
            self.facts = engine_thread.call(engine.facts)
            self.metrics = engine_thread.call(serving_metrics, self.facts, options)
        if engine.tokenizer is None:  # every request would fail: refuse to start instead
            raise InvalidParameterError(
                "the daemon needs the engine's tokenizer (leave skip_tokenizer_init off)",
                "skip_tokenizer_init",
            )
        self.outbox = Outbox()
        kv_publisher = None
        if options.kv_events is not None:
            kv_address = check_kv_events_address(options.kv_events, options.allow_remote)
            kv_publisher = KVEventPublisher(kv_address)
            engine.enable_kv_events()  # before the loop starts: nothing steps yet
        self.engine_loop = EngineLoop(
            engine,
            self.metrics,
            lambda batch: self.text_worker.submit(batch),
            lambda m: self.outbox.post(EngineDied(m)),
            admission_for(options),
            (lambda report: self.outbox.post(EngineWarm(report.seconds)))
            if options.is_warmup_enabled
            else None,
            engine_thread,  # the thread that loaded the engine steps it (`llmd serve`)
            kv_publisher,
        )
        self.tool_call_parser = resolve_parser_name(
            options.tool_call_parser, engine.tokenizer.chat_template_text
        )
        """`--tool-call-parser`, with `auto` resolved from the chat template."""
        self.text_worker = TextWorker(
            engine.tokenizer,
            PromptLimits(self.facts.vocab_size, self.facts.max_model_len),
            self.engine_loop,
            self.outbox,
            self.metrics,
            self.instance_id,
            self.tool_call_parser,
        )
        self.routes = RouteTable()
        self.transport = PeerTransport(
            self.instance_id, options.max_message_bytes, self._on_peer_gone
        )
        self.in_flight = InFlightRequests(self.routes, self.transport, self.text_worker.submit)
        self.stats = StatsPublisher(
            self.engine_loop,
            self.outbox,
            self.routes,
            self.metrics,
            lambda: daemon_facts(self),
            self.transport.send,
        )
        self.serving = ServingState(is_warming=options.is_warmup_enabled)
        self.drain = DrainSchedule(options.drain_timeout_s)
        self._context = zmq.Context()
        self._router: BoundRouter | None = None
        self.gate: ConnectionGate | None = None
        self._is_close_posted = False
        self._is_stopped = False

    @property
    def state(self) -> str:
        """warming (until the engine's warm-up ends), ok, draining or dead."""
        return self.serving.value

    @property
    def dead_message(self) -> str | None:
        """Why the engine died, once it has."""
        return self.serving.dead_message

    # ---------------------------------------------------------------- lifecycle

    def bind(self) -> None:
        """Create the ROUTER socket and bind it to llmd's own listening socket (`Listener`)."""
        bound = bind_router(self._context, self.options, self.address, self._on_connection_closed)
        self._router, self.transport.socket, self.gate = bound, bound.socket, bound.gate

    def request_drain(self, now: bool = False, timeout_s: float | None = None) -> None:
        """Begin a graceful (or immediate) shutdown; safe from any thread or signal handler."""
        self.outbox.post(Drain(now, timeout_s))

    def serve_forever(self) -> None:
        """Run the I/O loop until drained, then stop the threads and close the socket."""
        if self._router is None:
            self.bind()
        socket, gate = self.transport.socket, self.gate
        assert socket is not None and gate is not None  # bind() sets them
        self.engine_loop.start()  # on the forward pass's cores, if pinned
        if self.placement is not None:
            pin_current_thread(self.placement.serving_cpu_ids)  # and the threads started next
        self.text_worker.start()
        gate.start()
        poller = zmq.Poller()
        poller.register(socket, zmq.POLLIN)
        poller.register(self.outbox.fileno(), zmq.POLLIN)
        logger.info("serving %s on %s (pid %d)", self.facts.model, self.address, os.getpid())
        try:
            while not self._is_stopped:
                events = dict(poller.poll(self.stats.poll_timeout_ms(POLL_INTERVAL_MS)))
                if socket in events:
                    for peer, data in self.transport.receive():
                        self._on_message(peer, data)
                for item in batched(self.outbox.drain()):
                    self._on_outbox_item(item)
                self._check_threads()
                self.transport.send_keepalives(set(self.routes.peers()) | self.stats.peers())
                self.stats.run_due()
                self._check_drain()
        finally:
            self._close()

    def _close(self) -> None:
        for peer, client_id in self.drain.requesters:
            self.transport.send_message(peer, Ack(client_id, f"stopped: {self.drain.summary()}"))
        self.text_worker.stop()
        self.engine_loop.stop()
        close_router(self._router, self._context, self.address)
        self.outbox.close()
        logger.info("daemon stopped")

    # ---------------------------------------------------------------- incoming

    def _on_message(self, peer: bytes, data: dict[str, object]) -> None:
        client_id = message_id(data)
        try:
            message = parse_message(data, CLIENT_MESSAGE_TYPES)
            self._dispatch(peer, message)
        except LLMDError as error:
            self.transport.reply_error(peer, client_id, error)
        except Exception as error:  # a bug handling one message must not stop the daemon
            logger.exception("failed to handle a %s message", data.get("type"))
            self.transport.reply_error(peer, client_id, LLMDError(f"internal error: {error}"))

    def _dispatch(self, peer: bytes, message: WireMessage) -> None:
        if isinstance(message, GenerateRequest):
            max_queued = self.options.max_queued_requests
            refusal = generate_refusal(peer, message, self.serving, self.routes, max_queued)
            if refusal is not None:
                raise refusal
            self.in_flight.start(peer, message)
        elif isinstance(message, AbortRequest):
            self.in_flight.abort(peer, message.id)
        elif isinstance(message, StatsRequest):
            self.stats.request(peer, message)
        elif isinstance(message, SubscribeRequest):
            self.stats.subscribe(peer, message)
        elif isinstance(message, UnsubscribeRequest):
            self.stats.unsubscribe(peer, message.id)
            self.transport.send_message(peer, Ack(message.id, "unsubscribed"))
        elif isinstance(message, HealthRequest):
            self.transport.send_message(peer, health_reply(self, peer, message))
        elif isinstance(message, (TokenizeRequest, DetokenizeRequest)):
            self.text_worker.answer_tokenizer_request(peer, message)
        elif isinstance(message, ShutdownRequest):
            self.transport.send_message(peer, Ack(message.id, "draining"))
            self._on_drain(Drain(message.now, message.timeout_s, (peer, message.id)))
        elif isinstance(message, FlushCacheRequest):
            flush_cache(self.engine_loop, self.outbox, peer, message.id)

    # ---------------------------------------------------------------- outgoing

    def _on_outbox_item(self, item: DrainedItem) -> None:
        if isinstance(item, SendBatch):
            self.in_flight.deliver(item)
        elif isinstance(item, SnapshotReady):
            self.stats.on_ready(item)
        elif isinstance(item, EngineDied):
            self._on_engine_death(item.message)
        elif isinstance(item, Drain):
            self._on_drain(item)
        elif isinstance(item, EngineWarm):
            self.serving.on_warm(item.seconds)
        elif isinstance(item, ConnectionClosed):
            self._is_close_posted = False
            self.transport.on_disconnect()  # a connection closed: find whose, now

    def _on_connection_closed(self) -> None:
        """The gate's thread saw a connection close; one wake-up of the I/O thread is enough."""
        if not self._is_close_posted:
            self._is_close_posted = True
            self.outbox.post(ConnectionClosed())

    def _on_peer_gone(self, peer: bytes) -> None:
        """The peer disconnected (or stopped reading): abort its requests, drop its streams."""
        self.in_flight.on_peer_gone(peer)
        self.stats.drop_peer(peer)

    # ---------------------------------------------------------------- failure and drain

    def _check_threads(self) -> None:
        if not self.serving.is_dead and not self.text_worker.is_alive:
            self._on_engine_death("the text worker thread stopped")

    def _on_engine_death(self, message: str) -> None:
        """Fail every in-flight request with engine_dead; keep answering health and stats."""
        self.serving.on_engine_death(message)
        self.stats.answer_pending()
        self.in_flight.fail_all(EngineDeadError(f"the engine has died ({message})"))

    def _on_drain(self, drain: Drain) -> None:
        self.drain.request(drain, len(self.routes), time.monotonic())
        self.serving.on_drain()
        self._check_drain()

    def _check_drain(self) -> None:
        step = self.drain.next_step(len(self.routes), time.monotonic())
        if step is DrainStep.ABORT_ALL:
            self.in_flight.abort_all()
        elif step is DrainStep.FAIL_ALL:
            error = ShuttingDownError("the daemon stopped before this request finished")
            self.in_flight.fail_all(error)
        if step in (DrainStep.STOP, DrainStep.FAIL_ALL):
            self._is_stopped = True
