"""vllm-router's worker contract against a real daemon: real figures, a real flush."""

from __future__ import annotations

import threading

import httpx

from llmd.client import Client
from tests.http.http_harness import MAX_MODEL_LEN

BLOCK_SIZE = 16  # DAEMON_ARGS
SHARED_PREFIX = list(range(30, 30 + 4 * BLOCK_SIZE))  # 4 full blocks


def _complete(served_http, prompt_token_ids: list[int], max_tokens: int = 2, **headers: str):
    body = {"prompt": prompt_token_ids, "max_tokens": max_tokens, "ignore_eos": True}
    response = httpx.post(f"{served_http.v1}/completions", json=body, headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    return response


def test_server_and_model_info_are_the_daemons_configuration(served_http):
    info = httpx.get(f"{served_http.url}/get_server_info", timeout=10).json()
    with Client(served_http.address) as client:
        daemon = client.stats(include_requests=False, include_block_map=False).daemon
    assert info["max_model_len"] == MAX_MODEL_LEN == daemon.max_model_len
    assert info["num_gpu_blocks"] == 512 and info["block_size"] == BLOCK_SIZE  # DAEMON_ARGS
    assert info["max_total_num_tokens"] == 512 * BLOCK_SIZE
    assert info["max_num_seqs"] == daemon.max_num_seqs > 0
    assert info["model_path"] == daemon.model and info["state"] == "ok"
    model = httpx.get(f"{served_http.url}/get_model_info", timeout=10).json()
    assert model["is_generation"] is True and model["vocab_size"] == daemon.vocab_size


def test_load_counts_a_running_request(served_http):
    served_http.wait_idle()
    idle = httpx.get(f"{served_http.url}/load", timeout=10).json()
    assert idle["num_requests_running"] == idle["num_requests_waiting"] == 0
    assert idle["kv_cache_usage_perc"] == 0.0
    body = {"prompt": list(range(10, 200)), "max_tokens": 300, "ignore_eos": True}
    worker = threading.Thread(
        target=httpx.post,
        args=(f"{served_http.v1}/completions",),
        kwargs={"json": body, "timeout": 60},
    )
    worker.start()
    try:
        for _ in range(200):
            busy = httpx.get(f"{served_http.url}/load", timeout=10).json()
            if busy["num_requests_running"] == 1:
                break
        assert busy["num_requests_running"] == 1 and busy["num_requests"] >= 1
        used, _ = served_http.kv_used_and_running()
        assert busy["num_kv_blocks_used"] > 0 and busy["kv_cache_usage_perc"] > 0
        assert used > 0
    finally:
        worker.join()


def test_health_generate_runs_one_token_through_the_engine(served_http):
    with Client(served_http.address) as client:
        before = client.stats(include_requests=False, include_block_map=False).totals
    response = httpx.get(f"{served_http.url}/health_generate", timeout=30)
    assert response.status_code == 200 and response.json()["num_generated_tokens"] == 1
    with Client(served_http.address) as client:
        after = client.stats(include_requests=False, include_block_map=False).totals
    assert after.generation_tokens - before.generation_tokens == 1


def test_flush_cache_drops_the_cached_prefix(served_http):
    served_http.wait_idle()
    _complete(served_http, [*SHARED_PREFIX, 7])
    served_http.wait_idle()
    flushed = httpx.post(f"{served_http.url}/flush_cache", timeout=10)
    assert flushed.status_code == 200, flushed.text
    assert flushed.json()["num_blocks_dropped"] >= 4
    with Client(served_http.address) as client:
        kv = client.stats(include_requests=False, include_block_map=False).kv
    assert kv is not None and kv.num_cached == 0
    before = kv.prefix_hit_tokens
    _complete(served_http, [*SHARED_PREFIX, 8])  # the prefix was dropped: no hit
    with Client(served_http.address) as client:
        kv = client.stats(include_requests=False, include_block_map=False).kv
    assert kv is not None and kv.prefix_hit_tokens == before


def test_flush_cache_is_refused_while_a_request_runs(served_http):
    served_http.wait_idle()
    body = {"prompt": list(range(10, 200)), "max_tokens": 300, "ignore_eos": True}
    worker = threading.Thread(
        target=httpx.post,
        args=(f"{served_http.v1}/completions",),
        kwargs={"json": body, "timeout": 60},
    )
    worker.start()
    try:
        for _ in range(200):
            if httpx.get(f"{served_http.url}/load", timeout=10).json()["num_requests_running"]:
                break
        refused = httpx.post(f"{served_http.url}/flush_cache", timeout=10)
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["code"] == "cache_busy"
    finally:
        worker.join()


def test_a_routers_correlation_id_names_the_request(served_http):
    response = _complete(served_http, [5, 6, 7], **{"X-Correlation-Id": "router-abc-1"})
    assert response.headers["X-Request-Id"] == "router-abc-1"
    with Client(served_http.address) as client:
        recent = client.stats().recent or ()
    assert any(row.label == "router-abc-1" for row in recent)
    given_both = {"X-Request-Id": "mine-1", "X-Correlation-Id": "router-abc-2"}
    assert _complete(served_http, [5, 6], **given_both).headers["X-Request-Id"] == "mine-1"
