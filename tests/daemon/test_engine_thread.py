"""Every torch call of `llmd serve` runs on one thread, so the daemon has one OpenMP pool.

A second pool (the model loaded, or the host's peaks measured, on the main thread) made
libgomp cut its spin-waits short and slowed every decode step by 1.3-2x on 2 cores.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from llmd.client import Client
from llmd.daemon.engine_thread import EngineThread
from llmd.daemon.thread_names import MAIN_THREAD_NAME
from tests.daemon.harness import daemon_env, start_daemon


def test_call_runs_on_the_thread_and_returns_or_raises():
    thread = EngineThread("llmd-test-eng")
    try:
        assert thread.call(lambda: threading.current_thread().name) == "llmd-test-eng"
        assert thread.call(max, 3, 9) == 9
        with pytest.raises(ZeroDivisionError):
            thread.call(lambda: 1 / 0)
        assert thread.call(lambda x, y=0: x + y, 2, y=5) == 7  # still serving after an error
    finally:
        thread.close()
        thread.join(5)
    assert not thread.is_alive()


def test_start_hands_over_the_last_job_and_ends_with_it():
    thread = EngineThread("llmd-test-eng")
    release = threading.Event()
    ran: list[str] = []

    def last() -> None:
        ran.append(threading.current_thread().name)
        release.wait(5)

    thread.start(last)
    with pytest.raises(RuntimeError, match="no longer takes jobs"):
        thread.call(int)
    with pytest.raises(RuntimeError, match="already started"):
        thread.start(last)
    release.set()
    thread.join(5)
    assert ran == ["llmd-test-eng"] and not thread.is_alive()
    thread.close()  # a no-op once started


def _thread_names(pid: int) -> list[str]:
    return [(task / "comm").read_text().strip() for task in Path(f"/proc/{pid}/task").iterdir()]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux /proc")
def test_a_daemon_runs_one_openmp_pool_from_its_engine_thread(tiny_model_dir, tmp_path):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("a one-core process starts no OpenMP workers")
    env = daemon_env()
    env.pop("OMP_NUM_THREADS")  # any thread's parallel region may start a pool
    address = f"ipc://{tmp_path / 'pool.sock'}"
    process = start_daemon(
        tiny_model_dir, address, env, tmp_path / "daemon.log",
        "--no-http", "--num-threads", "2", "--reserved-cpus", "0",
    )  # fmt: skip
    try:
        with Client(address, timeout=10.0) as client:
            client.generate("warm", params={"max_tokens": 4})
            client.stats(include_requests=False, include_block_map=False)
        names = _thread_names(process.pid)
        # OpenMP workers carry the name of the thread that started their pool.
        assert names.count("llmd-engine") == 2, names
        assert names.count(MAIN_THREAD_NAME) == 1, names  # the main thread alone: no pool
    finally:
        process.terminate()
        process.wait(30)
