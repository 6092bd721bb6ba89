"""GET /metrics parsed with prometheus_client's own parser: names, counters, consistency."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from llmd.cli import main as llmd_main
from llmd.client import Client, Completion
from tests import scheduling_mode
from tests.http.http_harness import MAX_MODEL_LEN, http_daemon

PREFIX = "llmd:"


def _scrape(served_http, http: httpx.Client | None = None) -> dict[tuple[str, tuple], float]:
    """Every sample of /metrics, keyed by (sample name, sorted labels without model_name)."""
    response = (http or httpx).get(f"{served_http.url}/metrics", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        assert family.name.startswith((PREFIX, "vllm:")), family.name
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "model_name"))
            samples[(sample.name, labels)] = sample.value
    return samples


def _value(samples, name: str, **labels: str) -> float:
    return samples[(PREFIX + name, tuple(sorted(labels.items())))]


def test_counters_and_histograms_move_as_requests_complete(served_http):
    served_http.wait_idle()
    before = _scrape(served_http)
    prompt_lengths = (3, 5, 8)  # under one 16-token block: no prefix-cache hits
    for length in prompt_lengths:
        body = {"prompt": list(range(20, 20 + length)), "max_tokens": 4, "ignore_eos": True}
        assert httpx.post(f"{served_http.v1}/completions", json=body, timeout=30).is_success
    after = _scrape(served_http)

    def delta(name: str, **labels: str) -> float:
        return _value(after, name, **labels) - _value(before, name, **labels)

    assert delta("generation_tokens_total") == 12
    assert delta("prompt_tokens_total") == sum(prompt_lengths)
    assert delta("request_success_total", finished_reason="length") == 3
    assert delta("request_success_total", finished_reason="stop") == 0
    assert delta("e2e_request_latency_seconds_count") == 3
    assert delta("inter_token_latency_seconds_count") == 3 * 3  # 4 tokens, 3 gaps each
    assert delta("request_prompt_tokens_sum") == sum(prompt_lengths)
    assert delta("request_generation_tokens_sum") == 12
    assert delta("prefix_cache_queries_total") == sum(prompt_lengths)
    for name in ("prompt_tokens_total", "generation_tokens_total", "prefix_cache_queries_total"):
        assert after[(f"vllm:{name}", ())] == _value(after, name)  # routers' names, same figure
    assert after[("vllm:num_requests_running", ())] == _value(after, "num_requests_running")
    for name in ("time_to_first_token_seconds", "request_decode_time_seconds"):
        buckets = [
            value for (sample, labels), value in after.items() if sample == f"{PREFIX}{name}_bucket"
        ]
        assert buckets == sorted(buckets)  # cumulative
        assert max(buckets) == _value(after, f"{name}_count")


# A daemon where requests queue and get preempted: 2 sequences at most, and 34 blocks of 16
# tokens, so two 500-token requests (32 blocks each) run out of KV half-way; the newer one is
# preempted and waits (it needs its 17 blocks back) until the older one finishes.
LOADED_ARGS = ["--max-num-seqs", "2", "--num-blocks", "34", "--block-size", "16",
               "--max-model-len", str(MAX_MODEL_LEN), *scheduling_mode.serve_flags()]  # fmt: skip
NUM_LOADED_REQUESTS = 10
LOADED_MAX_TOKENS = 500


@pytest.fixture(scope="module")
def loaded_http(tiny_model_dir, tmp_path_factory):
    """`llmd serve --http-port PORT` with LOADED_ARGS; terminated at the end of the module."""
    with http_daemon(tiny_model_dir, tmp_path_factory.mktemp("http-loaded"), LOADED_ARGS) as served:
        yield served


_GAUGES = {
    "running": ("num_requests_running", "queue"),
    "waiting": ("num_requests_waiting", "queue"),
    "preempted": ("num_requests_preempted", "queue"),
    "usage": ("kv_cache_usage_perc", "kv"),
}


def _gauges(samples) -> dict[str, float]:
    return {key: _value(samples, name) for key, (name, _) in _GAUGES.items()}


def _bracket_key(samples) -> tuple:
    """What must be equal in two scrapes for the queue not to have changed between them.

    With no new arrivals, no finish and no preemption, waiting can only shrink (admissions),
    so equal counts at both ends mean constant ones; KV use can only grow (allocations).
    """
    finished = sum(
        value for (name, _), value in samples.items() if name == f"{PREFIX}request_success_total"
    )
    gauges = _gauges(samples)
    queue = (gauges["running"], gauges["waiting"], gauges["preempted"])
    return (*queue, _value(samples, "num_preemptions_total"), finished)


def _status_json(address: str) -> dict:
    """`llmd status --json`, run in this process (a subprocess takes a second to start)."""
    result = CliRunner().invoke(llmd_main, ["status", "--json", "--address", address])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_gauges_match_llmd_status_json_under_load(loaded_http):
    """/metrics and `llmd status --json` agree while requests run, wait and are preempted.

    Each comparison is a status taken between two scrapes whose queue agrees (see
    _bracket_key): its queue counts must match exactly, its KV use lie between theirs.
    """
    loaded_http.wait_idle()
    completions: dict[int, Completion | BaseException] = {}

    def generate(index: int) -> None:
        params = {"max_tokens": LOADED_MAX_TOKENS, "ignore_eos": True, "temperature": 0.0}
        try:
            with Client(loaded_http.address, timeout=120) as client:
                completions[index] = client.generate(f"load {index}", params=params)
        except BaseException as error:  # reported below
            completions[index] = error

    threads = [threading.Thread(target=generate, args=(i,)) for i in range(NUM_LOADED_REQUESTS)]
    for thread in threads:
        thread.start()
    with Client(loaded_http.address) as client:  # every request is in the engine
        deadline = time.monotonic() + 30
        while True:
            queue = client.stats(include_requests=False, include_block_map=False).queue
            assert queue is not None, "the engine died"
            if queue.running + queue.waiting == NUM_LOADED_REQUESTS:
                break
            assert time.monotonic() < deadline, queue
            time.sleep(0.005)
    seen = {"running and waiting": 0, "preempted": 0}
    num_brackets = 0
    with httpx.Client() as http:  # one connection: quicker scrapes, more of them hold still
        while any(thread.is_alive() for thread in threads):
            first = _scrape(loaded_http, http)
            status = _status_json(loaded_http.address)
            second = _scrape(loaded_http, http)
            if _bracket_key(first) != _bracket_key(second):
                continue  # a request was admitted, preempted or finished meanwhile: again
            num_brackets += 1
            gauges, later = _gauges(first), _gauges(second)
            queue = {key: gauges[key] for key in ("running", "waiting", "preempted")}
            assert queue == {key: status["queue"][key] for key in queue}, (queue, status)
            # KV use grows between the scrapes (a block every 16 tokens): the status's is between.
            usage = status["kv"]["usage"]
            assert usage == status["kv"]["num_used"] / status["kv"]["num_total"]
            assert gauges["usage"] <= usage <= later["usage"], (gauges, status, later)
            assert (gauges["usage"] > 0) == (gauges["running"] > 0), gauges
            if gauges["running"] > 0 and gauges["waiting"] > 0:
                seen["running and waiting"] += 1
            if gauges["preempted"] > 0:
                seen["preempted"] += 1
    for thread in threads:
        thread.join(120)
    assert min(seen.values()) > 0, (seen, num_brackets)
    for index in range(NUM_LOADED_REQUESTS):
        completion = completions[index]
        assert isinstance(completion, Completion), completion
        assert len(completion.token_ids) == LOADED_MAX_TOKENS
    after = _scrape(loaded_http)
    assert _value(after, "num_preemptions_total") > 0
    assert _gauges(after) == {"running": 0, "waiting": 0, "preempted": 0, "usage": 0}
