"""Which client request is which engine request: (peer identity, client id) <-> engine id.

Owned by the I/O thread; it bounds the number of requests in flight, routes aborts, and
finds a vanished peer's requests so they can be aborted and their KV freed.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

RouteKey = tuple[bytes, str]


class RouteTable:
    """Every in-flight request, keyed both ways."""

    def __init__(self) -> None:
        self._engine_ids: dict[RouteKey, str] = {}
        self._keys: dict[str, RouteKey] = {}
        self._by_peer: defaultdict[bytes, set[str]] = defaultdict(set)
        self._counter = itertools.count(1)

    def __len__(self) -> int:
        return len(self._engine_ids)

    def add(self, peer: bytes, client_id: str) -> str:
        """Register a new request and return the unique engine id assigned to it."""
        engine_id = f"req-{next(self._counter)}"
        key = (peer, client_id)
        self._engine_ids[key] = engine_id
        self._keys[engine_id] = key
        self._by_peer[peer].add(client_id)
        return engine_id

    def engine_id(self, peer: bytes, client_id: str) -> str | None:
        """The engine id of a peer's in-flight request, if it is still in flight."""
        return self._engine_ids.get((peer, client_id))

    def key_of(self, engine_id: str) -> RouteKey | None:
        """The peer and client id of an engine request."""
        return self._keys.get(engine_id)

    def release(self, key: RouteKey) -> None:
        """Forget a request after its last message."""
        engine_id = self._engine_ids.pop(key, None)
        if engine_id is None:
            return
        del self._keys[engine_id]
        peer_ids = self._by_peer[key[0]]
        peer_ids.discard(key[1])
        if not peer_ids:
            del self._by_peer[key[0]]

    def of_peer(self, peer: bytes) -> list[tuple[str, str]]:
        """(client id, engine id) of each of a peer's requests."""
        return [(cid, self._engine_ids[(peer, cid)]) for cid in self._by_peer.get(peer, ())]

    def peers(self) -> list[bytes]:
        """Every peer with requests in flight."""
        return list(self._by_peer)

    def has_peer(self, peer: bytes) -> bool:
        """True while the peer has requests in flight."""
        return peer in self._by_peer

    def items(self) -> list[tuple[RouteKey, str]]:
        """Every (key, engine id)."""
        return list(self._engine_ids.items())
