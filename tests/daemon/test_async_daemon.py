"""Stop strings, aborts, disconnects and logprobs through the daemon, with async scheduling
off and on (both in every run), checked against the engine's own finished requests.

Regressions: with async scheduling, a request ended from outside the step (a stop string
matched by the text thread, an abort) while its next sample was in flight kept that
step's placeholder (-1) as its last token, so the daemon's per-request counts (the stats
rows, the finished-request histograms) were one too high; and it was listed twice among
the recent requests (once when it ended, once when its in-flight step was applied).

What a client is told (TokenDelta and Finished token ids, `usage`) counts the tokens it
was sent; the stats count the tokens the engine sampled, which may run a step or two ahead
of the text thread (a stop string is matched after the engine stepped on). So: delivered
tokens are a prefix of the engine's, usage equals delivered, stats equal the engine's, and
no id anywhere is the placeholder.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest

from llmd.client import Accepted, AsyncClient, Client, Finished, TokenDelta
from llmd.engine.request import PENDING_TOKEN_ID, Request
from tests.daemon.harness import (
    FinishedRequests,
    RawPeer,
    idle_snapshot,
    inprocess_daemon,
    stop_string_in,
)
from tests.scheduling_mode import MODES, mode_id

PROMPTS = ["Once upon a time", "The quick brown fox", "In the beginning", "Hello there"]
FREE = {"temperature": 0.0, "max_tokens": 40, "ignore_eos": True}
LONG = {"temperature": 0.0, "max_tokens": 200, "ignore_eos": True}
IDLE_TIMEOUT_S = 20.0


@dataclass
class Served:
    """An in-process daemon in one scheduling mode, and its engine's finished requests."""

    daemon: Any
    address: str
    is_async: bool
    finished: FinishedRequests

    def wait_idle(self) -> dict[str, Any]:
        """The first stats snapshot with nothing queued or running and no KV block in use."""
        return idle_snapshot(self.address, IDLE_TIMEOUT_S)

    def check_engine_side(self, request_id: str, delivered: list[int]) -> Request:
        """The engine's request holds no placeholder, starts with `delivered`, and the stats
        row counts exactly its sampled tokens."""
        request = self.finished.get(request_id)
        assert PENDING_TOKEN_ID not in request.all_token_ids, request.all_token_ids
        output = request.output_token_ids
        assert output[: len(delivered)] == delivered, (output, delivered)
        row = recent_row(self.wait_idle(), request_id)
        assert row.num_generated_tokens == len(output) == request.num_output_tokens
        return request


def recent_row(snapshot: dict[str, Any], request_id: str) -> dict[str, Any]:
    """The `recent` stats row of a finished request (checked to be its only one)."""
    rows = [row for row in snapshot.recent if row.request_id == request_id]
    assert len(rows) == 1, f"{request_id} has {len(rows)} recent rows: {rows}"
    return rows[0]


@pytest.fixture(scope="module", params=MODES, ids=mode_id)
def served(request, tiny_model_dir, tmp_path_factory):
    is_async = request.param
    address = f"ipc://{tmp_path_factory.mktemp(mode_id(is_async)) / 'd.sock'}"
    engine = {"async_scheduling": is_async, "max_model_len": 256}
    with inprocess_daemon(tiny_model_dir, address, engine=engine) as daemon:
        assert daemon.engine.async_scheduling is is_async
        yield Served(daemon, address, is_async, FinishedRequests(daemon.engine))


@pytest.fixture(scope="module")
def free_runs(served):
    """Each prompt's greedy output with no stop, and a stop string from its middle."""
    runs = {}
    with Client(served.address) as client:
        for prompt in PROMPTS:
            free = client.generate(prompt, params=FREE)
            runs[prompt] = (free, stop_string_in(free.text))
    assert sum(stop is not None for _, stop in runs.values()) >= 2, runs
    return runs


def _stream(client: Client, prompt: str, params: dict[str, Any]):
    """(Accepted, TokenDelta list, Finished) of one streamed request."""
    events = list(client.stream(prompt, params=params))
    accepted = next(e for e in events if isinstance(e, Accepted))
    deltas = [e for e in events if isinstance(e, TokenDelta)]
    assert isinstance(events[-1], Finished)
    return accepted, deltas, events[-1]


def _ids(deltas: list[TokenDelta]) -> list[int]:
    return [token_id for delta in deltas for token_id in delta.token_ids]


# ------------------------------------------------------------------ stop strings


