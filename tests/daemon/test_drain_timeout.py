"""A drain that runs out: requests longer than the drain limit are aborted and reported,
and the daemon exits within the limit (plus the forced-stop grace).

The limit is `llmd serve --drain-timeout`, unless `llmd stop --timeout` names another one.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

import pytest

from llmd.client import Client, Finished, TokenDelta
from llmd.protocol import ErrorReply
from tests.daemon.harness import (
    RawPeer,
    daemon_env,
    inprocess_daemon,
    run_cli,
    start_daemon,
    wait_dead,
)
from tests.scheduling_mode import MODES, mode_id

LONG = {"temperature": 0.0, "max_tokens": 200, "ignore_eos": True}
STEP_S = 0.02
"""Each step of the slowed in-process engines: 200 tokens take 4 s or more."""
EXIT_LIMIT_S = 15.0
"""Drain limit + the forced-stop grace (5 s) + shutdown, with room for a loaded machine."""


def _slow_down(engine: Any) -> None:
    step = engine.step

    def slow_step():
        time.sleep(STEP_S)
        return step()

    engine.step = slow_step


def _stop_while_streaming(address: str, stop_args: list[str]) -> tuple[list[Any], Any, float]:
    """Start a long stream, run `llmd stop ARGS` once it produces; (events, CLI result, s)."""
    with Client(address) as client:
        stream = client.stream("outlive the drain", params=LONG)
        events = []
        for event in stream:
            events.append(event)
            if isinstance(event, TokenDelta):
                break
        result: dict[str, Any] = {}
        started = time.monotonic()

        def stop() -> None:
            result["cli"] = run_cli(["stop", "--address", address, *stop_args], daemon_env())
            result["took_s"] = time.monotonic() - started

        stopper = threading.Thread(target=stop)
        stopper.start()
        events += list(stream)
        stopper.join(60)
    return events, result["cli"], result["took_s"]


def _assert_aborted(events: list[Any]) -> Finished:
    finished = events[-1]
    assert isinstance(finished, Finished), finished
    assert finished.finish_reason == "abort", finished
    delivered = [t for e in events if isinstance(e, TokenDelta) for t in e.token_ids]
    assert finished.token_ids == delivered and 0 < len(delivered) < LONG["max_tokens"]
    assert finished.usage["completion_tokens"] == len(delivered)
    return finished


@pytest.mark.parametrize("is_async", MODES, ids=mode_id)
def test_llmd_stop_applies_the_daemons_drain_timeout(tiny_model_dir, tmp_path, is_async):
    """Regression: `llmd stop` always sent its own 30 s limit, so `--drain-timeout` was
    ignored by it (the request here would have run to its end, 'drained')."""
    address = f"ipc://{tmp_path / 'd.sock'}"
    engine = {"async_scheduling": is_async}
    with inprocess_daemon(tiny_model_dir, address, engine=engine, drain_timeout_s=1.0) as daemon:
        _slow_down(daemon.engine)
        events, cli, took_s = _stop_while_streaming(address, [])
    _assert_aborted(events)
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.strip().endswith(": 0 requests drained, 1 aborted"), cli.stdout
    assert took_s < EXIT_LIMIT_S


@pytest.mark.parametrize("is_async", MODES, ids=mode_id)
def test_llmd_stop_timeout_overrides_the_drain_timeout(tiny_model_dir, tmp_path, is_async):
    address = f"ipc://{tmp_path / 't.sock'}"
    engine = {"async_scheduling": is_async}
    with inprocess_daemon(tiny_model_dir, address, engine=engine, drain_timeout_s=60.0) as daemon:
        _slow_down(daemon.engine)
        events, cli, took_s = _stop_while_streaming(address, ["--timeout", "1"])
    _assert_aborted(events)
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.strip().endswith(": 0 requests drained, 1 aborted"), cli.stdout
    assert took_s < EXIT_LIMIT_S


def test_a_drain_that_runs_out_reports_what_finished_and_what_was_aborted(tiny_model_dir, tmp_path):
    """Short requests finish within the limit, long ones are aborted: `llmd stop` counts both."""
    address = f"ipc://{tmp_path / 'm.sock'}"
    with inprocess_daemon(tiny_model_dir, address, drain_timeout_s=2.0) as daemon:
        _slow_down(daemon.engine)
        step, draining = daemon.engine.step, threading.Event()

        def step_once_draining():  # all four are in flight when the drain begins
            draining.wait(30)
            return step()

        daemon.engine.step = step_once_draining
        peer = RawPeer(address)
        lengths = {"short0": 5, "short1": 5, "long0": 200, "long1": 200}
        for client_id, max_tokens in lengths.items():
            peer.send_map(_generate(client_id, max_tokens))
        with Client(address) as client:
            while client.health()["num_in_flight"] < len(lengths):
                time.sleep(0.01)

        def open_when_draining() -> None:
            while daemon.state != "draining":
                time.sleep(0.01)
            draining.set()

        threading.Thread(target=open_when_draining, daemon=True).start()
        cli = run_cli(["stop", "--address", address], daemon_env())
        finished = _read_ends(peer, set(lengths))
        peer.close()
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.strip().endswith(": 2 requests drained, 2 aborted"), cli.stdout
    assert {k: v.finish_reason for k, v in finished.items()} == {
        "short0": "length", "short1": "length", "long0": "abort", "long1": "abort",
    }  # fmt: skip


def test_sigterm_with_a_drain_timeout_aborts_what_is_left_and_exits(tiny_model_dir, tmp_path):
    """A real `llmd serve --drain-timeout 1`: queued work far longer than the limit."""
    address = f"ipc://{tmp_path / 'p.sock'}"
    log_path = tmp_path / "daemon.log"
    process = start_daemon(
        tiny_model_dir, address, daemon_env(tmp_path), log_path,
        "--drain-timeout", "1", "--max-num-seqs", "1",
    )  # fmt: skip
    peer = RawPeer(address)
    try:
        client_ids = {f"q{index}" for index in range(40)}  # one at a time: seconds of work
        for client_id in sorted(client_ids):
            peer.send_map(_generate(client_id, 200))
        while not isinstance(peer.receive(timeout=30), TokenDelta):
            pass
        process.send_signal(signal.SIGTERM)
        started = time.monotonic()
        ends = _read_ends(peer, client_ids)
        assert wait_dead(process.pid, EXIT_LIMIT_S), "the daemon outlived its drain limit"
        took_s = time.monotonic() - started
    finally:
        peer.close()
        if process.poll() is None:
            process.kill()
        process.wait(10)
    assert process.returncode == 0, log_path.read_text()
    assert took_s < EXIT_LIMIT_S
    reasons = [end.finish_reason for end in ends.values()]
    assert set(reasons) <= {"length", "abort"} and reasons.count("abort") >= 30, reasons
    log = log_path.read_text()
    assert f"drain limit reached; aborting {reasons.count('abort')} request(s)" in log, log
    assert "Traceback" not in log, log


def _generate(client_id: str, max_tokens: int) -> dict[str, Any]:
    return {
        "type": "generate",
        "v": 1,
        "id": client_id,
        "stream": True,
        "prompt": f"drain {client_id}",
        "sampling_params": {"temperature": 0.0, "max_tokens": max_tokens, "ignore_eos": True},
    }


def _read_ends(peer: RawPeer, client_ids: set[str]) -> dict[str, Finished]:
    """Each request's Finished (an error reply fails the test), read until all ended."""
    ends: dict[str, Finished] = {}
    deadline = time.monotonic() + 60
    while set(ends) != client_ids:
        assert time.monotonic() < deadline, sorted(client_ids - set(ends))
        reply = peer.receive(timeout=30)
        assert reply is not None, sorted(client_ids - set(ends))
        assert not isinstance(reply, ErrorReply), reply
        if isinstance(reply, Finished):
            ends[reply.id] = reply
    return ends
