"""`return_timings` and X-Request-Id: every choice can say why it waited, over HTTP.

Two daemons with one limit each made tiny (a 16-block KV pool; an 8-token step budget)
hold the second prompt of a two-prompt request behind the first (sent to the daemon in
order while it is paused, so both wait at its first step); its `timings` must name the
reason, with seconds and steps, zero for the reasons that cannot apply, and sums equal to
its queue time. The X-Request-Id checks and chat run on the shared daemon.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import httpx
import pytest

from llmd.client import Client
from llmd.wait_breakdown import KV_BLOCKS, MAX_NUM_SEQS, PREEMPTED, TOKEN_BUDGET, WAIT_REASONS
from tests import scheduling_mode
from tests.http.http_harness import http_daemon

pytestmark = pytest.mark.slow

KV_ARGS = ["--num-blocks", "16", "--block-size", "16", "--max-model-len", "256",
           *scheduling_mode.serve_flags()]  # fmt: skip
BUDGET_ARGS = ["--num-blocks", "64", "--block-size", "16", "--max-model-len", "256",
               "--max-num-batched-tokens", "8", *scheduling_mode.serve_flags()]  # fmt: skip
REQUEST_ID = "client-trace/42:a"
PAUSE_S = 1.0
"""How long the daemon's core stays stopped while the HTTP server forwards both prompts."""
T = TypeVar("T")


def prompt(first_id: int, num_tokens: int) -> list[int]:
    """Token ids starting at `first_id` (prompts with other first ids share no KV block)."""
    return [first_id + i % 150 for i in range(num_tokens)]


def body(prompt_ids: list[int], max_tokens: int, **extra) -> dict:
    return {"prompt": prompt_ids, "max_tokens": max_tokens, "temperature": 0.0,
            "ignore_eos": True, **extra}  # fmt: skip


def stream_chunks(url: str, payload: dict, headers: dict | None = None) -> list[dict]:
    """A streamed completion's chunks, in order."""
    payload = {**payload, "stream": True}
    with httpx.stream("POST", url, json=payload, headers=headers, timeout=60) as response:
        assert response.status_code == 200, response.read()
        lines = [line.removeprefix("data: ") for line in response.iter_lines() if line]
    return [json.loads(line) for line in lines if line != "[DONE]"]


def sent_while_paused(served, send: Callable[[], T]) -> T:
    """`send()` (run on a thread) with the daemon's core stopped for its first PAUSE_S, so
    both prompts of a request wait in its socket and reach its intake together: forwarded
    one after another, a loaded machine can run the first's whole prefill before the second
    arrives, and the second then never waits for the reason under test."""
    with ThreadPoolExecutor(1) as pool:
        os.kill(served.process.pid, signal.SIGSTOP)
        try:
            reply = pool.submit(send)
            time.sleep(PAUSE_S)
        finally:
            os.kill(served.process.pid, signal.SIGCONT)
        return reply.result()


def finishing_chunks(chunks: list[dict]) -> dict[int, dict]:
    """Each choice's chunk with its finish_reason, by choice index; no other has timings."""
    by_index = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            if choice["finish_reason"] is None:
                assert "timings" not in choice
            else:
                assert choice["index"] not in by_index
                by_index[choice["index"]] = choice
    return by_index


def assert_only(timings: dict, reason: str) -> None:
    """`reason` has seconds and steps; the reasons that cannot apply have none."""
    assert set(timings["wait_s"]) == set(WAIT_REASONS)
    assert timings["wait_s"][reason] > 0 and timings["num_wait_steps"][reason] >= 1
    for other in {KV_BLOCKS, MAX_NUM_SEQS, TOKEN_BUDGET, PREEMPTED} - {reason}:
        assert timings["wait_s"][other] == 0.0 and timings["num_wait_steps"][other] == 0, other
    assert sum(timings["wait_s"].values()) == pytest.approx(timings["queue_s"], abs=1e-6)
    assert timings["ttft_s"] == pytest.approx(timings["queue_s"] + timings["prefill_s"], abs=1e-6)


@pytest.fixture(scope="module")
def kv_http(tiny_model_dir, tmp_path_factory):
    with http_daemon(tiny_model_dir, tmp_path_factory.mktemp("kv-http"), KV_ARGS) as served:
        yield served


@pytest.fixture(scope="module")
def budget_http(tiny_model_dir, tmp_path_factory):
    runtime = tmp_path_factory.mktemp("budget-http")
    with http_daemon(tiny_model_dir, runtime, BUDGET_ARGS) as served:
        yield served


