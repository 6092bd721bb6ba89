"""/metrics renders structured outputs' figures and the step's phases, from a snapshot and
from a live daemon serving constrained requests."""

from __future__ import annotations

import re

import httpx
from prometheus_client.parser import text_string_to_metric_families

from llmd.http.metrics_exporter import render
from llmd.protocol.grammar_section import GrammarSection
from llmd.protocol.metrics_sections import HistogramData, TotalsSection
from tests.protocol.snapshot_samples import sample_snapshot


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    """Every sample keyed by (name, sorted labels without model_name)."""
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "model_name"))
            samples[(sample.name, labels)] = sample.value
    return samples


def test_grammar_counters_gauge_and_compile_histogram_carry_the_snapshot_values():
    grammar = GrammarSection(
        requests_by_kind={"json": 4, "json_object": 0, "regex": 2, "choice": 1, "grammar": 0},
        num_compiles=3,
        num_cache_hits=4,
        num_compile_failures=1,
        num_compile_timeouts=2,
        num_waiting=5,
        compile_histogram=HistogramData(bounds=(0.001, 0.01), counts=(1, 1, 1), sum=0.5, count=3),
    )
    samples = _samples(render(sample_snapshot(grammar=grammar)).decode())
    assert samples[("llmd:num_requests_waiting_for_grammar", ())] == 5
    by_kind = {
        dict(labels)["kind"]: value
        for (name, labels), value in samples.items()
        if name == "llmd:structured_output_requests_total"
    }
    assert by_kind == {"json": 4, "json_object": 0, "regex": 2, "choice": 1, "grammar": 0}
    assert samples[("llmd:grammar_cache_hits_total", ())] == 4
    assert samples[("llmd:grammar_cache_misses_total", ())] == 3
    assert samples[("llmd:grammar_compile_failures_total", ())] == 1
    assert samples[("llmd:grammar_compile_timeouts_total", ())] == 2
    assert samples[("llmd:grammar_compile_time_seconds_bucket", (("le", "0.01"),))] == 2
    assert samples[("llmd:grammar_compile_time_seconds_bucket", (("le", "+Inf"),))] == 3
    assert samples[("llmd:grammar_compile_time_seconds_sum", ())] == 0.5


def test_without_a_grammar_section_no_grammar_series_are_rendered():
    samples = _samples(render(sample_snapshot()).decode())  # a dead engine, or an old daemon
    names = {name for name, _ in samples}
    assert not {name for name in names if "grammar" in name or "structured" in name}
    assert samples[("llmd:step_phase_seconds_total", (("phase", "grammar"),))] == 0.0


def test_step_phase_seconds_and_steps_are_counters_with_every_phase():
    totals = TotalsSection(steps=7, phase_s={"grammar": 0.25, "forward": 3.0})
    samples = _samples(render(sample_snapshot(totals=totals)).decode())
    assert samples[("llmd:steps_total", ())] == 7
    phases = {
        dict(labels)["phase"]: value
        for (name, labels), value in samples.items()
        if name == "llmd:step_phase_seconds_total"
    }
    assert phases == {
        "schedule": 0.0, "grammar": 0.25, "prepare": 0.0, "forward": 3.0, "sample": 0.0,
        "idle_gap": 0.0,
    }  # fmt: skip


def _scrape(served_http) -> dict[tuple[str, tuple], float]:
    response = httpx.get(f"{served_http.url}/metrics", timeout=10)
    assert response.status_code == 200
    return _samples(response.text)


def test_a_live_daemon_counts_constrained_requests_compiles_and_the_grammar_phase(served_http):
    served_http.wait_idle()
    before = _scrape(served_http)
    body = {"prompt": "Code:", "max_tokens": 8, "structured_outputs": {"regex": "[q-s]{5}"}}
    for _ in range(2):  # the second one finds the grammar compiled
        response = httpx.post(f"{served_http.v1}/completions", json=body, timeout=60)
        assert response.is_success, response.text
        assert re.fullmatch("[q-s]{5}", response.json()["choices"][0]["text"])
    after = _scrape(served_http)

    def delta(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after[key] - before.get(key, 0.0)

    assert delta("llmd:structured_output_requests_total", kind="regex") == 2
    assert delta("llmd:structured_output_requests_total", kind="json") == 0
    assert delta("llmd:grammar_cache_misses_total") == 1
    assert delta("llmd:grammar_cache_hits_total") == 1
    assert delta("llmd:grammar_compile_time_seconds_count") == 1
    assert delta("llmd:grammar_compile_time_seconds_sum") > 0
    assert delta("llmd:step_phase_seconds_total", phase="grammar") > 0
    assert after[("llmd:num_requests_waiting_for_grammar", ())] == 0
    assert delta("llmd:steps_total") >= 2  # a step at least per request
