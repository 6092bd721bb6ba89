"""`llmd top`'s header fits any width: it abbreviates, then wraps, before it cuts anything."""

from __future__ import annotations

import pytest

from tests.tui.sample_snapshots import WAITING, busy_wire, typed
from tests.tui.screen_text import screen_text
from tests.tui.test_top_app import make_app
from tests.tui.waiting import wait_for

LONG_MODEL = {
    "model": "/models/SmolLM2-360M-Instruct",
    "device": "cuda",
    "dtype": "bfloat16",
    "uptime_s": 7_380.0,
    "max_num_batched_tokens": 8192,
    "max_num_seqs": 256,
}


async def header_after(size: tuple[int, int], **daemon) -> tuple[list[str], str]:
    """The header's lines and the whole screen after the test snapshots (daemon facts
    overridden by `daemon`)."""
    app, client, _ = make_app()
    async with app.run_test(size=size) as pilot:
        for step in range(len(WAITING)):
            wire = busy_wire(step, app.feed.timeline_request_id)
            wire["daemon"].update(daemon)
            snapshot = typed(wire)
            await client.push(snapshot)
            await wait_for(pilot, lambda snapshot=snapshot: app.model.snapshot is snapshot)
        await pilot.pause()
        num_lines = app.query_one("#header").size.height
        text = screen_text(app)
    return [line.strip() for line in text.splitlines()[:num_lines]], text


async def test_at_80_columns_the_header_abbreviates_instead_of_cutting():
    lines, _ = await header_after((80, 24))
    assert lines == [
        "● live │ tiny-llama │ cpu/fp32 │ 0.5 MB, kv 512 B/token │ up 3m07s",
        "fcfs 2048 tok/step ≤8 seqs",
    ]


@pytest.mark.parametrize("size", [(80, 24), (80, 40)])
async def test_a_header_too_long_for_one_line_wraps_whole_facts(size):
    lines, text = await header_after(size, **LONG_MODEL)
    facts = ["SmolLM2-360M-Instruct", "cuda/bf16", "up 2h03m", "fcfs 8192 tok/step ≤256 seqs"]
    header = " │ ".join(lines)
    assert all(fact in header for fact in facts)
    assert "…" not in lines[0] and "…" not in lines[1]
    assert len(lines) == (2 if size[1] < 36 else 3)  # a tall screen adds where it is served from
    assert "━1 Queue" in text.splitlines()[len(lines)]  # the panels moved down, none overlap


async def test_a_wide_header_keeps_the_full_wording_on_one_line():
    lines, _ = await header_after((200, 50), **LONG_MODEL)
    assert lines[0] == (
        "llmd top │ SmolLM2-360M-Instruct │ cuda/bfloat16 │ weights 0.5 MB, kv 256 B/token │ "
        "up 2h03m │ fcfs, budget 8192 tok/step, ≤256 seqs"
    )
    assert lines[1].startswith("ipc://") and lines[1].endswith("● live")


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
async def test_a_kv_cache_in_another_dtype_is_named_next_to_the_models(size):
    lines, _ = await header_after(size, dtype="bfloat16", kv_cache_dtype="float8_e4m3fn")
    header = " │ ".join(lines)
    assert ("cpu/bf16 kv fp8" if size[0] == 80 else "cpu/bfloat16 kv fp8") in header
    same, _ = await header_after(size, kv_cache_dtype="float32")
    assert ("cpu/fp32 │" if size[0] == 80 else "cpu/float32 │") in " │ ".join(same)  # unsaid


async def test_a_quantized_model_shows_its_scheme_next_to_the_dtype():
    lines, _ = await header_after((80, 24), dtype="bfloat16", quantization="awq w4a16-g128")
    assert "cpu/bf16 w4a16-g128" in " │ ".join(lines)
    dense, _ = await header_after((80, 24), quantization="")
    assert "cpu/fp32 │" in " │ ".join(dense)


@pytest.mark.parametrize(("size", "sizes"), [
    ((80, 24), "96.3 MB, kv 128 B/token"),
    ((200, 50), "weights 96.3 MB, kv 128 B/token"),
])  # fmt: skip
async def test_the_header_shows_the_weight_bytes_and_the_kv_bytes_per_token(size, sizes):
    """2 layers x 2 kv heads x head dim 16 x (key + value) x 1 byte of fp8 = 128 B/token."""
    lines, _ = await header_after(
        size, dtype="bfloat16", kv_cache_dtype="float8_e4m3fn",
        quantization="awq w4a16-g128", weight_bytes=96_300_000,
    )  # fmt: skip
    header = " │ ".join(lines)
    assert f" │ {sizes} │ " in header
    assert all(len(line) <= size[0] - 1 and "…" not in line for line in lines)


async def test_a_daemon_that_predates_weight_bytes_shows_only_the_kv_bytes():
    """2 layers x 2 kv heads x head dim 16 x (key + value) x 4 bytes of fp32 = 512 B/token."""
    lines, _ = await header_after((80, 24), weight_bytes=0)
    header = " │ ".join(lines)
    assert "cpu/fp32 │ kv 512 B/token │ " in header and " MB" not in header
