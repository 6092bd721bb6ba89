"""A client that stops reading a long stream must neither block the daemon nor grow it
without bound; other clients keep being served.

The I/O thread never blocks on a send (non-blocking, ROUTER_MANDATORY): up to the per-peer
high-water mark a slow peer's messages wait in ZeroMQ's queue, which bounds the memory it
can hold; past it the peer is treated as gone, its requests are aborted, and a health
probe of its requests names them unknown (the client then raises RequestLostError instead
of waiting forever). The mark bounds replies too: a health reply to a peer whose queue is
still full is dropped like any other message, so a peer learns of its lost requests by
probing once it has read what was queued for it (as the client does: it probes only after
a silence). (HTTP: tests/http/test_slow_reader_http.py.)
"""

from __future__ import annotations

import time
from typing import Any

import zmq

from llmd.client import Accepted, Client, Finished, TokenDelta
from llmd.daemon import router_socket
from llmd.protocol import HealthReply
from tests.daemon.harness import FinishedRequests, RawPeer, inprocess_daemon

NUM_SLOW_REQUESTS = 8
MAX_TOKENS = 200
QUIET_S = 3.0
"""Silence after which a reading peer has everything queued for it (all of it is local)."""


def _generate(client_id: str, logprobs: int | None = None) -> dict[str, Any]:
    params = {"temperature": 0.0, "max_tokens": MAX_TOKENS, "ignore_eos": True}
    if logprobs is not None:
        params["logprobs"] = logprobs
    return {
        "type": "generate",
        "v": 1,
        "id": client_id,
        "stream": True,
        "prompt": f"never read {client_id}",
        "sampling_params": params,
    }


def _slow_peer(address: str) -> RawPeer:
    """A DEALER that takes as little as it can off the wire until it reads."""
    return RawPeer(address, {zmq.RCVHWM: 1, zmq.RCVBUF: 4096})


def _wait_idle(address: str, timeout_s: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    with Client(address) as client:
        while True:
            snapshot = client.stats(include_block_map=False)
            queue = snapshot.queue
            if queue.running == queue.waiting == snapshot.kv.num_used == 0:
                return snapshot
            assert time.monotonic() < deadline, queue
            time.sleep(0.05)


def _wait_finished_by_length(address: str, count: int, timeout_s: float = 30.0) -> None:
    """Wait until `count` requests are counted as finished by length (the daemon counts a
    finish after the engine freed its KV, so an idle engine may not have counted it yet)."""
    deadline = time.monotonic() + timeout_s
    with Client(address) as client:
        while True:
            snapshot = client.stats(include_requests=False, include_block_map=False)
            num_finished = snapshot.totals.finished.get("length", 0)
            if num_finished >= count:
                return
            assert time.monotonic() < deadline, f"{num_finished} of {count} finished by length"
            time.sleep(0.05)


def _others_are_served(address: str) -> None:
    """Requests of another connection complete, and health answers, while one peer stalls."""
    with Client(address, timeout=30) as client:
        for index in range(5):
            started = time.monotonic()
            completion = client.generate(
                f"meanwhile {index}", params={"max_tokens": 8, "ignore_eos": True}
            )
            assert len(completion.token_ids) == 8
            assert time.monotonic() - started < 15.0
        assert client.health()["is_healthy"]


def test_an_unread_stream_holds_up_nobody_and_is_delivered_whole_later(tiny_model_dir, tmp_path):
    address = f"ipc://{tmp_path / 'r.sock'}"
    with inprocess_daemon(tiny_model_dir, address):
        slow = _slow_peer(address)
        client_ids = [f"slow{index}" for index in range(NUM_SLOW_REQUESTS)]
        try:
            for client_id in client_ids:
                slow.send_map(_generate(client_id))
            _others_are_served(address)
            _wait_idle(address)  # its requests ran to the end, unread
            _wait_finished_by_length(address, NUM_SLOW_REQUESTS + 5)
            events: dict[str, list[Any]] = {client_id: [] for client_id in client_ids}
            num_finished = 0
            while num_finished < NUM_SLOW_REQUESTS:
                reply = slow.receive(timeout=10)
                assert reply is not None, {k: len(v) for k, v in events.items()}
                events[reply.id].append(reply)
                num_finished += isinstance(reply, Finished)
        finally:
            slow.close()
    for client_id, received in events.items():  # nothing was dropped, nothing reordered
        assert isinstance(received[0], Accepted)
        finished = received[-1]
        assert isinstance(finished, Finished) and finished.finish_reason == "length"
        deltas = [event for event in received if isinstance(event, TokenDelta)]
        assert [t for d in deltas for t in d.token_ids] == finished.token_ids, client_id
        assert len(finished.token_ids) == MAX_TOKENS


def test_a_peer_past_the_high_water_mark_is_dropped_and_its_requests_aborted(
    tiny_model_dir, tmp_path, monkeypatch
):
    """What an unread peer can hold is bounded: at the (here tiny) mark it is let go."""
    monkeypatch.setattr(router_socket, "SEND_HIGH_WATER_MARK", 20)
    address = f"ipc://{tmp_path / 'h.sock'}"
    with inprocess_daemon(tiny_model_dir, address) as daemon:
        finished = FinishedRequests(daemon.engine)
        slow = _slow_peer(address)
        client_ids = [f"slow{index}" for index in range(NUM_SLOW_REQUESTS)]
        try:
            for client_id in client_ids:  # logprobs make each message ~0.5 kB
                slow.send_map(_generate(client_id, logprobs=5))
            deadline = time.monotonic() + 30
            while not any(r.finish_reason.value == "abort" for r in finished.since(0)):
                assert time.monotonic() < deadline, "the unread peer was never dropped"
                time.sleep(0.05)
            _others_are_served(address)
            _wait_idle(address)
            aborted = [r for r in finished.since(0) if r.finish_reason.value == "abort"]
            assert aborted and all(r.num_output_tokens < MAX_TOKENS for r in aborted)
            # Once it reads, the peer learns its requests are gone rather than waiting on. It
            # reads first: until then its queue may still be at the mark (the daemon's queue
            # for it, and the socket buffers behind it, full), and a reply would be dropped.
            deadline = time.monotonic() + 60
            while slow.receive(timeout=QUIET_S) is not None:  # what was queued before the drop
                assert time.monotonic() < deadline, "the unread peer's queue never ran dry"
            slow.send_map({"type": "health", "v": 1, "id": "probe", "request_ids": client_ids})
            reply = slow.receive(timeout=30)
            assert isinstance(reply, HealthReply) and reply.id == "probe", reply
            assert reply.is_healthy
            lost = set(reply.unknown_request_ids)
            assert lost and lost <= set(client_ids)
        finally:
            slow.close()
