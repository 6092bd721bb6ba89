"""Every TTFT explained, through a real daemon: the `finished` message says why it waited.

Two in-process daemons on the tiny model, each with one limit made tiny: a 16-block KV
pool (the second request cannot fit beside the first), and an 8-token step budget (the
first request's long prompt takes every step). Each test checks the reason, its seconds
and steps, the reasons that must be zero, and the sums against the message's own timings.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from llmd.client import Accepted, AsyncClient, Client
from llmd.errors import InvalidParameterError
from llmd.protocol import GenerateRequest
from llmd.wait_breakdown import (
    KV_BLOCKS,
    MAX_NUM_SEQS,
    PREEMPTED,
    QUEUE,
    TOKEN_BUDGET,
    WAIT_REASONS,
    WaitBreakdown,
)
from tests.daemon.harness import inprocess_daemon

LABEL = "trace-7f3a/b:1"


def prompt(first_id: int, num_tokens: int) -> list[int]:
    """Token ids starting at `first_id` (prompts with other first ids share no KV block)."""
    return [first_id + i % 150 for i in range(num_tokens)]


def params(max_tokens: int) -> dict:
    return {"max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True}


def assert_sums(breakdown: WaitBreakdown, timings: dict) -> None:
    """The reasons add up to the daemon's own queue time (no preemption here)."""
    assert breakdown.wait_s[PREEMPTED] == 0.0
    assert breakdown.total_wait_s == pytest.approx(timings["queue"], abs=1e-6)
    assert timings["ttft"] == pytest.approx(timings["queue"] + timings["prefill"], abs=1e-6)


async def first_then_second(address: str, first: dict, second: dict, on_accepted=None):
    """Send `first`, then at once `second`, on one connected client (so in that order);
    their finished messages and engine request ids. `on_accepted(client, id)` runs when the
    second is accepted, while it waits."""
    accepted: dict[str, str] = {}
    async with AsyncClient(address) as client:
        await client.health()  # connected: the two sends below leave in order, at once

        async def run(name: str, request: dict):
            finished = None
            async for event in client.stream(**request):
                if isinstance(event, Accepted):
                    accepted[name] = event.request_id
                    if on_accepted is not None and name == "second":
                        await on_accepted(client, event.request_id)
                finished = event
            return finished

        results = await asyncio.gather(run("first", first), run("second", second))
    return results, accepted


def test_a_request_held_back_by_a_full_kv_pool_says_kv_blocks(tiny_model_dir, tmp_path, caplog):
    # 16 blocks of 16 tokens; the first (17-token prompt, 200 outputs) holds 2 or more blocks
    # for its whole life, the second (240-token prompt: 15 blocks) needs all but one.
    address = f"ipc://{tmp_path / 'kv.sock'}"
    engine = {"num_blocks": 16, "block_size": 16, "max_model_len": 256}
    caplog.set_level(logging.DEBUG, logger="llmd.daemon.requests")
    seen: dict[str, dict] = {}

    async def look_while_waiting(client, request_id: str) -> None:
        snapshot = await client.stats(timeline_request_id=request_id)
        seen["row"] = next(r for r in snapshot.requests if r.request_id == request_id)
        seen["timeline"] = snapshot.timeline

    with inprocess_daemon(tiny_model_dir, address, engine=engine):
        (first, second), accepted = asyncio.run(
            first_then_second(
                address,
                {"prompt_token_ids": prompt(10, 17), "params": params(200)},
                {"prompt_token_ids": prompt(200, 240), "params": params(1), "label": LABEL},
                look_while_waiting,
            )
        )
    assert first.finish_reason == second.finish_reason == "length"
    waits = WaitBreakdown.from_dict(second.breakdown)
    assert waits.wait_s[KV_BLOCKS] > 0 and waits.num_wait_steps[KV_BLOCKS] >= 1
    for reason in (MAX_NUM_SEQS, TOKEN_BUDGET, PREEMPTED):
        assert waits.wait_s[reason] == 0.0 and waits.num_wait_steps[reason] == 0, reason
    assert waits.token_budget_taken_by is None
    assert waits.num_prefill_chunks == 1 and waits.prefill_chunk_sizes == (240,)
    assert waits.num_cached_tokens == 0 and waits.num_preemptions == 0
    assert_sums(waits, second.timings)
    # While it waited, the stats said so: its label, what holds it, and its timeline's waits.
    assert seen["row"].label == LABEL and seen["row"].state == "waiting"
    assert seen["row"].waiting_on == KV_BLOCKS and seen["row"].wait_s >= 0
    assert seen["timeline"].label == LABEL
    assert seen["timeline"].waiting_on == KV_BLOCKS
    assert set(seen["timeline"].waits.wait_s) == set(WAIT_REASONS)
    # The daemon's log line about the request names it by its label.
    lines = [r.getMessage() for r in caplog.records if r.name == "llmd.daemon.requests"]
    line = next(m for m in lines if f"request {accepted['second']} (label {LABEL})" in m)
    assert "finished (length)" in line and "kv_blocks" in line


