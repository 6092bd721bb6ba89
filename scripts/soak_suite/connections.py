"""Many connections at a low descriptor limit: the daemon survives and still serves.

The daemon runs with a soft RLIMIT_NOFILE of 1024 (a common default); thousands of ipc
connections each cost it a descriptor, so it must raise its limit or refuse extra
connections instead of dying on a libzmq assertion. In the hard-limit scenario it cannot
raise it (hard 1024, as in many containers), so it must refuse what does not fit.
"""

from __future__ import annotations

import contextlib
import time

import zmq

from llmd.client import Client
from llmd.protocol import pack, unpack
from scripts.soak_suite.daemon_process import DaemonProcess, raise_own_nofile
from scripts.soak_suite.result import ScenarioResult

REPLY_WAIT_S = 20.0


def run_connections(daemon: DaemonProcess, num_connections: int = 5000) -> ScenarioResult:
    """Open `num_connections` DEALERs, each sends one health; the daemon must keep serving."""
    result = ScenarioResult("connections")
    _flood(daemon, num_connections, result)
    return result.finish()


def run_connections_at_hard_limit(
    daemon: DaemonProcess, num_connections: int = 1500, hard_nofile: int = 1024
) -> ScenarioResult:
    """The flood against a daemon of its own whose hard descriptor limit is below it."""
    result = ScenarioResult("connections_hard_limit")
    own = DaemonProcess(
        daemon.runtime_dir / "hard-limit",
        model=daemon.model,
        extra_args=daemon.extra_args,
        soft_nofile=hard_nofile,
        hard_nofile=hard_nofile,
    )
    try:
        own.start()
        _flood(own, num_connections, result)
        facts = own.stats().daemon if own.is_running() else None
    finally:
        own.stop()
    result.counts["daemon_hard_nofile"] = hard_nofile
    result.counts["max_connections"] = None if facts is None else facts.max_connections
    num_refused = None if facts is None else facts.num_refused_connections
    result.counts["num_refused_connections"] = num_refused
    num_refused = num_refused or 0
    result.check("connections past the limit are refused", num_refused > 0)
    result.check("the refusals are logged", "(--max-connections)" in own.log_tail(100_000))
    return result.finish()


def _flood(daemon: DaemonProcess, num_connections: int, result: ScenarioResult) -> None:
    """Open the connections, count health replies, then check the daemon serves old and new."""
    raise_own_nofile(3 * num_connections + 1024)  # a socket costs us about two descriptors
    context = zmq.Context()
    context.set(zmq.MAX_SOCKETS, num_connections + 64)
    sockets: list[zmq.Socket] = []
    poller = zmq.Poller()
    num_answered = 0
    peak_fds = 0
    try:
        for index in range(num_connections):
            socket = context.socket(zmq.DEALER)
            socket.setsockopt(zmq.LINGER, 0)
            socket.connect(daemon.address)
            socket.send(pack({"type": "health", "v": 1, "id": f"c-{index}"}))
            poller.register(socket, zmq.POLLIN)
            sockets.append(socket)
            if index % 500 == 499 and daemon.is_running():
                peak_fds = max(peak_fds, daemon.num_fds())
        num_answered = _count_replies(poller, num_connections)
        is_alive_while_open = daemon.is_running()
        if is_alive_while_open:
            peak_fds = max(peak_fds, daemon.num_fds())
        serves_old = _generate_on(sockets[0]) if is_alive_while_open else False
    finally:
        for socket in sockets:
            socket.close(linger=0)
        context.term()
    time.sleep(1.0)
    is_alive = daemon.is_running()
    serves_after = _serves(daemon.address) if is_alive else False
    result.counts.update(
        {
            "num_connections": num_connections,
            "daemon_soft_nofile": daemon.soft_nofile,
            "num_health_answered": num_answered,
            "daemon_peak_fds": peak_fds,
            "daemon_returncode": daemon.returncode(),
        }
    )
    result.check(
        "daemon survives",
        is_alive_while_open and is_alive,
        f"exit status {daemon.returncode()}: {daemon.log_tail(400)}",
    )
    result.check("an early connection is still served while all are open", serves_old)
    result.check("a new client is served after they close", serves_after)


def _count_replies(poller: zmq.Poller, expected: int) -> int:
    num_answered = 0
    deadline = time.monotonic() + REPLY_WAIT_S
    while num_answered < expected and time.monotonic() < deadline:
        for socket, _ in poller.poll(200):
            with contextlib.suppress(zmq.Again):
                num_answered += len(socket.recv_multipart(zmq.NOBLOCK))  # a reply a frame
    return num_answered


def _generate_on(socket: zmq.Socket) -> bool:
    """A short generation over an already open raw connection."""
    request = {
        "type": "generate", "v": 1, "id": "served", "prompt": "Hello",
        "sampling_params": {"max_tokens": 2}, "stream": False,
    }  # fmt: skip
    socket.send(pack(request))
    deadline = time.monotonic() + REPLY_WAIT_S
    while time.monotonic() < deadline:
        if not socket.poll(200):
            continue
        for payload in socket.recv_multipart():  # a message may carry several replies
            reply = unpack(payload, len(payload) + 1)
            if reply.get("id") == "served" and reply.get("type") in ("finished", "error"):
                return reply["type"] == "finished"
    return False


def _serves(address: str) -> bool:
    try:
        with Client(address, timeout=10.0) as client:
            return len(client.generate("Hello", params={"max_tokens": 2}).token_ids) >= 1
    except Exception:
        return False
