"""The HTTP tests' shared daemon runs this run's scheduling mode (tests.scheduling_mode)."""

from __future__ import annotations

from tests import scheduling_mode
from tests.http.http_harness import DAEMON_ARGS


def test_the_served_daemon_runs_this_runs_mode(served_http):
    assert DAEMON_ARGS[-1:] == scheduling_mode.serve_flags()
    assert scheduling_mode.daemon_mode(served_http.address) is scheduling_mode.ASYNC_SCHEDULING
