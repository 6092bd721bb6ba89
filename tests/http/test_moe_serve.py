"""`llmd serve --model <tiny Qwen3-MoE>` end to end: HTTP completions, then the stats
that show active-expert efficiency, checked against counts from the HTTP replies."""

from __future__ import annotations

import httpx

from llmd import LLM, SamplingParams
from llmd.client import Client
from llmd.client.status_report import format_status, status_report
from llmd.protocol.stats_snapshot import StatsSnapshot
from tests.http.http_harness import DAEMON_ARGS, http_daemon
from tests.tiny_model import make_tiny_model

TOP_K, NUM_EXPERTS, NUM_MOE_LAYERS = 2, 8, 2
"""The factory's tiny Qwen3-MoE: 3 layers, layer 1 dense (tests/checkpoints.py)."""


def test_a_served_moe_model_answers_and_reports_its_experts(tmp_path):
    model_dir = make_tiny_model(tmp_path / "model", "qwen3_moe")
    prompt_ids = [5, 17, 33, 2, 41, 8, 90]
    (tmp_path / "runtime").mkdir()
    with http_daemon(model_dir, tmp_path / "runtime", DAEMON_ARGS) as served:
        body = {"model": str(model_dir), "prompt": prompt_ids, "max_tokens": 6,
                "temperature": 0.0, "ignore_eos": True}  # fmt: skip
        reply = httpx.post(f"{served.v1}/completions", json=body, timeout=60)
        assert reply.status_code == 200, reply.text
        usage = reply.json()["usage"]
        assert (usage["prompt_tokens"], usage["completion_tokens"]) == (7, 6)
        chat = httpx.post(
            f"{served.v1}/chat/completions",
            json={"model": str(model_dir), "messages": [{"role": "user", "content": "hi"}],
                  "max_tokens": 4},
            timeout=60,
        )  # fmt: skip
        assert chat.status_code == 200, chat.text
        chat_usage = chat.json()["usage"]
        served.wait_idle()
        metrics = httpx.get(f"{served.url}/metrics", timeout=10).text
        with Client(served.address) as client:
            stats = client.stats(include_requests=False, include_block_map=False)
        text = reply.json()["choices"][0]["text"]
    snapshot = StatsSnapshot.from_wire(stats.to_wire())  # the wire form reads back whole
    assert snapshot.daemon.num_experts == NUM_EXPERTS
    assert snapshot.daemon.num_moe_layers == NUM_MOE_LAYERS
    assert snapshot.hardware.num_expert_slots == NUM_MOE_LAYERS * NUM_EXPERTS
    touched = snapshot.hardware.experts_touched_per_step
    assert touched is not None and TOP_K * NUM_MOE_LAYERS <= touched <= NUM_EXPERTS * 2
    # Every computed token (each prompt less its cached prefix, then each output but the
    # last) adds top-k per MoE layer.
    num_computed = sum(
        u["prompt_tokens"] - u["prompt_tokens_details"]["cached_tokens"]
        + u["completion_tokens"] - 1
        for u in (usage, chat_usage)
    )  # fmt: skip
    assert snapshot.moe is not None
    assert [sum(row) for row in snapshot.moe.expert_tokens] == [TOP_K * num_computed] * 2
    assert "experts   top-2 of 8 in 2 MoE layers; " in format_status(status_report(snapshot))
    for name in ("llmd:moe_experts_touched_per_step", "llmd:moe_expert_load_imbalance"):
        assert f'{name}{{model_name="{model_dir}"}}' in metrics
    # The same greedy tokens as the offline engine on the same checkpoint.
    offline = LLM(str(model_dir), device="cpu", num_blocks=64)
    greedy = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    assert offline.generate([prompt_ids], greedy)[0].text == text