def test_a_stop_string_ends_the_text_before_it_and_counts_no_placeholder(served, free_runs):
    with Client(served.address) as client:
        for prompt, (free, stop) in free_runs.items():
            if stop is None:
                continue
            expected_text = free.text[: free.text.index(stop)]
            params = {**FREE, "stop": [stop]}
            accepted, deltas, finished = _stream(client, prompt, params)
            delivered = _ids(deltas)
            text = "".join(delta.text for delta in deltas)
            assert PENDING_TOKEN_ID not in delivered
            assert (finished.finish_reason, finished.stop_reason) == ("stop", stop)
            assert text == expected_text and stop not in text
            assert finished.token_ids == delivered == free.token_ids[: len(delivered)]
            assert finished.usage["completion_tokens"] == len(delivered)
            served.check_engine_side(accepted.request_id, delivered)

            blocking = client.generate(prompt, params=params)
            assert (blocking.text, blocking.token_ids) == (text, delivered)
            assert (blocking.finish_reason, blocking.stop_reason) == ("stop", stop)
            assert blocking.usage["completion_tokens"] == len(delivered)
            served.check_engine_side(blocking.request_id, delivered)


def test_stop_strings_in_a_busy_batch_leave_no_placeholder(served, free_runs):
    """Stops land while other requests keep the engine stepping (a sample always in flight)."""
    stops = [stop for _, stop in free_runs.values() if stop is not None]

    async def run() -> list:
        async with AsyncClient(served.address) as client:
            background = [client.generate(f"busy {i}", params=LONG) for i in range(2)]
            stopped = [
                client.generate(prompt, params={**FREE, "max_tokens": 60, "stop": stops})
                for prompt in PROMPTS
                for _ in range(2)
            ]
            return await asyncio.gather(*background, *stopped)

    completions = asyncio.run(run())
    assert [len(c.token_ids) for c in completions[:2]] == [200, 200]
    for completion in completions:
        assert PENDING_TOKEN_ID not in completion.token_ids
        assert completion.usage["completion_tokens"] == len(completion.token_ids)
        if completion.finish_reason == "stop":
            assert completion.stop_reason in stops
            assert completion.stop_reason not in completion.text
        served.check_engine_side(completion.request_id, completion.token_ids)
    assert any(c.finish_reason == "stop" for c in completions[2:])


def test_a_stop_string_with_logprobs_keeps_one_logprob_per_delivered_token(served, free_runs):
    prompt, stop = next((p, stop) for p, (_, stop) in free_runs.items() if stop is not None)
    params = {**FREE, "stop": [stop], "logprobs": 2}
    with Client(served.address) as client:
        _, deltas, finished = _stream(client, prompt, params)
        blocking = client.generate(prompt, params=params)
    streamed = [entry for delta in deltas for entry in delta.logprobs or []]
    assert [entry["token_id"] for entry in streamed] == finished.token_ids == _ids(deltas)
    assert blocking.logprobs is not None
    assert [entry["token_id"] for entry in blocking.logprobs] == blocking.token_ids
    assert blocking.token_ids == finished.token_ids and finished.finish_reason == "stop"


# ------------------------------------------------------------------ aborts and disconnects


def test_an_abort_mid_stream_delivers_what_was_counted(served):
    with Client(served.address) as client:
        for num_before_abort in (1, 5):
            stream = client.stream("abort me", params=LONG)
            accepted = next(stream)
            assert isinstance(accepted, Accepted)
            delivered: list[int] = []
            aborted = False
            for event in stream:
                if isinstance(event, TokenDelta):
                    delivered += event.token_ids
                    if len(delivered) >= num_before_abort and not aborted:
                        client.abort(event.id)
                        aborted = True
                elif isinstance(event, Finished):
                    finished = event
            assert finished.finish_reason == "abort"
            assert PENDING_TOKEN_ID not in delivered
            assert finished.token_ids == delivered and len(delivered) < 200
            assert finished.usage["completion_tokens"] == len(delivered)
            request = served.check_engine_side(accepted.request_id, delivered)
            assert request.finish_reason.value == "abort"


def test_aborts_while_other_requests_run_leave_no_placeholder(served):
    peer = RawPeer(served.address)
    try:
        for index in range(6):
            peer.send_map(_generate(f"r{index}", f"prompt {index}", max_tokens=120))
        delivered: dict[str, list[int]] = {f"r{i}": [] for i in range(6)}
        engine_ids: dict[str, str] = {}
        finished: dict[str, Finished] = {}
        aborted: set[str] = set()
        while len(finished) < 6:
            reply = peer.receive(timeout=30)
            assert reply is not None, f"no reply; finished: {sorted(finished)}"
            if isinstance(reply, Accepted):
                engine_ids[reply.id] = reply.request_id
            elif isinstance(reply, TokenDelta):
                delivered[reply.id] += reply.token_ids
                is_due = reply.id in ("r1", "r3", "r5") and len(delivered[reply.id]) >= 3
                if is_due and reply.id not in aborted:
                    peer.send_map({"type": "abort", "v": 1, "id": reply.id})
                    aborted.add(reply.id)
            elif isinstance(reply, Finished):
                finished[reply.id] = reply
    finally:
        peer.close()
    for client_id, reply in finished.items():
        expected = "abort" if client_id in aborted else "length"
        assert reply.finish_reason == expected, (client_id, reply.finish_reason)
        assert reply.token_ids == delivered[client_id]
        assert PENDING_TOKEN_ID not in reply.token_ids
        assert reply.usage["completion_tokens"] == len(reply.token_ids)
        served.check_engine_side(engine_ids[client_id], reply.token_ids)


