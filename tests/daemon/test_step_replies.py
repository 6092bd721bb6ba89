"""One engine step's replies to a peer leave the daemon as one message, a frame each.

The text thread posts a step's replies to the I/O thread together, so the I/O thread
never wakes between two of them and sends one multipart message per peer and step: a
client with 4 streams reads one message per step, not four.
"""

from __future__ import annotations

from typing import Any

import zmq

from llmd.protocol import Finished, TokenDelta, decode_daemon_message
from llmd.protocol.codec import pack
from tests.daemon.harness import inprocess_daemon

NUM_STREAMS = 4


def _generate(client_id: str, max_tokens: int) -> dict[str, Any]:
    return {
        "type": "generate",
        "v": 1,
        "id": client_id,
        "prompt": f"stream {client_id}",
        "stream": True,
        "sampling_params": {"temperature": 0.0, "max_tokens": max_tokens, "ignore_eos": True},
    }


def test_every_step_reaches_a_peer_as_one_message(tiny_model_dir, tmp_path):
    address = f"ipc://{tmp_path / 'd.sock'}"
    with inprocess_daemon(tiny_model_dir, address):
        socket = zmq.Context.instance().socket(zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 0)
        socket.connect(address)
        try:
            ids = [f"s{index}" for index in range(NUM_STREAMS)]
            for client_id in ids:
                socket.send(pack(_generate(client_id, max_tokens=60)))
            started: set[str] = set()
            finished: set[str] = set()
            all_running: list[set[str]] = []  # per message: whose tokens it carried
            while len(finished) < NUM_STREAMS:
                assert socket.poll(30_000), f"no reply; finished {sorted(finished)}"
                messages = [decode_daemon_message(frame) for frame in socket.recv_multipart()]
                deltas = {m.id for m in messages if isinstance(m, TokenDelta)}
                was_all_running = len(started) == NUM_STREAMS and not finished
                started |= deltas
                finished |= {m.id for m in messages if isinstance(m, Finished)}
                if was_all_running and deltas and not finished:
                    all_running.append(deltas)
        finally:
            socket.close(linger=0)
    assert len(all_running) >= 20  # steps while every stream ran, each one message
    assert all(deltas == set(ids) for deltas in all_running), all_running
