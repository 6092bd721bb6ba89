"""Hundreds of idle connections against a daemon started with few file descriptors.

The daemon starts with a soft RLIMIT_NOFILE of 256 (libzmq aborts the process when an
ipc accept finds no free descriptor) and a connection cap below the flood: it raises its
soft limit, refuses the connections beyond the cap with a log line, keeps serving the
clients it has, and accepts new ones once the flood is gone.
"""

from __future__ import annotations

import resource
import time

import pytest
import zmq

from llmd.client import Client
from tests.daemon.harness import daemon_env, start_daemon

SOFT_DESCRIPTOR_LIMIT = 256
NUM_IDLE_CONNECTIONS = 300
MAX_CONNECTIONS = 100


def _low_descriptor_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (SOFT_DESCRIPTOR_LIMIT, hard))


def _flood(client: Client, flood: zmq.Context, address: str, num: int):
    """Open `num` idle connections as fast as libzmq connects them; wait for a refusal."""
    sockets = []
    for _ in range(num):
        idle = flood.socket(zmq.DEALER)
        idle.setsockopt(zmq.LINGER, 0)
        idle.connect(address)
        sockets.append(idle)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        facts = client.stats(include_requests=False, include_block_map=False).daemon
        if facts.num_refused_connections > 0:
            break
        time.sleep(0.1)
    return sockets, facts


def test_an_idle_connection_flood_is_refused_not_fatal(tiny_model_dir, tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4 * NUM_IDLE_CONNECTIONS:
        pytest.skip(f"the hard descriptor limit ({hard}) leaves no room to raise the soft one")
    if soft < 4 * NUM_IDLE_CONNECTIONS:  # this process holds two descriptors per connection
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    address = f"ipc://{tmp_path / 'fds.sock'}"
    log_path = tmp_path / "daemon.log"
    process = start_daemon(
        tiny_model_dir, address, daemon_env(), log_path,
        "--max-connections", str(MAX_CONNECTIONS), preexec_fn=_low_descriptor_limit,
    )  # fmt: skip
    flood = zmq.Context()
    try:
        with Client(address, timeout=10.0) as client:
            client.health()  # connected before the flood
            sockets, facts = _flood(client, flood, address, NUM_IDLE_CONNECTIONS)
            assert process.poll() is None, log_path.read_text()
            assert facts.num_refused_connections > 0
            assert facts.max_connections == MAX_CONNECTIONS
            completion = client.generate("still serving", params={"max_tokens": 2})
            assert completion.finish_reason == "length"
            for idle in sockets:
                idle.close()
            flood.destroy(linger=0)  # the idle connections really close now
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # the daemon sees them go (monitor events)
                facts = client.stats(include_requests=False, include_block_map=False).daemon
                if facts.num_connections < MAX_CONNECTIONS:
                    break
                time.sleep(0.1)
            assert facts.num_connections < MAX_CONNECTIONS, facts
        with Client(address, timeout=10.0) as fresh:  # a new connection once the flood ends
            assert fresh.generate("again", params={"max_tokens": 2}).finish_reason == "length"
        assert process.poll() is None, log_path.read_text()
        assert "(--max-connections)" in log_path.read_text()
    finally:
        flood.destroy(linger=0)
        process.terminate()
        process.wait(30)


HARD_DESCRIPTOR_LIMIT = 256
NUM_FLOOD_CONNECTIONS = 400


def _low_hard_descriptor_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (HARD_DESCRIPTOR_LIMIT, HARD_DESCRIPTOR_LIMIT))


def test_a_flood_past_the_hard_descriptor_limit_is_refused_not_fatal(tiny_model_dir, tmp_path):
    """Hard limit 256, which the daemon cannot raise, and 400 connections at once.

    libzmq aborts the process when an ipc accept finds no descriptor, and a burst is
    accepted faster than a monitor can shed it; the daemon must pause accepting instead.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4 * NUM_FLOOD_CONNECTIONS:  # this process holds two descriptors per connection
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    address = f"ipc://{tmp_path / 'hard.sock'}"
    log_path = tmp_path / "daemon.log"
    process = start_daemon(
        tiny_model_dir, address, daemon_env(), log_path, preexec_fn=_low_hard_descriptor_limit
    )
    flood = zmq.Context()
    flood.set(zmq.MAX_SOCKETS, NUM_FLOOD_CONNECTIONS + 64)
    try:
        with Client(address, timeout=10.0) as client:
            facts = client.stats(include_requests=False, include_block_map=False).daemon
            max_connections = facts.max_connections
            assert max_connections < NUM_FLOOD_CONNECTIONS < HARD_DESCRIPTOR_LIMIT * 2
            _, facts = _flood(client, flood, address, NUM_FLOOD_CONNECTIONS)
            assert process.poll() is None, log_path.read_text()
            assert facts.num_refused_connections > 0, facts
            # A burst can overshoot the cap by what libzmq accepted before the pause (those
            # are shut down); it must stay well inside the margin to the hard limit.
            assert facts.num_connections < (max_connections + HARD_DESCRIPTOR_LIMIT) // 2
            completion = client.generate("still serving", params={"max_tokens": 2})
            assert completion.finish_reason == "length"
            flood.destroy(linger=0)
        deadline = time.monotonic() + 30
        while process.poll() is None and time.monotonic() < deadline:
            with Client(address, timeout=10.0) as fresh:  # a new connection once the flood ends
                if fresh.stats(include_requests=False).daemon.num_connections < 5:
                    assert fresh.generate("again", params={"max_tokens": 2}).token_ids
                    break
            time.sleep(0.1)
        else:
            raise AssertionError(f"the flood's connections never closed: {log_path.read_text()}")
        assert process.poll() is None, log_path.read_text()
        assert "(--max-connections)" in log_path.read_text()
    finally:
        flood.destroy(linger=0)
        process.terminate()
        process.wait(30)