def test_a_request_held_back_by_the_token_budget_says_token_budget(tiny_model_dir, tmp_path):
    # An 8-token budget: the first request's 240-token prompt takes 30 whole steps.
    address = f"ipc://{tmp_path / 'budget.sock'}"
    engine = {"num_blocks": 64, "block_size": 16, "max_model_len": 256,
              "max_num_batched_tokens": 8}  # fmt: skip
    with inprocess_daemon(tiny_model_dir, address, engine=engine):
        (first, second), accepted = asyncio.run(
            first_then_second(
                address,
                {"prompt_token_ids": prompt(10, 240), "params": params(4)},
                {"prompt_token_ids": prompt(200, 40), "params": params(2)},
            )
        )
    waits = WaitBreakdown.from_dict(second.breakdown)
    assert waits.wait_s[TOKEN_BUDGET] > 0 and waits.num_wait_steps[TOKEN_BUDGET] >= 1
    for reason in (KV_BLOCKS, MAX_NUM_SEQS, PREEMPTED):
        assert waits.wait_s[reason] == 0.0 and waits.num_wait_steps[reason] == 0, reason
    assert waits.token_budget_taken_by == accepted["first"]
    assert waits.num_prefill_chunks >= 5  # 40 tokens, at most 8 a step
    assert sum(waits.prefill_chunk_sizes) == waits.num_prefill_tokens == 40
    assert max(waits.prefill_chunk_sizes) <= 8
    assert_sums(waits, second.timings)
    first_waits = WaitBreakdown.from_dict(first.breakdown)
    assert first_waits.prefill_chunk_sizes == (8,) * 30 and first_waits.num_prefill_chunks == 30
    assert set(first_waits.wait_s) == set(WAIT_REASONS)
    assert first_waits.wait_s[QUEUE] == pytest.approx(first.timings["queue"], abs=1e-6)


def test_a_label_must_be_short_and_plain():
    for bad in ("has space", "x" * 129, "", "new\nline"):
        with pytest.raises(InvalidParameterError) as raised:
            GenerateRequest(id="c-1", prompt="hi", label=bad)
        assert raised.value.parameter == "label"
    assert GenerateRequest(id="c-1", prompt="hi", label=LABEL).label == LABEL


def test_the_blocking_client_reads_the_breakdown(tiny_model_dir, tmp_path):
    address = f"ipc://{tmp_path / 'plain.sock'}"
    with inprocess_daemon(tiny_model_dir, address), Client(address) as client:
        completion = client.generate(prompt_token_ids=prompt(10, 40), params=params(3))
    assert completion.waits is not None
    assert completion.waits.total_wait_s == pytest.approx(completion.timings["queue"], abs=1e-6)
    assert completion.waits.num_prefill_chunks == 1
