"""The requests in flight and how each ends: aborted, failed, or released after its last message.

Owned by the I/O thread. A request is routed when its generate is taken and released once
its last message is sent; a vanished peer's requests are aborted (their KV freed) and the
peer is marked gone until its last one is released, so nothing more is sent to it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from llmd.daemon.outbox import SendBatch
from llmd.daemon.peer_transport import PeerTransport
from llmd.daemon.routes import RouteKey, RouteTable
from llmd.daemon.text_worker import AbortJob, NewRequest, TextJob
from llmd.errors import LLMDError
from llmd.protocol import GenerateRequest

logger = logging.getLogger("llmd.daemon.server")


class InFlightRequests:
    """Starts, aborts, fails and releases the routed requests."""

    def __init__(
        self, routes: RouteTable, transport: PeerTransport, submit: Callable[[TextJob], None]
    ) -> None:
        self.routes = routes
        self._transport = transport
        self._submit = submit
        """Hands a NewRequest or AbortJob to the text thread."""

    def start(self, peer: bytes, message: GenerateRequest) -> None:
        """Route a generate the daemon took and hand it to the text thread."""
        engine_id = self.routes.add(peer, message.id)
        self._submit(NewRequest(engine_id, peer, message, time.monotonic()))

    def abort(self, peer: bytes, client_id: str) -> None:
        """Abort a peer's request (unknown or finished ids are ignored)."""
        engine_id = self.routes.engine_id(peer, client_id)
        if engine_id is not None:
            self._submit(AbortJob(engine_id))

    def abort_all(self) -> None:
        """Abort every request; each still ends with its last message."""
        for _, engine_id in self.routes.items():
            self._submit(AbortJob(engine_id))

    def fail_all(self, error: LLMDError) -> None:
        """End every request now with `error` as its last message."""
        for key, _ in self.routes.items():
            self._transport.reply_error(key[0], key[1], error)
            self.release(key)

    def deliver(self, batch: SendBatch) -> None:
        """Send a peer's replies as one message, then release the requests it ended: a
        request is forgotten only once its last message was handed to the socket."""
        self._transport.send_frames(batch.peer, [send.payload for send in batch.sends])
        for send in batch.sends:
            if send.release_key is not None:
                self.release(send.release_key)

    def release(self, key: RouteKey) -> None:
        """Forget a request after its last message; a gone peer's last one clears it."""
        self.routes.release(key)
        gone_peers = self._transport.gone_peers
        if key[0] in gone_peers and not self.routes.has_peer(key[0]):
            gone_peers.discard(key[0])

    def on_peer_gone(self, peer: bytes) -> None:
        """The peer disconnected (or stopped reading): abort its requests."""
        routes = self.routes.of_peer(peer)
        logger.info("peer %s is gone; aborting %d request(s)", peer.hex(), len(routes))
        if routes:
            self._transport.gone_peers.add(peer)
        for _, engine_id in routes:
            self._submit(AbortJob(engine_id))
