"""Stats subscriptions under load: generate latency must not suffer from many subscribers.

One peer (a separate process, so its reading costs the soak driver nothing) holds many
subscriptions at the minimum interval, like a swarm of `llmd top`s; the median latency
of a short generate is compared with the unloaded median, measured in blocks that
alternate with the loaded ones in the same run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import time

import zmq

from llmd.client import AsyncClient
from llmd.protocol import pack, unpack
from llmd.protocol.client_messages import MIN_SUBSCRIBE_INTERVAL_MS
from scripts.soak_suite.daemon_process import REPO_ROOT, DaemonProcess
from scripts.soak_suite.result import ScenarioResult

P50_RATIO_LIMIT = 1.2
WARMUP_S = 1.0
MAX_STALLED_SAMPLES = 3
STATS_PREFIX = b"\xa4type\xa5stats"
"""How a msgpack `stats` reply starts after its map header ("type" is encoded first)."""


def run_subscriptions(
    daemon: DaemonProcess,
    num_subscriptions: int = 64,
    num_samples: int = 30,
    max_tokens: int = 8,
    sample_cap_s: float = 20.0,
    num_rounds: int = 4,
) -> ScenarioResult:
    """Generate p50 with `num_subscriptions` subscriptions within 20% of the unloaded p50.

    Unloaded and loaded blocks alternate for `num_rounds` rounds (the subscriber
    subscribes and unsubscribes on command), so drift on a shared machine falls on both
    sides alike instead of on whichever block ran while something else was busy.
    """
    result = ScenarioResult("stats_subscriptions")
    address = daemon.address
    _measure(address, 3, max_tokens, sample_cap_s)  # warm-up
    block = max(1, num_samples // num_rounds)
    unloaded: list[float] = []
    loaded: list[float] = []
    subscriber = _Subscriber(address, num_subscriptions)
    try:
        for _ in range(num_rounds):
            unloaded += _measure(address, block, max_tokens, sample_cap_s)
            subscriber.command("on")
            time.sleep(WARMUP_S)
            loaded += _measure(address, block, max_tokens, sample_cap_s)
            subscriber.command("off")
            daemon.wait_idle(timeout_s=60.0)  # whatever the subscriptions left queued is done
        counts = subscriber.stop()
    finally:
        subscriber.kill()
    unloaded_p50 = statistics.median(unloaded)
    loaded_p50 = statistics.median(loaded)
    ratio = loaded_p50 / unloaded_p50
    result.counts.update(
        {
            "num_subscriptions": num_subscriptions,
            "interval_ms": MIN_SUBSCRIBE_INTERVAL_MS,
            "num_samples": len(loaded),
            "num_rounds": num_rounds,
            "max_tokens": max_tokens,
            "unloaded_p50_ms": round(1000 * unloaded_p50, 2),
            "loaded_p50_ms": round(1000 * loaded_p50, 2),
            "loaded_max_ms": round(1000 * max(loaded), 2),
            "p50_ratio": round(ratio, 3),
            "subscriber": counts,
        }
    )
    result.check(
        f"generate p50 within {P50_RATIO_LIMIT - 1:.0%} of unloaded",
        ratio <= P50_RATIO_LIMIT,
        f"{1000 * loaded_p50:.1f} ms vs {1000 * unloaded_p50:.1f} ms unloaded",
    )
    result.check(
        "the subscriber got snapshots (or typed refusals)",
        counts.get("num_snapshots", 0) > 0 and counts.get("num_internal", 1) == 0,
        f"{counts}",
    )
    result.check("daemon still running", daemon.is_running())
    return result.finish()


class _Subscriber:
    """The subscribing peer process, driven line by line over its stdin."""

    def __init__(self, address: str, num_subscriptions: int) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "scripts.soak_suite.subscriptions", address,
             str(num_subscriptions), str(MIN_SUBSCRIBE_INTERVAL_MS)],
            cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip

    def command(self, line: str) -> str:
        """Send one command and return the peer's one-line answer."""
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(line + "\n")
        self._process.stdin.flush()
        answer = self._process.stdout.readline().strip()
        if not answer:
            raise RuntimeError(f"the subscriber exited on {line!r} (rc {self._process.poll()})")
        return answer

    def stop(self) -> dict:
        """End the peer and return its counts."""
        counts = json.loads(self.command("stop"))
        self._process.wait(timeout=60)
        return counts

    def kill(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()


def _measure(address: str, num_samples: int, max_tokens: int, cap_s: float) -> list[float]:
    """Seconds of each of `num_samples` sequential generates.

    A generate stalled for `cap_s` is cut short and counted at `cap_s`; after
    MAX_STALLED_SAMPLES of them the verdict is clear and the rest are counted the same.
    """
    return asyncio.run(_measure_async(address, num_samples, max_tokens, cap_s))


async def _measure_async(
    address: str, num_samples: int, max_tokens: int, cap_s: float
) -> list[float]:
    params = {"max_tokens": max_tokens, "ignore_eos": True, "temperature": 0}
    seconds: list[float] = []
    async with AsyncClient(address, timeout=30.0) as client:
        while len(seconds) < num_samples:
            if sum(s >= cap_s for s in seconds) >= MAX_STALLED_SAMPLES:
                seconds.append(cap_s)
                continue
            started = time.perf_counter()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(client.generate("Hello there", params=params), cap_s)
            seconds.append(min(cap_s, time.perf_counter() - started))
    return seconds


def subscriber_main(address: str, num_subscriptions: int, interval_ms: int) -> None:
    """Subscribe on "on", unsubscribe on "off", print the counts as JSON on "stop".

    Each command is answered with one line once it has been sent to the daemon.
    """
    socket = zmq.Context.instance().socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 1000)
    socket.connect(address)
    poller = zmq.Poller()
    poller.register(socket, zmq.POLLIN)
    poller.register(sys.stdin, zmq.POLLIN)
    counts = {"num_snapshots": 0, "num_refused": 0, "num_internal": 0, "refusal_codes": {}}
    is_subscribed = False
    while True:
        events = dict(poller.poll(1000))
        if sys.stdin.fileno() in events or sys.stdin in events:
            command = sys.stdin.readline().strip()
            if command in ("off", "stop", "") and is_subscribed:
                _send_all(socket, "unsubscribe", num_subscriptions, interval_ms)
                is_subscribed = False
            if command in ("stop", ""):
                break
            if command == "on" and not is_subscribed:
                _send_all(socket, "subscribe", num_subscriptions, interval_ms)
                is_subscribed = True
            print(command, flush=True)
        while socket in events:
            try:
                frames = socket.recv_multipart(zmq.NOBLOCK)  # one reply per frame
            except zmq.Again:
                break
            for payload in frames:
                _count_reply(payload, counts)
    socket.close()
    print(json.dumps(counts), flush=True)


def _count_reply(payload: bytes, counts: dict) -> None:
    """Count one reply: a snapshot (not decoded, to spare the CPU) or a refusal's code."""
    if payload[1:12] == STATS_PREFIX:
        counts["num_snapshots"] += 1
        return
    reply = unpack(payload, len(payload) + 1)
    if reply.get("type") == "error":
        code = reply.get("code")
        counts["num_refused"] += 1
        counts["num_internal"] += code == "internal"
        counts["refusal_codes"][code] = counts["refusal_codes"].get(code, 0) + 1


def _send_all(socket: zmq.Socket, kind: str, num_subscriptions: int, interval_ms: int) -> None:
    for index in range(num_subscriptions):
        message = {"type": kind, "v": 1, "id": f"s-{index}"}
        if kind == "subscribe":
            message["interval_ms"] = interval_ms
        socket.send(pack(message))


if __name__ == "__main__":
    subscriber_main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
