"""`llmd serve --detach` with the HTTP flags: the key reaches the detached HTTP process,
which ends by itself when the daemon is killed (a graceful stop is in conftest's teardown).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import httpx

from tests.daemon.harness import (
    REPO_ROOT,
    daemon_env,
    free_tcp_port,
    run_cli,
    wait_dead,
    wait_healthy,
)
from tests.http.http_harness import DAEMON_ARGS, wait_http_ready


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
    assert _port_is_closed(port, timeout_s=10.0)


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as file:
        return [int(child) for child in file.read().split()]


def test_a_killed_daemon_frees_its_port_at_once_for_a_restart(tiny_model_dir, tmp_path):
    """kill -9 with a stream open, then restart on the same port at once, as the soak does.

    The orphaned HTTP process must not wait out the graceful limit for streams whose
    daemon is gone (35 s here), and the restart must get the port.
    """
    env = daemon_env(tmp_path)
    port = free_tcp_port()
    address = f"ipc://{tmp_path / 'r.sock'}"
    command = [sys.executable, "-m", "llmd.cli", "serve", "--model", str(tiny_model_dir)]
    command += [*DAEMON_ARGS, "--address", address, "--http-port", str(port)]
    command += ["--drain-timeout", "30"]
    url = f"http://127.0.0.1:{port}"
    processes = []
    try:
        for attempt in range(2):
            with open(tmp_path / f"daemon{attempt}.log", "wb") as log:
                processes.append(
                    subprocess.Popen(
                        command, env=env, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=log
                    )
                )
            wait_healthy(address, processes[-1])
            wait_http_ready(url, processes[-1])
            if attempt == 1:
                break
            (worker,) = _children(processes[0].pid)
            body = {"prompt": "hi", "max_tokens": 400, "ignore_eos": True, "stream": True}
            with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=30) as stream:
                assert next(stream.iter_lines()).startswith("data: {")
                processes[0].kill()  # SIGKILL while the stream is open
                processes[0].wait(10)
                assert wait_dead(worker, 10), "the orphaned HTTP process waits for dead streams"
        completion = httpx.post(f"{url}/v1/completions", json={"prompt": "hi", "max_tokens": 2},
                                timeout=30)  # fmt: skip
        assert completion.status_code == 200, completion.text
    finally:
        for process in processes:
            process.kill()
            process.wait(10)
    for attempt in range(2):
        log = (tmp_path / f"daemon{attempt}.log").read_text()
        assert "Traceback" not in log, log
