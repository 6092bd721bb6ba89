"""`llmd top` says why the selected request waited: reasons, seconds, chunks, its label.

Pilot against the fake client, with the sample snapshots' live requests given waits: the
waiting one is held by kv_blocks (and has a label), the prefilling one waited on the token
budget; both at 80x24 (zoomed, key 8) and on a large screen beside the table.
"""

from __future__ import annotations

import pytest

from llmd.protocol import StatsSnapshot
from llmd.tui.top.app import create_top_app
from llmd.wait_breakdown import WAIT_REASONS
from tests.tui.fake_client import FakeAsyncClient
from tests.tui.sample_snapshots import busy_wire, typed
from tests.tui.screen_text import screen_text
from tests.tui.waiting import wait_for

LABEL = "trace-7f3a"
WAITS = {
    "req-16": {  # waiting now, behind too few free blocks
        "waiting_on": "kv_blocks",
        "wait_s": {"queue": 0.05, "kv_blocks": 1.75},
        "num_wait_steps": {"queue": 1, "kv_blocks": 140},
        "token_budget_taken_by": None,
        "num_prefill_chunks": 0,
        "prefill_chunk_sizes": [],
        "num_cached_tokens": 0,
    },
    "req-15": {  # prefilling: it waited while another prompt took each step's budget
        "waiting_on": None,
        "wait_s": {"queue": 0.02, "token_budget": 0.6},
        "num_wait_steps": {"queue": 1, "token_budget": 48},
        "token_budget_taken_by": "req-14",
        "num_prefill_chunks": 4,
        "prefill_chunk_sizes": [8, 8, 8, 4],
        "num_cached_tokens": 16,
    },
}


def waits_snapshot(step: int, timeline_request_id: str | None) -> StatsSnapshot:
    """The busy sample snapshot with WAITS in its rows and the selected request's timeline."""
    snapshot = busy_wire(step, timeline_request_id)
    for row in snapshot["requests"]:
        waits = WAITS.get(row["request_id"])
        if waits is not None:
            row["waiting_on"] = waits["waiting_on"]
            row["wait_s"] = sum(waits["wait_s"].values())
    snapshot["requests"][5]["label"] = LABEL
    waits = WAITS.get(timeline_request_id or "")
    if waits is not None:
        timeline = snapshot["timeline"]
        if timeline_request_id == "req-16":  # it never ran
            timeline.update(state="waiting", first_scheduled_s=None, first_token_s=None,
                            events=[], token_times_s=[], num_tokens_total=0)  # fmt: skip
        timeline["waiting_on"] = waits["waiting_on"]
        timeline["label"] = LABEL if timeline_request_id == "req-16" else None
        timeline["waits"] = {
            **{key: value for key, value in waits.items() if key != "waiting_on"},
            "wait_s": {**dict.fromkeys(WAIT_REASONS, 0.0), **waits["wait_s"]},
            "num_wait_steps": {**dict.fromkeys(WAIT_REASONS, 0), **waits["num_wait_steps"]},
            "num_prefill_tokens": sum(waits["prefill_chunk_sizes"]),
            "num_preemptions": 0,
        }
    return typed(snapshot)


async def select(pilot, client, request_id: str, step: int = 0) -> str:
    """Move the selection to `request_id`, deliver its timeline, return the screen's text."""
    app = pilot.app
    await client.push(waits_snapshot(step, app.feed.timeline_request_id))
    await wait_for(pilot, lambda: app.model.snapshot is not None)
    for _ in range(10):
        if app.model.selected_request_id == request_id:
            break
        await pilot.press("down")
    assert app.model.selected_request_id == request_id
    for index in range(1, 10):  # until the feed asks for its timeline and one arrives
        snapshot = waits_snapshot(step + index, app.feed.timeline_request_id)
        await client.push(snapshot)
        await wait_for(pilot, lambda snapshot=snapshot: app.model.snapshot is snapshot)
        timeline = app.model.view().timeline
        if timeline is not None and timeline.request_id == request_id:
            break
    else:
        raise AssertionError(f"the timeline of {request_id} never arrived")
    await pilot.pause()
    return screen_text(app)


def make_app():
    client = FakeAsyncClient()
    app = create_top_app(
        lambda: client, "ipc:///tmp/fake.sock", interval_s=0.25, clock=lambda: 0.0,
        slow_redraw_s=0.0,
    )  # fmt: skip
    return app, client


@pytest.mark.parametrize("size", [(120, 40), (200, 50)])
async def test_the_timeline_names_each_wait_reason_beside_the_table(size):
    app, client = make_app()
    async with app.run_test(size=size) as pilot:
        held = await select(pilot, client, "req-16")
        assert "req-16 trace-7f3a waiting · age" in held
        assert "waited 1.8s: kv_blocks 1.75s, queue 50ms · now" in held  # may wrap there
        assert "0 prefill chunks · 0 cached · 0" in held
        assert f"\n {LABEL} " in held  # the table names it by its label
        await pilot.press("up")
        budget = await select(pilot, client, "req-15", step=10)
        assert "waited 620ms: token_budget 600ms, queue 20ms" in budget
        assert "budget taken by req-14" in budget and "now kv_blocks" not in budget
        assert "4 prefill chunks (3×8+4) · 16 cached · 0" in budget


async def test_the_zoomed_timeline_says_it_all_at_80x24():
    app, client = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await select(pilot, client, "req-16")
        await pilot.press("8")
        await pilot.pause()
        held = screen_text(app)
        await pilot.press("8")
        await pilot.press("up")
        await select(pilot, client, "req-15", step=10)
        await pilot.press("8")
        await pilot.pause()
        budget = screen_text(app)
    for zoomed in (held, budget):
        assert "━8 Timeline" in zoomed and "━7 Requests" not in zoomed
        assert all(len(line) <= 80 for line in zoomed.splitlines())
    assert "req-16 trace-7f3a waiting · age" in held
    assert "waited 1.8s: kv_blocks 1.75s, queue 50ms · now kv_blocks" in held
    assert "0 prefill chunks · 0 cached · 0 preemptions" in held
    assert "waited 620ms: token_budget 600ms, queue 20ms · budget taken by req-14" in budget
    assert "4 prefill chunks (3×8+4) · 16 cached · 0 preemptions" in budget
