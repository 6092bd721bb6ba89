"""GET /metrics parsed with prometheus_client's own parser: names, counters, consistency."""

from __future__ import annotations

import json

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.daemon.harness import daemon_env, run_cli

PREFIX = "llmd:"


def _scrape(served_http) -> dict[tuple[str, tuple], float]:
    """Every sample of /metrics, keyed by (sample name, sorted labels without model_name)."""
    response = httpx.get(f"{served_http.url}/metrics", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        assert family.name.startswith(PREFIX), family.name
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
    for name in ("time_to_first_token_seconds", "request_decode_time_seconds"):
        buckets = [
            value for (sample, labels), value in after.items() if sample == f"{PREFIX}{name}_bucket"
        ]
        assert buckets == sorted(buckets)  # cumulative
        assert max(buckets) == _value(after, f"{name}_count")


def test_gauges_match_llmd_status_json(served_http):
    served_http.wait_idle()
    samples = _scrape(served_http)
    result = run_cli(["status", "--json", "--address", served_http.address], daemon_env())
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert _value(samples, "num_requests_running") == report["queue"]["running"]
    assert _value(samples, "num_requests_waiting") == report["queue"]["waiting"]
    assert _value(samples, "num_requests_preempted") == report["queue"]["preempted"]
    assert _value(samples, "kv_cache_usage_perc") == report["kv"]["usage"]
