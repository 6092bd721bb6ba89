"""`llmd serve --detach` with the HTTP flags: the key reaches the detached HTTP process,
which ends by itself when the daemon is killed (a graceful stop is in conftest's teardown).
"""

from __future__ import annotations

import json
import os
import signal
import time

import httpx

from tests.daemon.harness import daemon_env, free_tcp_port, run_cli, wait_dead
from tests.http.http_harness import wait_http_ready


def _port_is_closed(port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/version", timeout=0.5)
        except httpx.TransportError:
            return True
        time.sleep(0.1)
    return False


def test_detached_serve_with_api_key_and_http_ending_with_a_killed_daemon(tiny_model_dir, tmp_path):
    env = daemon_env(tmp_path)
    env.pop("LLMD_API_KEY", None)
    port = free_tcp_port()
    address = f"ipc://{tmp_path / 'd.sock'}"
    args = ["serve", "--detach", "--model", str(tiny_model_dir), "--address", address]
    args += ["--num-blocks", "64", "--max-model-len", "128", "--http-port", str(port)]
    result = run_cli([*args, "--api-key", "k3y"], env, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    url = f"http://127.0.0.1:{port}"
    wait_http_ready(url)
    body = {"prompt": "hi", "max_tokens": 2}
    assert httpx.post(f"{url}/v1/completions", json=body, timeout=30).status_code == 401
    good = httpx.post(
        f"{url}/v1/completions", json=body, headers={"Authorization": "Bearer k3y"}, timeout=30
    )
    assert good.status_code == 200, good.text
    pid = json.loads(run_cli(["status", "--json", "--address", address], env).stdout)["pid"]
    os.kill(pid, signal.SIGKILL)  # no chance to stop its HTTP process: that one notices
    assert wait_dead(pid, 20)
    assert _port_is_closed(port, timeout_s=5.0)
