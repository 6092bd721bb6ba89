"""`LLMEngine.facts()` and `snapshot()`: what the daemon reads of an engine, as frozen data.

Each figure is checked against an independent source: the checkpoint's config.json and the
engine's config for the facts, the live Requests `add_request` returned for the snapshot.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from llmd.config import EngineConfig
from llmd.engine.engine_snapshot import SnapshotScope
from llmd.llm_engine import LLMEngine
from llmd.sampling_params import SamplingParams
from tests.import_graph import REPO_ROOT, SourceTree

GREEDY_4 = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
NUM_BLOCKS = 32
BLOCK_SIZE = 4
BUDGET = 8


@pytest.fixture
def engine(tiny_model_dir):
    config = EngineConfig.from_kwargs(
        model=str(tiny_model_dir),
        device="cpu",
        dtype="float32",
        num_blocks=NUM_BLOCKS,
        block_size=BLOCK_SIZE,
        max_num_batched_tokens=BUDGET,
        max_num_seqs=3,
        async_scheduling=False,
    )
    return LLMEngine(config)


def test_facts_are_the_checkpoints_and_the_configs(engine, tiny_model_dir):
    checkpoint = json.loads((tiny_model_dir / "config.json").read_text())
    facts = engine.facts()
    num_heads = checkpoint["num_attention_heads"]
    head_dim = checkpoint.get("head_dim", checkpoint["hidden_size"] // num_heads)
    num_kv_heads = checkpoint.get("num_key_value_heads", num_heads)
    assert (facts.device, facts.device_name, facts.dtype) == ("cpu", "cpu", "float32")
    assert facts.model == str(tiny_model_dir)
    assert facts.vocab_size == checkpoint["vocab_size"]
    assert facts.hidden_size == checkpoint["hidden_size"]
    assert facts.num_layers == checkpoint["num_hidden_layers"]
    assert (facts.num_kv_heads, facts.head_dim) == (num_kv_heads, head_dim)
    assert facts.max_model_len == checkpoint["max_position_embeddings"]
    assert facts.kv_bytes_per_token(4) == 2 * facts.num_layers * num_kv_heads * head_dim * 4
    assert (facts.num_blocks, facts.block_size) == (NUM_BLOCKS, BLOCK_SIZE)
    assert (facts.max_num_batched_tokens, facts.max_num_seqs) == (BUDGET, 3)
    assert facts.async_scheduling is False
    assert facts.attention_backend in ("cpu", "torch")
    with pytest.raises(dataclasses.FrozenInstanceError):
        facts.num_blocks = 1  # type: ignore[misc]


def test_an_idle_engines_snapshot_is_empty_and_every_block_free(engine):
    snapshot = engine.snapshot()
    assert snapshot.queue.to_wire() == {
        "waiting": 0,
        "running": 0,
        "preempted": 0,
        "preemptions_total": 0,
    }
    kv = snapshot.kv.to_wire()
    assert (kv["num_total"], kv["num_free"], kv["num_used"], kv["num_cached"]) == (32, 32, 0, 0)
    assert (kv["usage"], kv["prefix_hit_rate"], kv["block_size"]) == (0.0, None, BLOCK_SIZE)
    assert (snapshot.num_requests, snapshot.prefilling, snapshot.timelines) == (0, (), ())
    assert snapshot.requests is snapshot.recent is snapshot.block_map is None
    assert snapshot.backlog_tokens is None  # not asked for


def test_snapshot_copies_queues_rows_timelines_and_block_tables(engine):
    first = engine.add_request(list(range(5, 15)), GREEDY_4, "first", arrival_time=1.0)
    second = engine.add_request(list(range(20, 27)), GREEDY_4, "second", arrival_time=2.0)
    before = engine.snapshot(SnapshotScope(include_backlog=True))
    assert (before.queue.waiting, before.queue.running, before.num_requests) == (2, 0, 2)
    assert before.backlog_tokens == 10 + 7  # nothing computed yet
    engine.step()  # the budget of 8 takes 8 of the first prompt's 10 tokens
    scope = SnapshotScope(
        include_requests=True,
        max_requests=8,
        timeline_request_ids=("first", "unknown"),
        include_block_map=True,
        include_backlog=True,
    )
    snapshot = engine.snapshot(scope)
    assert (snapshot.queue.waiting, snapshot.queue.running) == (1, 1)
    assert snapshot.backlog_tokens == 2 + 7
    assert [(p.request_id, p.num_computed_tokens, p.num_prompt_tokens)
            for p in snapshot.prefilling] == [("first", 8, 10)]  # fmt: skip
    rows = snapshot.requests
    assert rows is not None and [row.request_id for row in rows] == ["first", "second"]
    assert (rows[0].state, rows[0].num_computed_tokens, rows[0].prefill_progress) == (
        "running",
        8,
        0.8,
    )
    assert rows[0].num_blocks == len(first.block_ids) and rows[0].waiting_on is None
    assert (rows[1].state, rows[1].num_computed_tokens, rows[1].num_blocks) == ("waiting", 0, 0)
    assert rows[1].waiting_on == "token_budget"  # the first prompt took the whole budget
    assert snapshot.recent == ()
    table = snapshot.block_map
    assert table is not None and table.num_blocks == NUM_BLOCKS
    assert table.block_tables == (("first", tuple(first.block_ids)),)
    assert snapshot.kv.num_used == len(first.block_ids) == 2  # 8 tokens in blocks of 4
    timelines = dict(snapshot.timelines)
    assert timelines["unknown"] is None
    timeline = timelines["first"].to_wire()
    assert timeline["request_id"] == "first" and timeline["first_scheduled_s"] is not None
    assert timeline["num_tokens_total"] == 0 and timeline["token_times_s"] == []
    aborted = engine.abort_request("second")
    assert aborted is second
    after = engine.snapshot(SnapshotScope(include_requests=True), recent=[aborted])
    assert after.recent is not None and [r.request_id for r in after.recent] == ["second"]
    assert (after.recent[0].state, after.recent[0].finish_reason) == ("finished", "abort")
    assert [row.request_id for row in after.requests or ()] == ["first"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        after.queue.waiting = 5  # type: ignore[misc]


def test_the_snapshot_types_load_no_heavy_library():
    """The daemon's control plane imports them; torch must stay out of it."""
    loaded = SourceTree(REPO_ROOT).loaded("llmd.engine.engine_snapshot")
    assert not {"torch", "numpy", "transformers", "triton"} & set(loaded)
