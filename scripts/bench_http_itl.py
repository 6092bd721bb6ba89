#!/usr/bin/env python
"""Per-token overhead of HTTP streaming against the ZeroMQ client, on one daemon.

Starts `llmd serve` (the shipped model unless --model) with its HTTP API, then runs the
same workload (--concurrency streams at once, --max-tokens each, EOS ignored, greedy)
alternately through llmd.client.AsyncClient and through /v1/completions SSE (httpx),
--repeats times each. It reports, per route, the median inter-token latency seen by the
client (gaps between consecutive token messages of a stream) and the HTTP/ZeroMQ ratio,
the engine's own mean ITL over the same runs (from the daemon's since-start histogram:
tells a slower engine from slower delivery), and the CPU time the HTTP process spent per
streamed token.

    .venv/bin/python scripts/bench_http_itl.py --concurrency 1,16 --max-tokens 128 --repeats 3
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # run from a checkout

from llmd.client import AsyncClient, Client, DaemonNotRunningError, TokenDelta  # noqa: E402


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _start_daemon(
    args: argparse.Namespace, address: str, port: int, log_path: Path, extra: tuple = ()
):
    command = [sys.executable, "-m", "llmd.cli", "serve", "--address", address]
    command += ["--http-port", str(port), "--max-queued-requests", "4096", *extra]
    if args.model:
        command += ["--model", args.model]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, env=env, stderr=log, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the daemon exited:\n{log_path.read_text()}")
        try:
            with Client(address, timeout=1.0) as client:
                if client.health()["is_healthy"]:
                    httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).raise_for_status()
                    return process
        except (DaemonNotRunningError, httpx.HTTPError):
            pass
        time.sleep(0.2)
    process.kill()
    raise SystemExit("the daemon did not become healthy")


def _engine_itl(address: str) -> tuple[float, int]:
    """(sum, count) of the daemon's since-start ITL histogram."""
    with Client(address) as client:
        data = client.stats(include_requests=False, include_block_map=False).histograms["itl"]
    return data.sum, data.count


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _http_pid(daemon_pid: int) -> int:
    """The HTTP server process: the daemon's child."""
    children = Path(f"/proc/{daemon_pid}/task/{daemon_pid}/children").read_text().split()
    return int(children[0])


def _gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


async def _zmq_stream(client: AsyncClient, prompt: str, params: dict) -> list[float]:
    times = []
    async for event in client.stream(prompt, params=params):
        if isinstance(event, TokenDelta):
            times.append(time.perf_counter())
    return _gaps(times)


async def _http_token_times(
    client: httpx.AsyncClient, url: str, prompt: str | list[int], params: dict
) -> list[float]:
    """Arrival times of a streamed completion's token chunks (not the final one)."""
    times = []
    body = {"prompt": prompt, "stream": True, **params}
    async with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                if chunk["choices"] and chunk["choices"][0]["finish_reason"] is None:
                    times.append(time.perf_counter())
    return times


async def _http_stream(client: httpx.AsyncClient, url: str, prompt: str, params: dict):
    return _gaps(await _http_token_times(client, url, prompt, params))


async def _run(route: str, address: str, url: str, concurrency: int, params: dict) -> list[float]:
    prompts = [f"Story {i}: once upon a time" for i in range(concurrency)]
    if route == "zmq":
        async with AsyncClient(address, timeout=30) as client:
            results = await asyncio.gather(*(_zmq_stream(client, p, params) for p in prompts))
    else:
        limits = httpx.Limits(max_connections=concurrency + 4)
        async with httpx.AsyncClient(timeout=300, limits=limits) as client:
            results = await asyncio.gather(*(_http_stream(client, url, p, params) for p in prompts))
    return [gap for gaps in results for gap in gaps]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="Model path (default: the shipped one).")
    parser.add_argument("--concurrency", default="1,16", help="Comma-separated stream counts.")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    params = {"max_tokens": args.max_tokens, "ignore_eos": True, "temperature": 0.0}
    with tempfile.TemporaryDirectory() as directory:
        address = f"ipc://{Path(directory) / 'bench.sock'}"
        port = _free_port()
        process = _start_daemon(args, address, port, Path(directory) / "daemon.log")
        url = f"http://127.0.0.1:{port}/v1/completions"
        try:
            asyncio.run(_run("zmq", address, url, 2, params))  # warm-up both routes
            asyncio.run(_run("http", address, url, 2, params))
            http_pid = _http_pid(process.pid)
            for concurrency in (int(c) for c in args.concurrency.split(",")):
                medians: dict[str, list[float]] = {"zmq": [], "http": []}
                engine: dict[str, list[float]] = {"zmq": [0.0, 0], "http": [0.0, 0]}
                http_cpu_s = 0.0
                for _ in range(args.repeats):
                    for route in ("zmq", "http"):
                        itl_before, cpu_before = _engine_itl(address), _cpu_s(http_pid)
                        gaps = asyncio.run(_run(route, address, url, concurrency, params))
                        itl_after = _engine_itl(address)
                        if route == "http":
                            http_cpu_s += _cpu_s(http_pid) - cpu_before
                        medians[route].append(statistics.median(gaps))
                        engine[route][0] += itl_after[0] - itl_before[0]
                        engine[route][1] += itl_after[1] - itl_before[1]
                zmq_ms = statistics.median(medians["zmq"]) * 1000
                http_ms = statistics.median(medians["http"]) * 1000
                engine_ms = {
                    r: 1000 * total / max(count, 1) for r, (total, count) in engine.items()
                }
                num_http_tokens = args.repeats * concurrency * args.max_tokens
                print(
                    f"concurrency {concurrency:3d}: client median ITL zeromq {zmq_ms:.2f} ms, "
                    f"http {http_ms:.2f} ms (ratio {http_ms / zmq_ms:.3f}, "
                    f"{http_ms - zmq_ms:+.2f} ms/token); engine mean ITL during zeromq runs "
                    f"{engine_ms['zmq']:.2f} ms, during http runs {engine_ms['http']:.2f} ms; "
                    f"HTTP process CPU {1e6 * http_cpu_s / num_http_tokens:.0f} us/token "
                    f"(median of {args.repeats} runs)",
                    flush=True,
                )
        finally:
            process.terminate()
            process.wait(60)


if __name__ == "__main__":
    main()
