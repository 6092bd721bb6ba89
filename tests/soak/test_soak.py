"""Fast subset of the soak suite (scripts/soak.py --quick) against one real daemon process.

The scenarios are the script's own functions with reduced counts; each test asserts the
counted figures, not just the verdict. The tests share one daemon, except the kill -9 test,
which kills and restarts a daemon of its own: any order, or any one test alone, runs the same.
The marker keeps them out of the default run; scripts/test.sh runs them on their own.
"""

from __future__ import annotations

import random

import pytest

from llmd.errors import LLMDError
from llmd.protocol import CLIENT_MESSAGE_TYPES, parse_message, unpack
from scripts.soak_suite.daemon_process import DaemonProcess
from scripts.soak_suite.malformed import malformed_frame
from scripts.soak_suite.plan import DAEMON_ARGS, MAX_MESSAGE_BYTES, run_scenario

pytestmark = pytest.mark.soak


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    """One `llmd serve` (default model, soft descriptor limit 1024) for the whole module."""
    process = DaemonProcess(tmp_path_factory.mktemp("soak"), extra_args=DAEMON_ARGS)
    try:
        process.start()
        yield process
    finally:
        process.stop()  # also when it never became healthy


def test_malformed_frames_are_never_valid_requests():
    """The generator's premise: every frame it makes is refused, so exactly one reply is due."""
    rng = random.Random(1)
    for index in range(2000):
        frames = malformed_frame(rng, index, MAX_MESSAGE_BYTES)
        if len(frames) != 1 or len(frames[0]) > MAX_MESSAGE_BYTES:
            continue  # refused for its framing or size before decoding
        with pytest.raises(LLMDError):
            parse_message(unpack(frames[0], MAX_MESSAGE_BYTES), CLIENT_MESSAGE_TYPES)


def test_concurrent_streams_all_complete(daemon):
    result = run_scenario("concurrency", daemon, is_quick=True)
    assert result.counts["num_completed"] == result.counts["num_sent"] == 64, result.notes
    assert result.counts["used_blocks_at_idle"] == 0
    assert result.passed


def test_aborted_streams_free_their_blocks_within_a_second(daemon):
    result = run_scenario("aborts", daemon, is_quick=True)
    assert result.counts["outcomes"] == {"aborted": 10}, result.notes
    assert result.counts["num_freed"] == 10
    assert result.counts["freed_max_ms"] <= 1000
    assert result.passed


def test_mixed_lifecycles_leak_nothing(daemon):
    result = run_scenario("lifecycles", daemon, is_quick=True)
    assert result.counts["num_unexpected"] == 0, result.counts["outcomes"]
    assert sum(result.counts["outcomes"].values()) == 300
    assert result.counts["used_blocks_at_idle"] == 0
    assert result.counts["num_in_flight_at_idle"] == 0
    assert result.passed, result.notes


def test_every_malformed_frame_is_answered_with_a_typed_error(daemon):
    result = run_scenario("malformed", daemon, is_quick=True)
    counts = result.counts
    assert counts["num_sent"] == 3000
    assert counts["num_unanswered"] == 0 and counts["num_replies"] == 3000, counts
    assert "internal" not in counts["codes"], counts["codes"]
    assert counts["num_non_error_replies"] == 0
    assert result.passed, result.notes


def test_bad_requests_get_typed_errors_naming_the_field(daemon):
    result = run_scenario("bad_requests", daemon, is_quick=True)
    assert result.counts["num_typed_naming_field"] == result.counts["num_sent"], result.counts
    assert result.passed, result.notes


def test_subscriptions_at_the_minimum_interval_never_stall_generation(daemon):
    """No generate waits on 64 subscriptions at the minimum interval (100 ms).

    The 20% latency figure is the full soak's, not CI's.
    """
    result = run_scenario("stats", daemon, is_quick=True)
    assert result.counts["subscriber"]["num_snapshots"] > 0
    assert result.counts["subscriber"]["num_internal"] == 0
    assert result.counts["loaded_max_ms"] < 5000, result.counts  # 5 s: a sample was cut short
    assert result.checks["daemon still running"]


def test_many_connections_at_a_low_descriptor_limit(daemon):
    result = run_scenario("connections", daemon, is_quick=True)
    assert result.counts["num_connections"] == 1500
    assert result.counts["daemon_returncode"] is None, result.notes
    assert result.passed, result.notes


def test_a_flood_past_a_hard_descriptor_limit_is_refused_not_fatal(daemon):
    """Hard limit 1,024 (which the daemon cannot raise) and 1,500 connections."""
    result = run_scenario("connections_hard_limit", daemon, is_quick=True)
    assert result.counts["daemon_hard_nofile"] == 1024
    assert result.counts["num_connections"] == 1500
    assert result.counts["daemon_returncode"] is None, result.notes
    assert result.counts["num_refused_connections"] > 0, result.counts
    assert result.counts["num_health_answered"] < 1500, result.counts  # the refused get no reply
    assert result.passed, result.notes


def test_kill_and_restart_loses_nothing_and_runs_nothing_stale(tmp_path_factory):
    own = DaemonProcess(tmp_path_factory.mktemp("crash"), extra_args=DAEMON_ARGS)
    try:
        own.start()
        result = run_scenario("crash", own, is_quick=True)
    finally:
        own.stop()
    assert result.counts["outcomes"] == {"told": 8}, result.counts
    assert result.counts["rounds_where_new_daemon_ran_old_requests"] == []
    assert result.passed, result.notes
