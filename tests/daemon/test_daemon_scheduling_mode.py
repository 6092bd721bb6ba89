"""Every daemon the daemon tests start runs this run's scheduling mode (tests.scheduling_mode).

A harness that forgot the mode would silently test only the default one: these fail then.
"""

from __future__ import annotations

from llmd.client import Client
from tests import scheduling_mode
from tests.daemon.harness import ENGINE_ARGS, daemon_env, inprocess_daemon, start_daemon
from tests.scheduling_mode import ASYNC_SCHEDULING


def test_engine_args_carry_this_runs_mode():
    assert ENGINE_ARGS[-1:] == scheduling_mode.serve_flags()


def test_an_inprocess_daemon_runs_this_runs_mode_unless_told_otherwise(tiny_model_dir, tmp_path):
    address = f"ipc://{tmp_path / 'm.sock'}"
    with inprocess_daemon(tiny_model_dir, address) as daemon, Client(address) as client:
        assert daemon.engine.async_scheduling is ASYNC_SCHEDULING
        assert len(client.generate("mode", params={"max_tokens": 3}).token_ids) <= 3
    other = not ASYNC_SCHEDULING
    with inprocess_daemon(tiny_model_dir, address, engine={"async_scheduling": other}) as daemon:
        assert daemon.engine.async_scheduling is other


def test_a_daemon_process_runs_this_runs_mode(tiny_model_dir, tmp_path):
    address = f"ipc://{tmp_path / 'p.sock'}"
    process = start_daemon(tiny_model_dir, address, daemon_env(tmp_path), tmp_path / "d.log")
    try:
        assert scheduling_mode.daemon_mode(address) is ASYNC_SCHEDULING
    finally:
        process.terminate()
        process.wait(30)


def test_a_later_flag_overrides_the_runs_mode(tiny_model_dir, tmp_path):
    """Tests that cover both modes pass the other flag after ENGINE_ARGS: it must win."""
    address = f"ipc://{tmp_path / 'o.sock'}"
    other = not ASYNC_SCHEDULING
    process = start_daemon(
        tiny_model_dir, address, daemon_env(tmp_path), tmp_path / "d.log",
        *scheduling_mode.serve_flags(other),
    )  # fmt: skip
    try:
        assert scheduling_mode.daemon_mode(address) is other
    finally:
        process.terminate()
        process.wait(30)
