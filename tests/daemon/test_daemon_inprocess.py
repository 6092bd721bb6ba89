"""The Daemon class on a thread of the test process: failure injection and the stats contract.

The engine's step or runner can be replaced from the test while the daemon serves, which
is how engine death and per-request failures are provoked.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time

import pytest

from llmd.client import Accepted, AsyncClient, Client, Finished, PrefillProgress, TokenDelta
from llmd.errors import EngineDeadError, InvalidParameterError, OverloadedError
from llmd.protocol import SNAPSHOT_VERSION, ErrorReply, RequestFailedError, StatsSnapshot
from llmd.sampling_params import SamplingParams
from tests.daemon.harness import RawPeer, daemon_env, inprocess_daemon, run_cli

LONG = SamplingParams(temperature=0.0, max_tokens=200, ignore_eos=True)
SHORT = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True, logprobs=2)


@pytest.fixture(scope="module")
def daemon(tiny_model_dir, tmp_path_factory):
    """One in-process daemon with a small step budget (long prompts prefill in chunks)."""
    address = f"ipc://{tmp_path_factory.mktemp('inproc') / 'd.sock'}"
    with inprocess_daemon(
        tiny_model_dir,
        address,
        engine={"max_num_batched_tokens": 32},
        slo_ttft_ms=60_000.0,
        slo_tpot_ms=60_000.0,
    ) as served:
        yield served


def _address(daemon) -> str:
    return str(daemon.address)


def _first_token(stream) -> None:
    while not isinstance(next(stream), TokenDelta):
        pass


def test_long_prompt_reports_prefill_progress(daemon):
    prompt_token_ids = [(i * 7) % 300 + 3 for i in range(200)]
    with Client(_address(daemon)) as client:
        events = list(client.stream(prompt_token_ids=prompt_token_ids, params=SHORT))
    progress = [e for e in events if isinstance(e, PrefillProgress)]
    assert isinstance(events[0], Accepted) and events[0].num_prompt_tokens == 200
    assert 1 <= len(progress) <= 3
    computed = [e.num_computed_tokens for e in progress]
    assert computed == sorted(computed) and all(0 < c < 200 for c in computed)
    assert isinstance(events[-1], Finished) and len(events[-1].token_ids) == 6
    tokens = [e for e in events if isinstance(e, TokenDelta)]
    assert all(len(e.logprobs or []) == len(e.token_ids) for e in tokens)


def test_stats_snapshot_contract(daemon):
    with Client(_address(daemon)) as client:
        stream = client.stream("watch me run", params=LONG)
        _first_token(stream)
        engine_id = next(
            r.request_id for r in client.stats().requests or () if r.client_id is not None
        )
        snapshot = client.stats(timeline_request_id=engine_id)
        stream.close()
    assert isinstance(snapshot, StatsSnapshot) and snapshot.snapshot_version == SNAPSHOT_VERSION
    assert snapshot.daemon.pid == os.getpid() and snapshot.daemon.state == "ok"
    assert snapshot.daemon.max_num_seqs >= 1 and snapshot.daemon.attention_backend
    assert snapshot.goodput.slo_ttft_ms == 60_000.0
    assert (snapshot.hardware.decode_gb_per_s or 0) > 0
    assert snapshot.step.forward_ms is not None and snapshot.step.time.count >= 1
    assert snapshot.queue is not None and snapshot.queue.running >= 1
    assert snapshot.kv is not None and snapshot.kv.num_used >= 1
    assert snapshot.requests is not None and snapshot.num_requests == len(snapshot.requests)
    row = next(r for r in snapshot.requests if r.request_id == engine_id)
    assert row.state == "running" and row.num_generated_tokens >= 1
    assert row.ttft_s is not None and 0 < row.decode_progress < 1
    timeline = snapshot.timeline
    assert timeline is not None
    assert timeline.request_id == engine_id and timeline.events[0][1] == "prefill"
    assert timeline.first_token_s is not None and timeline.first_scheduled_s is not None
    assert timeline.first_token_s >= timeline.first_scheduled_s >= 0
    block_map = snapshot.block_map
    assert block_map is not None
    cells = block_map.cells()
    owner_index = block_map.owners.index(engine_id)
    assert owner_index in cells and len(cells) == block_map.num_cells == 256
    wire = snapshot.to_wire()  # what a reader without llmd's classes gets
    assert (
        wire["kv"]["usage"] == snapshot.kv.usage
        and wire["latency"]["ttft"]["p50"] == snapshot.latency.ttft.p50
    )
    assert wire["requests"][0]["request_id"] == snapshot.requests[0].request_id


def test_goodput_and_latency_after_requests(daemon):
    with Client(_address(daemon)) as client:
        completion = client.generate("count me", params=SHORT)
        snapshot = client.stats(include_requests=False, include_block_map=False)
    assert completion.logprobs is not None and len(completion.logprobs) == 6
    assert completion.usage == {
        "prompt_tokens": completion.num_prompt_tokens,
        "completion_tokens": 6,
        "cached_tokens": 0,
    }
    assert snapshot.goodput.fraction == 1.0
    assert snapshot.latency.ttft.count >= 1
    assert snapshot.throughput.generation_tokens_per_s > 0
    assert snapshot.requests is None and snapshot.block_map is None


def test_chat_messages_and_validation_errors(daemon):
    with Client(_address(daemon)) as client:
        completion = client.generate(
            messages=[{"role": "user", "content": "hi"}], params={"max_tokens": 3}
        )
        assert completion.num_prompt_tokens > 1
        with pytest.raises(InvalidParameterError) as error:
            client.generate(messages=[{"content": "no role"}])
        assert error.value.parameter == "messages"
        with pytest.raises(InvalidParameterError) as error:
            client.generate(prompt_token_ids=[1, 100_000])
        assert error.value.parameter == "prompt_token_ids"
        with pytest.raises(InvalidParameterError) as error:
            client.generate("x", prompt_token_ids=[1])
        assert error.value.parameter == "prompt"


def test_duplicate_request_id_is_refused(daemon):
    peer = RawPeer(_address(daemon))
    request = {
        "type": "generate",
        "v": 1,
        "id": "same",
        "prompt": "a",
        "sampling_params": {"max_tokens": 100, "ignore_eos": True},
    }
    peer.send_map(request)
    peer.send_map(request)
    while not isinstance(reply := peer.receive(), ErrorReply):
        assert isinstance(reply, (Accepted, TokenDelta))  # of the first request
    assert (reply.id, reply.code, reply.parameter) == ("same", "duplicate_request_id", "id")
    peer.send_map({"type": "abort", "v": 1, "id": "same"})
    while not isinstance(reply := peer.receive(), Finished):
        assert isinstance(reply, (Accepted, TokenDelta))
    assert reply.finish_reason == "abort"
    peer.close()


async def test_async_client_streams_aborts_and_subscribes(daemon):
    async with AsyncClient(_address(daemon)) as client:
        prompts = [f"async {i}" for i in range(8)]
        completions = await asyncio.gather(*(client.generate(p, params=SHORT) for p in prompts))
        assert [len(c.token_ids) for c in completions] == [6] * 8
        async with contextlib.aclosing(client.stream("stop early", params=LONG)) as stream:
            async for event in stream:
                if isinstance(event, TokenDelta):
                    break  # leaving the block closes the stream, which aborts it
        snapshots = []
        async with contextlib.aclosing(client.subscribe(100, include_block_map=False)) as stats:
            async for snapshot in stats:
                snapshots.append(snapshot)
                if snapshot.queue.running == 0 and len(snapshots) >= 2:
                    break
        assert snapshots[-1].kv.num_used == 0
        assert (await client.health())["is_healthy"]
    deadline = time.monotonic() + 10.0
    while daemon.stats.subscriptions and time.monotonic() < deadline:  # the unsubscribe is async
        time.sleep(0.01)
    assert not daemon.stats.subscriptions


def test_overload_is_refused_not_queued(tiny_model_dir, tmp_path):
    address = f"ipc://{tmp_path / 'o.sock'}"
    with inprocess_daemon(tiny_model_dir, address, max_queued_requests=3):
        peer = RawPeer(address)
        for index in range(6):
            peer.send_map(
                {
                    "type": "generate",
                    "v": 1,
                    "id": f"r{index}",
                    "prompt": "busy",
                    "sampling_params": {"max_tokens": 100, "ignore_eos": True},
                }
            )
        first_replies: dict[str, object] = {}
        while len(first_replies) < 6:
            reply = peer.receive()
            assert reply is not None
            first_replies.setdefault(reply.id, reply)
        refused = sorted(k for k, r in first_replies.items() if isinstance(r, ErrorReply))
        assert refused == ["r3", "r4", "r5"]
        assert {first_replies[k].code for k in refused} == {OverloadedError.code}
        peer.close()


def test_runner_failure_fails_only_that_step(tiny_model_dir, tmp_path):
    address = f"ipc://{tmp_path / 'f.sock'}"
    with inprocess_daemon(tiny_model_dir, address) as served:
        runner = served.engine.runner
        launch = runner.launch  # both scheduling modes launch (sync: execute = launch + resolve)

        def fail_once(plan):
            runner.launch = launch
            raise RuntimeError("injected device error")

        runner.launch = fail_once
        with Client(address) as client:
            with pytest.raises(RequestFailedError, match="injected device error"):
                client.generate("unlucky", params=SHORT)
            assert len(client.generate("lucky", params=SHORT).token_ids) == 6
            assert client.health()["is_healthy"]


def test_engine_death_fails_in_flight_requests(tiny_model_dir, tmp_path):
    address = f"ipc://{tmp_path / 'e.sock'}"
    with inprocess_daemon(tiny_model_dir, address) as served, Client(address) as client:
        stream = client.stream("doomed", params=LONG)
        _first_token(stream)

        def broken_step():
            raise RuntimeError("scheduler bug")

        served.engine.step = broken_step
        with pytest.raises(EngineDeadError, match="scheduler bug"):
            for _ in stream:
                pass
        health = client.health()
        assert (health["status"], health["is_healthy"]) == ("dead", False)
        with pytest.raises(EngineDeadError):
            client.generate("anyone there?")
        assert client.stats().daemon.state == "dead"


def test_stop_command_drains_then_stops(tiny_model_dir, tmp_path):
    address = f"ipc://{tmp_path / 's.sock'}"
    with inprocess_daemon(tiny_model_dir, address) as served, Client(address) as client:
        stream = client.stream("finish me", params=LONG)
        _first_token(stream)
        result: dict[str, object] = {}
        stopper = threading.Thread(
            target=lambda: result.update(cli=run_cli(["stop", "--address", address], daemon_env()))
        )
        stopper.start()
        events = list(stream)  # the in-flight request still runs to its end
        stopper.join(30)
        assert isinstance(events[-1], Finished) and events[-1].finish_reason == "length"
        cli = result["cli"]
        assert cli.returncode == 0, cli.stderr
        assert f"stopped the llmd daemon at {address}" in cli.stdout
        deadline = time.monotonic() + 5
        while (tmp_path / "s.sock").exists() and time.monotonic() < deadline:
            time.sleep(0.02)  # the daemon removes its socket file last
        assert not (tmp_path / "s.sock").exists()
        assert served.state == "draining"
    missing = run_cli(["stop", "--address", address], daemon_env())
    assert missing.returncode != 0 and f"llmd serve --address {address}" in missing.stderr
