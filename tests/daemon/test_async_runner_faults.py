"""Runner failures and stalls mid-serving, with async scheduling off and on.

A runner whose launch, or the reading of a launched step's samples, raises must fail only
the requests of the steps concerned, each with a typed error; every other accepted
request still ends exactly once, and the daemon serves on. A runner that stalls (a slow
device) must not stop the daemon answering, nor lose a request.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from llmd.client import Accepted, Client, Finished, TokenDelta
from llmd.engine.request import Request
from llmd.protocol import ErrorReply, Keepalive
from llmd.sampling_params import SamplingParams
from tests.daemon.harness import RawPeer, RunnerFault, inprocess_daemon
from tests.scheduling_mode import MODES, mode_id

MAX_TOKENS = 30
TERMINAL_TIMEOUT_S = 60.0
STALL_S = 12.0
"""How long the stalled runner blocks; the daemon must answer well within it."""


def _generate(client_id: str, max_tokens: int = MAX_TOKENS, **fields: Any) -> dict[str, Any]:
    return {
        "type": "generate",
        "v": 1,
        "id": client_id,
        "stream": True,
        "prompt": f"request {client_id}",
        "sampling_params": {"temperature": 0.0, "max_tokens": max_tokens, "ignore_eos": True},
        **fields,
    }


def _collect(peer: RawPeer, client_ids: list[str], on_reply=None) -> dict[str, Any]:
    """Read until every request ended; each id's events, checked to end exactly once."""
    events: dict[str, list[Any]] = {client_id: [] for client_id in client_ids}
    ended: set[str] = set()
    deadline = time.monotonic() + TERMINAL_TIMEOUT_S
    while ended != set(client_ids):
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"never ended: {sorted(set(client_ids) - ended)}"
        reply = peer.receive(timeout=remaining, skip_keepalives=on_reply is None)
        if on_reply is not None:
            on_reply(reply)
        if reply is None or isinstance(reply, Keepalive):
            continue
        assert reply.id not in ended, f"a message after the end of {reply.id}: {reply}"
        events[reply.id].append(reply)
        if isinstance(reply, (Finished, ErrorReply)):
            ended.add(reply.id)
    late = peer.receive(timeout=0.5)  # nothing may follow a request's last message
    assert late is None, late
    return events


def _assert_serving_and_idle(address: str, engine: Any) -> None:
    with Client(address) as client:
        assert client.health()["is_healthy"]
        completion = client.generate(
            "after the fault", params={"max_tokens": 5, "ignore_eos": True}
        )
        assert len(completion.token_ids) == 5 and completion.finish_reason == "length"
        deadline = time.monotonic() + 20
        while True:
            snapshot = client.stats(include_requests=False, include_block_map=False)
            if snapshot.queue.running == snapshot.kv.num_used == 0:
                break
            assert time.monotonic() < deadline, snapshot.queue
            time.sleep(0.02)
    assert engine.num_integrity_errors == 0


@pytest.mark.parametrize("where", ["launch", "resolve"])
@pytest.mark.parametrize("is_async", MODES, ids=mode_id)
def test_a_runner_failure_mid_serving_fails_only_its_steps_requests(
    tiny_model_dir, tmp_path, is_async, where
):
    address = f"ipc://{tmp_path / 'f.sock'}"
    engine = {"async_scheduling": is_async, "max_num_seqs": 2}
    with inprocess_daemon(tiny_model_dir, address, engine=engine) as daemon:
        fault = RunnerFault(daemon.engine.runner, nth=6, where=where)
        peer = RawPeer(address)
        client_ids = [f"r{index}" for index in range(5)]
        try:
            for client_id in client_ids:
                peer.send_map(_generate(client_id))
            events = _collect(peer, client_ids)
        finally:
            peer.close()
        assert fault.fired.is_set()
        failed = {cid: e[-1] for cid, e in events.items() if isinstance(e[-1], ErrorReply)}
        finished = {cid: e[-1] for cid, e in events.items() if isinstance(e[-1], Finished)}
        assert 1 <= len(failed) <= 2, failed  # at most max_num_seqs were running
        for client_id, error in failed.items():
            assert error.code == "request_failed", error
            assert f"injected {where} failure" in error.message
            assert any(isinstance(e, Accepted) for e in events[client_id])
        for client_id, reply in finished.items():  # the rest ran to the end, untouched
            assert reply.finish_reason == "length", (client_id, reply)
            deltas = [e for e in events[client_id] if isinstance(e, TokenDelta)]
            assert reply.token_ids == [t for d in deltas for t in d.token_ids]
            assert len(reply.token_ids) == MAX_TOKENS
        assert len(failed) + len(finished) == len(client_ids)
        _assert_serving_and_idle(address, daemon.engine)


