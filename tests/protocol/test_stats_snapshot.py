"""The typed stats snapshot on the wire: round trips, lenient additions, strict mistakes."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from llmd.errors import InvalidParameterError
from llmd.metrics import encode_block_map
from llmd.protocol import (
    SNAPSHOT_VERSION,
    ProtocolError,
    StatsReply,
    StatsSnapshot,
    decode_daemon_message,
    encode,
    pack_stats_reply,
    pack_value,
)
from llmd.protocol.engine_sections import KVUsage, QueueCounts, RequestRow, RequestTimeline
from llmd.protocol.grammar_section import GrammarSection
from llmd.protocol.metrics_sections import HistogramData, WindowSummary
from llmd.protocol.stats_snapshot import CpuPlacementSection
from llmd.wait_breakdown import WaitBreakdown
from tests.protocol.snapshot_samples import DAEMON, sample_snapshot

ROW = RequestRow(
    request_id="req-1", label="web-7", state="running", waiting_on=None, wait_s=0.25,
    finish_reason=None, priority=0, num_prompt_tokens=40, num_generated_tokens=3,
    max_tokens=16, num_computed_tokens=42, num_cached_tokens=16, num_blocks=3,
    num_preemptions=1, prefill_progress=1.0, decode_progress=0.1875, age_s=1.5, ttft_s=0.5,
    client_id="c-1",
)  # fmt: skip
TIMELINE = RequestTimeline(
    request_id="req-1", label=None, state="finished", waiting_on=None,
    waits=WaitBreakdown(num_prefill_chunks=2, prefill_chunk_sizes=(32, 8)), age_s=2.0,
    first_scheduled_s=0.01, first_token_s=0.5, finished_s=2.0,
    events=((0.01, "prefill", 32), (0.2, "preempted", 0)), token_times_s=(0.5, 0.6),
    num_tokens_total=2,
)  # fmt: skip


GRAMMAR = GrammarSection(
    requests_by_kind={"json": 3, "regex": 1}, num_compiles=2, num_cache_hits=2,
    num_compile_failures=1, num_compile_timeouts=0, num_waiting=1,
    compile_time=WindowSummary(2, 0.01, 0.005, 0.014, 0.015, 0.015),
    compile_histogram=HistogramData(bounds=(0.01,), counts=(1, 1), sum=0.02, count=2),
)  # fmt: skip


def full_snapshot() -> StatsSnapshot:
    """Every optional section present, nested types of every kind."""
    return sample_snapshot(
        daemon=dataclasses.replace(DAEMON, cpu_placement=CpuPlacementSection((1,), (0,))),
        queue=QueueCounts(waiting=2, running=1, preempted=1, preemptions_total=3),
        kv=KVUsage(16, 32, 3, 4, 25, prefix_query_tokens=40, prefix_hit_tokens=16),
        requests=(ROW,),
        num_requests=1,
        recent=(),
        timeline=TIMELINE,
        block_map=encode_block_map([0, 0, -1, -2]),
        grammar=GRAMMAR,
    )  # fmt: skip


def test_a_full_snapshot_round_trips_through_a_stats_reply():
    snapshot = full_snapshot()
    reply = decode_daemon_message(encode(StatsReply("s", snapshot)))
    assert isinstance(reply, StatsReply) and reply.snapshot == snapshot
    timeline, block_map = reply.snapshot.timeline, reply.snapshot.block_map
    assert timeline is not None and timeline.events[1][1] == "preempted"
    assert block_map is not None and block_map.cells() == [0, 0, -1, -2]


def test_the_spliced_reply_decodes_to_the_same_message():
    snapshot = full_snapshot()
    spliced = pack_stats_reply("s", pack_value(snapshot.to_wire()))
    assert decode_daemon_message(spliced) == StatsReply("s", snapshot)


def test_the_wire_form_is_plain_data_with_derived_kv_figures():
    wire = full_snapshot().to_wire()
    assert wire["snapshot_version"] == SNAPSHOT_VERSION
    assert wire["kv"]["usage"] == 3 / 32 and wire["kv"]["prefix_hit_rate"] == 0.4
    assert wire["requests"][0]["client_id"] == "c-1"
    assert wire["timeline"]["events"][0] == [0.01, "prefill", 32]
    assert wire["timeline"]["waits"]["prefill_chunk_sizes"] == [32, 8]
    assert wire["daemon"]["cpu_placement"] == {"forward_cpu_ids": [1], "serving_cpu_ids": [0]}
    assert wire["latency"]["ttft"] == {
        "count": 0, "mean": None, "p50": None, "p90": None, "p99": None, "max": None
    }  # fmt: skip


def test_keys_a_newer_daemon_adds_are_ignored():
    wire = full_snapshot().to_wire()
    wire["gpu_memory"] = {"used": 1}
    wire["kv"]["num_swapped"] = 0
    wire["requests"][0]["speculated_tokens"] = 4
    assert StatsSnapshot.from_wire(wire) == full_snapshot()


def test_a_snapshot_from_a_daemon_before_grammar_metrics_still_reads():
    wire = full_snapshot().to_wire()
    del wire["grammar"], wire["step"]["grammar_ms"], wire["totals"]["phase_s"]
    snapshot = StatsSnapshot.from_wire(wire)
    assert snapshot.grammar is None and snapshot.step.grammar_ms is None
    assert snapshot.totals.phase_s == {}
    partial = full_snapshot().to_wire()
    partial["grammar"] = {"num_waiting": 3}  # a section with fewer fields: zeros for the rest
    grammar = StatsSnapshot.from_wire(partial).grammar
    assert grammar == GrammarSection(num_waiting=3) and grammar.num_requests == 0


def test_the_grammar_section_is_plain_data_on_the_wire():
    grammar = full_snapshot().to_wire()["grammar"]
    assert grammar["requests_by_kind"] == {"json": 3, "regex": 1}
    assert grammar["compile_histogram"] == {
        "bounds": [0.01], "counts": [1, 1], "sum": 0.02, "count": 2
    }  # fmt: skip
    assert StatsSnapshot.from_wire(full_snapshot().to_wire()).grammar.num_requests == 4


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        (("kv", "num_used"), "three", "kv.num_used"),
        (("queue", "running"), None, "queue.running"),
        (("requests", 0, "ttft_s"), "soon", "requests[0].ttft_s"),
        (("timeline", "events", 0), [0.1, "prefill"], "timeline.events[0]"),
        (("latency", "tpot", "p99"), [1], "latency.tpot.p99"),
        (("daemon", "cpu_placement", "forward_cpu_ids", 0), "one", "daemon.cpu_placement"),
        (("block_map",), [1, 2], "block_map"),
        (("daemon",), "up", "daemon"),
    ],
)
def test_a_mistyped_field_is_named_by_its_path(path, value, named):
    wire = copy.deepcopy(full_snapshot().to_wire())
    target = wire
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(InvalidParameterError) as caught:
        StatsSnapshot.from_wire(wire)
    assert caught.value.parameter is not None and caught.value.parameter.startswith(named)


def test_a_missing_required_field_is_named():
    wire = full_snapshot().to_wire()
    del wire["daemon"]["model"]
    with pytest.raises(InvalidParameterError) as caught:
        StatsSnapshot.from_wire(wire)
    assert caught.value.parameter == "daemon.model"


def test_a_reply_with_a_bad_snapshot_names_the_field_inside_it():
    wire = full_snapshot().to_wire()
    wire["totals"]["steps"] = 1.5
    payload = pack_stats_reply("s", pack_value(wire))
    with pytest.raises(InvalidParameterError) as caught:
        decode_daemon_message(payload)
    assert caught.value.parameter == "snapshot.totals.steps"


@pytest.mark.parametrize("version", [None, 1, SNAPSHOT_VERSION + 1, True, "2"])
def test_another_snapshot_version_is_refused(version):
    wire = full_snapshot().to_wire()
    if version is None:
        del wire["snapshot_version"]
    else:
        wire["snapshot_version"] = version
    with pytest.raises(ProtocolError, match="snapshot version"):
        StatsSnapshot.from_wire(wire)