def test_a_client_that_disconnects_mid_stream_frees_everything(served):
    peer = RawPeer(served.address)
    for index in range(3):
        peer.send_map(_generate(f"gone{index}", f"vanishing {index}", max_tokens=200))
    engine_ids: dict[str, str] = {}
    num_tokens = 0
    # All three accepted and streaming (on one core the first may stream 6 tokens before
    # the third is accepted).
    while num_tokens < 6 or len(engine_ids) < 3:
        reply = peer.receive(timeout=30)
        assert reply is not None
        if isinstance(reply, Accepted):
            engine_ids[reply.id] = reply.request_id
        elif isinstance(reply, TokenDelta):
            num_tokens += len(reply.token_ids)
        assert not isinstance(reply, Finished)
    peer.close()  # no abort sent: the daemon must notice the connection is gone
    with Client(served.address) as client:
        assert len(client.generate("still serving", params=FREE).token_ids) == 40
    snapshot = served.wait_idle()
    for engine_id in engine_ids.values():
        request = served.finished.get(engine_id)
        assert request.finish_reason.value == "abort"
        assert PENDING_TOKEN_ID not in request.all_token_ids
        row = recent_row(snapshot, engine_id)
        assert row.num_generated_tokens == request.num_output_tokens < 200


def _generate(client_id: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    return {
        "type": "generate",
        "v": 1,
        "id": client_id,
        "prompt": prompt,
        "stream": True,
        "sampling_params": {"temperature": 0.0, "max_tokens": max_tokens, "ignore_eos": True},
    }


# ------------------------------------------------------------------ logprobs


def test_logprobs_match_the_tokens_streamed_or_not(served):
    params = {**FREE, "max_tokens": 12, "logprobs": 3}
    with Client(served.address) as client:
        _, deltas, finished = _stream(client, "log me", params)
        blocking = client.generate("log me", params=params)
    for delta in deltas:
        assert [entry["token_id"] for entry in delta.logprobs or []] == delta.token_ids
    streamed = [entry for delta in deltas for entry in delta.logprobs or []]
    assert len(streamed) == len(finished.token_ids) == 12
    assert blocking.token_ids == finished.token_ids
    assert blocking.logprobs is not None
    for entry, other in zip(streamed, blocking.logprobs, strict=True):
        assert entry["token_id"] == other["token_id"] != PENDING_TOKEN_ID
        assert entry["logprob"] == pytest.approx(other["logprob"], abs=1e-4)
        assert len(entry["top_token_ids"]) == len(entry["top_logprobs"]) == 3
        assert entry["top_token_ids"][0] == entry["token_id"] and entry["rank"] == 1  # greedy
        assert entry["logprob"] <= 0 and entry["top_logprobs"] == sorted(
            entry["top_logprobs"], reverse=True
        )


def test_concurrent_logprob_streams_stay_aligned(served):
    results: dict[int, tuple[list[TokenDelta], Finished]] = {}

    def one(index: int) -> None:
        with Client(served.address) as client:
            params = {**FREE, "max_tokens": 30, "logprobs": 1}
            _, deltas, finished = _stream(client, f"aligned {index}", params)
            results[index] = (deltas, finished)

    threads = [threading.Thread(target=one, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(results) == [0, 1, 2, 3]
    for deltas, finished in results.values():
        ids = [entry["token_id"] for delta in deltas for entry in delta.logprobs or []]
        assert ids == finished.token_ids == _ids(deltas) and len(ids) == 30


def test_the_stats_count_only_the_tokens_a_stopped_request_delivered(tiny_model_dir, tmp_path):
    """Both modes: with a slow text thread the engine runs many steps past the stop string."""
    address = f"ipc://{tmp_path / 'x.sock'}"
    with inprocess_daemon(tiny_model_dir, address) as daemon, Client(address) as client:
        on_batch = daemon.text_worker._on_batch

        def slow_on_batch(batch):
            time.sleep(0.02)
            on_batch(batch)

        daemon.text_worker._on_batch = slow_on_batch
        free = client.generate(PROMPTS[0], params={**FREE, "max_tokens": 200})
        stop = stop_string_in(free.text[:40])  # early in a 200-token reply
        assert stop is not None, free.text
        stopped = client.generate(PROMPTS[0], params={**FREE, "max_tokens": 200, "stop": [stop]})
        assert stopped.finish_reason == "stop" and len(stopped.token_ids) < 100
        snapshot = client.stats(include_block_map=False)
    row = recent_row(snapshot, stopped.request_id)
    assert row.num_generated_tokens == stopped.usage["completion_tokens"]