@pytest.mark.parametrize("is_async", MODES, ids=mode_id)
def test_a_stalled_runner_keeps_the_daemon_answering_and_loses_nothing(
    tiny_model_dir, tmp_path, is_async
):
    address = f"ipc://{tmp_path / 's.sock'}"
    with inprocess_daemon(tiny_model_dir, address, engine={"async_scheduling": is_async}) as daemon:
        fault = RunnerFault(daemon.engine.runner, nth=4, where="resolve", stall_s=STALL_S)
        peer = RawPeer(address)
        client_ids = ["a", "b", "c"]
        seen_during_stall: list[Any] = []

        def during_stall(reply: Any) -> None:
            if fault.fired.is_set() and not fault.stall_ended.is_set():
                seen_during_stall.append(reply)

        health_during_stall: list[dict] = []

        def probe_health() -> None:
            fault.fired.wait(30)
            with Client(address, timeout=30) as client:
                while not fault.stall_ended.is_set():
                    started = time.monotonic()
                    health = client.health()
                    took_s = time.monotonic() - started
                    during = not fault.stall_ended.is_set()  # answered before the stall ended
                    health_during_stall.append({**health, "took_s": took_s, "during": during})
                    time.sleep(0.2)

        prober = threading.Thread(target=probe_health)
        prober.start()
        try:
            for client_id in client_ids:
                peer.send_map(_generate(client_id))
            events = _collect(peer, client_ids, on_reply=during_stall)
        finally:
            peer.close()
            prober.join(30)
        assert fault.stall_ended.is_set()
        for client_id in client_ids:
            reply = events[client_id][-1]
            assert isinstance(reply, Finished) and reply.finish_reason == "length", reply
            assert len(reply.token_ids) == MAX_TOKENS
        # The I/O thread answered throughout, and told the waiting client it still works: an
        # I/O thread held up by the stall would answer a probe only once the stall is over.
        assert sum(h["during"] for h in health_during_stall) >= 3, health_during_stall
        assert all(h["is_healthy"] and h["num_in_flight"] == 3 for h in health_during_stall)
        assert all(h["took_s"] < STALL_S / 2 for h in health_during_stall), health_during_stall
        assert any(isinstance(reply, Keepalive) for reply in seen_during_stall), seen_during_stall
        _assert_serving_and_idle(address, daemon.engine)


@pytest.mark.parametrize("is_async", MODES, ids=mode_id)
def test_a_scheduler_stall_fails_the_head_and_the_pool_recovers(tiny_model_dir, tmp_path, is_async):
    """A leak (a bookkeeping bug) that leaves too few blocks to admit the queue head: the
    head fails with a typed error, the queue moves on, and the pool is rebuilt at idle."""
    address = f"ipc://{tmp_path / 'k.sock'}"
    engine = {"async_scheduling": is_async, "num_blocks": 32, "block_size": 4, "max_model_len": 128}
    with inprocess_daemon(tiny_model_dir, address, engine=engine) as daemon:
        params = SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True)
        leaked = Request("leak", [1] * 120, params)
        assert daemon.engine.block_manager.allocate_slots(leaked, 120)  # 30 of 32 blocks
        peer = RawPeer(address)
        try:
            peer.send_map(_generate("stuck", 2, prompt=None, prompt_token_ids=[5] * 20))
            peer.send_map(_generate("after", 2, prompt=None, prompt_token_ids=[5, 6, 7]))
            events = _collect(peer, ["stuck", "after"])
        finally:
            peer.close()
        stuck, after = events["stuck"][-1], events["after"][-1]
        assert isinstance(stuck, ErrorReply) and stuck.code == "request_failed", stuck
        assert "SchedulerStallError" in stuck.message
        assert isinstance(after, Finished) and len(after.token_ids) == 2, after
        with Client(address) as client:  # the leaked blocks were found and freed at idle
            again = client.generate(prompt_token_ids=[5] * 20, params=params)
            assert len(again.token_ids) == 2
        assert daemon.engine.num_integrity_errors == 1
