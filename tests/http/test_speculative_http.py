"""`llmd serve --speculative-method ngram` (or `draft --draft-model`): the same completions
as without it, the speculative-decoding counters on /metrics under vLLM's names, and a
request's `can_speculate: false` opting it out."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmd.client import Client
from tests.http.http_harness import DAEMON_ARGS, http_daemon

SPEC_ARGS = [*DAEMON_ARGS, "--speculative-method", "ngram", "--num-speculative-tokens", "3",
             "--prompt-lookup-min", "1", "--prompt-lookup-max", "3"]  # fmt: skip
PROMPTS = [[20, 21, 22, 23, 24, 25] * 5, [40, 41, 40, 41, 40, 41, 42], list(range(50, 70))]


@pytest.fixture(scope="module")
def speculating_http(tiny_model_dir, tmp_path_factory):
    with http_daemon(tiny_model_dir, tmp_path_factory.mktemp("http-spec"), SPEC_ARGS) as served:
        yield served


def _complete(served, prompt, **fields) -> dict:
    body = {"prompt": prompt, "max_tokens": 20, "temperature": 0.0, "ignore_eos": True, **fields}
    response = httpx.post(f"{served.v1}/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    return {"text": choice["text"], "finish_reason": choice["finish_reason"]}


def _spec_samples(served) -> dict[tuple[str, str], float]:
    text = httpx.get(f"{served.url}/metrics", timeout=10).text
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("llmd:spec_decode") or sample.name.startswith(
                "llmd:generation_tokens"
            ):
                samples[(sample.name, sample.labels.get("position", ""))] = sample.value
    return samples


def test_completions_match_the_daemon_without_speculation(served_http, speculating_http):
    for prompt in PROMPTS:
        want = _complete(served_http, prompt)
        assert _complete(speculating_http, prompt) == want
        stop = want["text"][len(want["text"]) // 2 :][:2]
        if stop.strip():
            stopped = _complete(served_http, prompt, stop=[stop], ignore_eos=False)
            assert _complete(speculating_http, prompt, stop=[stop], ignore_eos=False) == stopped
    samples = _spec_samples(speculating_http)
    num_drafts = samples[("llmd:spec_decode_num_drafts_total", "")]
    num_draft_tokens = samples[("llmd:spec_decode_num_draft_tokens_total", "")]
    num_accepted = samples[("llmd:spec_decode_num_accepted_tokens_total", "")]
    assert num_drafts > 0
    assert num_accepted <= num_draft_tokens <= 3 * num_drafts
    per_position = [v for (name, _), v in samples.items() if name.endswith("_per_pos_total")]
    assert sum(per_position) == num_accepted


def test_a_daemon_drafting_with_its_own_model_as_the_draft_accepts_every_draft_token(
    served_http, tiny_model_dir, tmp_path_factory
):
    args = [*DAEMON_ARGS, "--speculative-method", "draft", "--draft-model", str(tiny_model_dir),
            "--num-speculative-tokens", "3"]  # fmt: skip
    with http_daemon(tiny_model_dir, tmp_path_factory.mktemp("http-draft"), args) as drafting:
        for prompt in PROMPTS:
            assert _complete(drafting, prompt) == _complete(served_http, prompt)
        samples = _spec_samples(drafting)
    num_draft_tokens = samples[("llmd:spec_decode_num_draft_tokens_total", "")]
    assert samples[("llmd:spec_decode_num_drafts_total", "")] > 0
    assert samples[("llmd:spec_decode_num_accepted_tokens_total", "")] == num_draft_tokens > 0


def test_timings_carry_the_requests_own_acceptance(speculating_http):
    body = {"prompt": PROMPTS[0], "max_tokens": 20, "temperature": 0.0, "ignore_eos": True,
            "return_timings": True}  # fmt: skip
    response = httpx.post(f"{speculating_http.v1}/completions", json=body, timeout=60)
    timings = response.json()["choices"][0]["timings"]
    num_drafts = timings["spec_num_drafts"]
    assert num_drafts > 0
    assert 0 <= timings["spec_num_accepted_tokens"] <= timings["spec_num_draft_tokens"]
    want = 1 + timings["spec_num_accepted_tokens"] / num_drafts
    assert timings["spec_mean_acceptance_length"] == pytest.approx(want)


def _totals(served) -> tuple[int, int, int, int]:
    """(drafts, accepted tokens, decode steps, generated tokens) since the daemon started."""
    with Client(served.address) as client:
        totals = client.stats(include_requests=False, include_block_map=False).totals
    return (totals.spec_drafts, totals.spec_accepted_tokens, totals.decode_seqs,
            totals.generation_tokens)  # fmt: skip


def test_a_request_that_opts_out_is_never_drafted_for(speculating_http):
    def timed(**fields) -> tuple[dict, dict, tuple[int, ...]]:
        before = _totals(speculating_http)
        body = {"prompt": PROMPTS[0], "max_tokens": 20, "temperature": 0.0, "ignore_eos": True,
                "return_timings": True, **fields}  # fmt: skip
        response = httpx.post(f"{speculating_http.v1}/completions", json=body, timeout=60)
        assert response.status_code == 200, response.text
        choice = response.json()["choices"][0]
        added = tuple(b - a for a, b in zip(before, _totals(speculating_http)))
        return choice, choice["timings"], added

    speculated, timings, (num_drafts, num_accepted, num_decode_steps, num_tokens) = timed()
    assert timings["spec_num_drafts"] == num_drafts > 0  # the daemon's count agrees
    # Its 20 tokens: the prefill's first, then one per decode step plus the accepted drafts
    # (the snapshot's yield per decode step, 1 + accepted / decode steps, rests on this).
    assert num_tokens == 20 == 1 + num_decode_steps + num_accepted
    assert num_accepted == timings["spec_num_accepted_tokens"] > 0
    plain, opted_out, (num_drafts, num_accepted, num_decode_steps, _) = timed(can_speculate=False)
    assert opted_out.get("spec_num_drafts", 0) == 0 and num_drafts == 0
    assert (num_accepted, num_decode_steps) == (0, 19)
    assert "spec_mean_acceptance_length" not in opted_out  # no draft: no spec_* fields
    assert plain["text"] == speculated["text"]
    bad = {"prompt": PROMPTS[0], "can_speculate": "no"}
    response = httpx.post(f"{speculating_http.v1}/completions", json=bad, timeout=60)
    assert response.status_code == 400 and response.json()["error"]["param"] == "can_speculate"