def test_a_full_kv_pool_shows_as_kv_blocks_in_the_response_timings(kv_http):
    # One request, two prompts, sent to the daemon in order: the first (200 tokens, 56
    # outputs) holds 13 to 16 of the 16 blocks all its life; the second (60 tokens) needs 4.
    payload = body([prompt(10, 200), prompt(200, 60)], 56, return_timings=True)
    response = sent_while_paused(kv_http, lambda: httpx.post(
        f"{kv_http.v1}/completions", json=payload, headers={"X-Request-Id": REQUEST_ID},
        timeout=60,
    ))  # fmt: skip
    assert response.status_code == 200, response.text
    assert response.headers["X-Request-Id"] == REQUEST_ID
    first, second = (choice["timings"] for choice in response.json()["choices"])
    assert_only(second, KV_BLOCKS)
    assert second["request_id"].startswith("req-") and second["request_id"] != first["request_id"]
    assert second["num_prefill_chunks"] == 1 and second["prefill_chunk_sizes"] == [60]
    assert second["token_budget_taken_by"] is None and second["num_preemptions"] == 0
    assert first["wait_s"][KV_BLOCKS] == 0.0 and first["num_prefill_tokens"] == 200
    # The daemon knows both by the request's X-Request-Id.
    with Client(kv_http.address) as client:
        recent = client.stats().recent or ()
    labelled = {row.request_id for row in recent if row.label == REQUEST_ID}
    assert labelled == {first["request_id"], second["request_id"]}


def test_a_taken_token_budget_shows_as_token_budget_in_the_last_stream_chunk(budget_http):
    # An 8-token budget: the first prompt (240 tokens) takes 30 whole steps; the second waits.
    payload = body([prompt(10, 240), prompt(200, 40)], 4, return_timings=True)
    chunks = sent_while_paused(
        budget_http, lambda: stream_chunks(f"{budget_http.v1}/completions", payload)
    )
    finishing = finishing_chunks(chunks)
    first, second = finishing[0]["timings"], finishing[1]["timings"]
    assert first["prefill_chunk_sizes"] == [8] * 30 and first["num_prefill_chunks"] == 30
    assert_only(second, TOKEN_BUDGET)
    assert second["token_budget_taken_by"] == first["request_id"]
    assert second["num_prefill_chunks"] >= 5 and max(second["prefill_chunk_sizes"]) <= 8
    assert sum(second["prefill_chunk_sizes"]) == second["num_prefill_tokens"] == 40


def test_timings_only_when_asked_and_on_chat_too(served_http):
    url = f"{served_http.v1}/chat/completions"
    messages = [{"role": "user", "content": "hello"}]
    plain = httpx.post(url, json={"messages": messages, "max_tokens": 2}, timeout=30).json()
    assert "timings" not in plain["choices"][0]
    asked = {"messages": messages, "max_tokens": 2, "return_timings": True}
    timings = httpx.post(url, json=asked, timeout=30).json()["choices"][0]["timings"]
    assert sum(timings["wait_s"].values()) == pytest.approx(timings["queue_s"], abs=1e-6)
    assert timings["num_prefill_chunks"] >= 1 and timings["e2e_s"] > 0
    chunks = stream_chunks(url, asked)
    assert "timings" in finishing_chunks(chunks)[0] and chunks[-1]["choices"][0]["finish_reason"]
    assert all("timings" not in chunk["choices"][0] for chunk in stream_chunks(
        url, {"messages": messages, "max_tokens": 2}))  # fmt: skip


def test_x_request_id_is_echoed_generated_or_refused_by_name(served_http):
    url = f"{served_http.v1}/completions"
    payload = {"prompt": "hi", "max_tokens": 1}
    given = httpx.post(url, json=payload, headers={"X-Request-Id": REQUEST_ID}, timeout=30)
    assert given.status_code == 200 and given.headers["X-Request-Id"] == REQUEST_ID
    generated = httpx.post(url, json=payload, timeout=30).headers["X-Request-Id"]
    assert len(generated) == 32 and int(generated, 16) >= 0
    for bad in ("two words", "x" * 129, "semi;colon"):
        refused = httpx.post(url, json=payload, headers={"X-Request-Id": bad}, timeout=30)
        assert refused.status_code == 400, bad
        assert refused.json()["error"]["param"] == "X-Request-Id"
    # The daemon knows the request by that name: its row among the recently finished.
    with Client(served_http.address) as client:
        recent = client.stats().recent or ()
    assert any(row.label == REQUEST_ID for row in recent)


async def test_bench_over_http_records_each_requests_breakdown(served_http):
    from llmd.bench.serve import ServeOptions, run_serve_async

    options = ServeOptions(
        http_url=served_http.v1, num_prompts=4, input_len=12, output_len=3, vocab_size=100,
        seed=2, show_progress=False, max_concurrency=4,
    )  # fmt: skip
    result = await run_serve_async(options)
    assert result["num_completed"] == 4, result["errors"]
    for record in result["requests"]:
        waits = record["server_waits"]
        assert set(waits["wait_s"]) == set(WAIT_REASONS) and waits["num_prefill_chunks"] >= 1
        assert sum(waits["wait_s"].values()) == pytest.approx(
            record["server_timings"]["queue"], abs=1e-6
        )
    assert result["server_waits"]["num_requests"] == 4
