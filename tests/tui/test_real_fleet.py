"""`llmd top` for a fleet against real daemons on the tiny checkpoint: the session's daemon
and one of its own, killed with SIGKILL to check that it shows as down within 2 s."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from llmd.client import AsyncClient
from llmd.tui.top.fleet_app import create_fleet_app
from tests.tui.daemon_process import REPO_ROOT, SCHEDULING_FLAGS, subprocess_env, wait_until_healthy
from tests.tui.screen_text import screen_text
from tests.tui.waiting import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def doomed_daemon(tiny_model_dir, tmp_path):
    """A second `llmd serve` on the tiny model that the test kills: (address, process)."""
    address = f"ipc://{tmp_path / 'doomed.sock'}"
    log_path = tmp_path / "doomed.log"
    command = [
        sys.executable, "-m", "llmd.cli", "serve", "--model", str(tiny_model_dir),
        "--address", address, "--num-blocks", "32", "--max-model-len", "128", "--no-http",
        "--num-threads", "1", *SCHEDULING_FLAGS,
    ]  # fmt: skip
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command, env=subprocess_env(), cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=log
        )
    try:
        wait_until_healthy(address, process, log_path)
        yield address, process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


async def test_a_killed_daemon_shows_as_down_within_two_seconds(daemon_address, doomed_daemon):
    doomed_address, process = doomed_daemon
    addresses = [daemon_address, doomed_address]
    factories = [lambda a=a: AsyncClient(a, timeout=2.0) for a in addresses]
    app = create_fleet_app(factories, addresses, interval_s=0.25)
    async with app.run_test(size=(200, 50)) as pilot:
        await wait_for(pilot, lambda: app.fleet_view().num_up == 2, timeout=15)
        rows = app.fleet_view().rows
        assert rows[1].running == 0 and rows[1].kv_usage == 0.0
        assert app.fleet_view().totals.running == 0
        process.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        await wait_for(pilot, lambda: "down" in screen_text(app).split("\n")[3], timeout=5)
        assert time.monotonic() - killed_at < 2.0
        assert [row.health for row in app.fleet_view().rows] == ["up", "down"]
        assert "fleet of 2 daemons · 1 up" in screen_text(app)
        await pilot.pause(2.5)  # the dead one's client gives up: still one row, never fatal
        assert app.is_running and app.fleet_view().rows[0].health == "up"
