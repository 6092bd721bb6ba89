"""The TUI tests' shared daemon runs this run's scheduling mode (tests.scheduling_mode)."""

from __future__ import annotations

from tests import scheduling_mode


def test_the_tui_daemon_runs_this_runs_mode(daemon_address):
    assert scheduling_mode.daemon_mode(daemon_address) is scheduling_mode.ASYNC_SCHEDULING
