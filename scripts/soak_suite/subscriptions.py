"""Stats subscriptions under load: generate latency must not suffer from many subscribers.

One peer (a separate process, so its reading costs the soak driver nothing) holds many
subscriptions at the minimum interval, like a swarm of `llmd top`s; the median latency
of a short generate is compared with the unloaded median measured in the same run.
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
) -> ScenarioResult:
    """Generate p50 with `num_subscriptions` subscriptions within 20% of the unloaded p50."""
    result = ScenarioResult("stats_subscriptions")
    address = daemon.address
    _measure(address, 3, max_tokens, sample_cap_s)  # warm-up
    before = _measure(address, num_samples // 2, max_tokens, sample_cap_s)
    subscriber = subprocess.Popen(
        [sys.executable, "-m", "scripts.soak_suite.subscriptions", address,
         str(num_subscriptions), str(MIN_SUBSCRIBE_INTERVAL_MS)],
        cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        time.sleep(WARMUP_S)
        loaded = _measure(address, num_samples, max_tokens, sample_cap_s)
        out, _ = subscriber.communicate("stop\n", timeout=60)
    finally:
        if subscriber.poll() is None:
            subscriber.kill()
    daemon.wait_idle(timeout_s=60.0)  # whatever the subscriptions left queued is done
    after = _measure(address, num_samples - num_samples // 2, max_tokens, sample_cap_s)
    counts = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    unloaded_p50 = statistics.median(before + after)
    loaded_p50 = statistics.median(loaded)
    ratio = loaded_p50 / unloaded_p50
    result.counts.update(
        {
            "num_subscriptions": num_subscriptions,
            "interval_ms": MIN_SUBSCRIBE_INTERVAL_MS,
            "num_samples": num_samples,
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
    """Hold the subscriptions until a line arrives on stdin; print the counts as JSON."""
    socket = zmq.Context.instance().socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 1000)
    socket.connect(address)
    for index in range(num_subscriptions):
        socket.send(
            pack({"type": "subscribe", "v": 1, "id": f"s-{index}", "interval_ms": interval_ms})
        )
    poller = zmq.Poller()
    poller.register(socket, zmq.POLLIN)
    poller.register(sys.stdin, zmq.POLLIN)
    counts = {"num_snapshots": 0, "num_refused": 0, "num_internal": 0, "refusal_codes": {}}
    while True:
        events = dict(poller.poll(1000))
        if sys.stdin.fileno() in events or sys.stdin in events:
            break
        while socket in events:
            try:
                payload = socket.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            if payload[1:12] == STATS_PREFIX:  # a snapshot: not decoded, to spare the CPU
                counts["num_snapshots"] += 1
                continue
            reply = unpack(payload, len(payload) + 1)
            if reply.get("type") == "error":
                code = reply.get("code")
                counts["num_refused"] += 1
                counts["num_internal"] += code == "internal"
                counts["refusal_codes"][code] = counts["refusal_codes"].get(code, 0) + 1
    for index in range(num_subscriptions):
        socket.send(pack({"type": "unsubscribe", "v": 1, "id": f"s-{index}"}))
    socket.close()
    print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    subscriber_main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
