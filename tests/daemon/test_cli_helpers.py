"""Pieces of `llmd serve/status` that need no daemon: status formatting, the detach wait."""

from __future__ import annotations

import subprocess
import sys

import pytest

from llmd.client.status_report import format_status, status_report
from llmd.daemon.detach import DaemonStartError, _wait_until_healthy
from llmd.protocol import parse_address
from llmd.protocol.engine_sections import KVUsage, QueueCounts
from tests.protocol.snapshot_samples import daemon_section, sample_snapshot

SNAPSHOT = sample_snapshot(
    daemon=daemon_section(pid=42, address="ipc:///x.sock", uptime_s=3725.0, num_in_flight=3),
    queue=QueueCounts(waiting=1, running=2, preempted=0, preemptions_total=0),
    kv=KVUsage(16, 64, num_used=10, num_cached=5, num_free=49, prefix_query_tokens=10,
               prefix_hit_tokens=5),
)  # fmt: skip


def test_status_report_and_text():
    report = status_report(SNAPSHOT)
    assert report["queue"] == {"in_flight": 3, "waiting": 1, "running": 2, "preempted": 0}
    text = format_status(report)
    assert "pid       42  up 1h02m05s" in text
    assert "3 in flight: 1 waiting, 2 running, 0 preempted" in text
    assert "10/64 blocks used (16%), 5 cached, 49 free; prefix hit rate 50%" in text
    assert "tools     calls of tool_choice auto read as -" in text  # an older daemon
    llama = sample_snapshot(daemon=daemon_section(tool_call_parser="llama3"))
    assert status_report(llama)["tool_call_parser"] == "llama3"
    assert "tools     calls of tool_choice auto read as llama3" in format_status(
        status_report(llama)
    )


def test_status_of_an_moe_model_shows_its_experts_and_a_dense_one_does_not():
    import dataclasses

    from llmd.protocol.moe_section import MoeSection

    moe = dataclasses.replace(
        sample_snapshot(daemon=daemon_section(num_experts=8, num_experts_per_token=2,
                                              num_moe_layers=2)),
        moe=MoeSection(((3, 1, 0, 0, 0, 0, 0, 0), (1, 1, 1, 1, 0, 0, 0, 0))),
    )  # fmt: skip
    moe = dataclasses.replace(
        moe, hardware=dataclasses.replace(moe.hardware, experts_touched_per_step=5.5)
    )
    report = status_report(moe)
    # Layer 0: busiest 3 tokens against a mean of 4 / 8 = 0.5: 6x; layer 1: 2x.
    assert report["moe"]["max_imbalance"] == pytest.approx(6.0)
    assert (
        "experts   top-2 of 8 in 2 MoE layers; 5.5 (layer, expert) pairs touched per step; "
        "busiest expert 6.00x the mean"
    ) in format_status(report)
    assert "moe" not in status_report(SNAPSHOT) and "experts" not in format_status(
        status_report(SNAPSHOT)
    )


def test_status_of_a_dead_engine_has_no_engine_numbers():
    snapshot = sample_snapshot(daemon=daemon_section(state="dead", error="boom"))
    text = format_status(status_report(snapshot))
    assert "state     dead (boom)" in text
    assert "-/- blocks used" in text and "- waiting" in text


def test_detached_child_that_dies_reports_its_log(tmp_path):
    log_path = tmp_path / "daemon.log"
    log_path.write_text("an earlier run\n")
    offset = log_path.stat().st_size
    with open(log_path, "a") as log:
        child = subprocess.Popen(
            [sys.executable, "-c", "import sys; print('model_not_found: no model', "
             "file=sys.stderr); sys.exit(3)"],
            stderr=log,
        )  # fmt: skip
    address = parse_address(f"ipc://{tmp_path / 'never.sock'}")
    with pytest.raises(DaemonStartError) as error:
        _wait_until_healthy(child, address, log_path, offset, timeout_s=30)
    message = str(error.value)
    assert "exited with code 3" in message and "model_not_found: no model" in message
    assert "an earlier run" not in message


def test_python_m_llmd_daemon_takes_only_json_options(capsys):
    """Flags are `llmd serve`'s: the detached daemon's entry point parses none of them."""
    from llmd.daemon.__main__ import EXIT_USAGE, main

    assert main(["--model", "tiny"]) == EXIT_USAGE
    assert "run `llmd serve`" in capsys.readouterr().err


def test_status_names_the_kv_dtype_and_its_bytes_per_token():
    """The KV cache's own dtype (fp8 under a bf16 model here) sizes its bytes per token;
    a daemon that predates the field reports the model's dtype."""
    base = daemon_section(kv_cache_dtype="")
    per_element = 2 * base.num_layers * base.num_kv_heads * base.head_dim
    older = status_report(sample_snapshot(daemon=base))
    assert older["kv_cache_dtype"] == base.dtype
    fp8 = status_report(
        sample_snapshot(daemon=daemon_section(dtype="bfloat16", kv_cache_dtype="float8_e4m3fn"))
    )
    assert fp8["kv_cache_dtype"] == "float8_e4m3fn"
    assert fp8["kv_bytes_per_token"] == per_element  # one byte an element
    assert f"; float8_e4m3fn, {per_element} B/token" in format_status(fp8)
    old_wire = sample_snapshot(daemon=base).to_wire()
    del old_wire["daemon"]["kv_cache_dtype"]  # a snapshot from before the field
    assert type(SNAPSHOT).from_wire(old_wire).daemon.kv_dtype == base.dtype
