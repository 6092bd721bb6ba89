"""Many stats subscriptions at the shortest interval must not hold up generation.

One peer with 64 subscriptions at 50 ms used to queue 64 engine-state collections at every
tick, which the engine thread ran back to back instead of stepping. Now one collection
serves every due subscription, so between two steps the engine collects at most once.
"""

from __future__ import annotations

import llmd.daemon.engine_loop as engine_loop_module
from llmd.client import Client
from llmd.protocol import ErrorReply, StatsReply
from llmd.protocol.client_messages import MIN_SUBSCRIBE_INTERVAL_MS
from tests.daemon.harness import RawPeer, inprocess_daemon

NUM_SUBSCRIPTIONS = 64


def _subscribe(peer: RawPeer, subscription_id: str) -> None:
    peer.send_map(
        {
            "type": "subscribe",
            "v": 1,
            "id": subscription_id,
            "interval_ms": MIN_SUBSCRIBE_INTERVAL_MS,
        }
    )


def test_subscriptions_at_the_minimum_interval_do_not_stall_a_generate(
    tiny_model_dir, tmp_path, monkeypatch
):
    events: list[str] = []
    collect = engine_loop_module.collect_engine_state

    def counted_collect(*args):
        events.append("collect")
        return collect(*args)

    monkeypatch.setattr(engine_loop_module, "collect_engine_state", counted_collect)
    address = f"ipc://{tmp_path / 'stats.sock'}"
    with inprocess_daemon(tiny_model_dir, address) as daemon:
        step = daemon.engine.step

        def counted_step():
            events.append("step")
            return step()

        monkeypatch.setattr(daemon.engine, "step", counted_step)
        peer = RawPeer(address)
        try:
            for index in range(NUM_SUBSCRIPTIONS):
                _subscribe(peer, f"s{index}")
            answered: set[str] = set()
            while len(answered) < NUM_SUBSCRIPTIONS:
                reply = peer.receive(timeout=20)
                assert isinstance(reply, StatsReply), reply
                answered.add(reply.id)
            with Client(address, timeout=30) as client:
                completion = client.generate("hello", params={"max_tokens": 8, "ignore_eos": True})
            assert len(completion.token_ids) == 8
            _subscribe(peer, "one too many")
            while isinstance(reply := peer.receive(timeout=20), StatsReply):
                pass
            assert isinstance(reply, ErrorReply)
            assert (reply.id, reply.code) == ("one too many", "overloaded")
        finally:
            peer.close()
    first, last = events.index("step"), len(events) - 1 - events[::-1].index("step")
    collections_between_steps = "".join(e[0] for e in events[first : last + 1]).split("s")
    assert max(len(gap) for gap in collections_between_steps) <= 1
    assert events.count("step") >= 8
