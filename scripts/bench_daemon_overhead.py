#!/usr/bin/env python
"""What the daemon adds to a decode step: served TPOT against the engine's own, same batch.

For each --concurrency c, c requests (random --input-len token ids, --output-len tokens
each, EOS ignored, greedy) start together: offline through `LLM.generate` in this
process, then through a freshly started `llmd serve` (same model, same engine flags) over
the ZeroMQ client and over HTTP SSE, alternating, --repeats times. A request's TPOT is
(last token - first token) / (tokens - 1) as its client saw it; the figure per route is
the median over requests, then over repeats. The ratio served / offline is the daemon's
overhead per token at that batch (issue 20 asks for at most 1.10). The daemon's engine
ITL over the same runs (its since-start histogram) tells a slower engine (its forward
pass shares the cores with the daemon's threads) from slower delivery. The median ITL
ratio compares typical decode steps: a prefill that lands inside the decodes (16 x 256
prompt tokens over a 2,048-token budget) moves a TPOT, offline and served differently.

    .venv/bin/python scripts/bench_daemon_overhead.py --model /tmp/smollm2-135m-random
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))  # sibling scripts
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from bench_http_itl import _engine_itl, _free_port, _http_token_times, _start_daemon

from llmd.client import AsyncClient, Client, TokenDelta


def _prompts(num: int, input_len: int, vocab_size: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(10, vocab_size) for _ in range(input_len)] for _ in range(num)]


Figures = tuple[float, float]
"""(TPOT, median ITL) of one request, seconds: the median ITL is its typical decode step,
which a prefill landing inside the decodes moves less than the mean."""


def _figures(times: list[float]) -> Figures:
    """TPOT (first to last token over the gaps) and the median gap, from arrival times."""
    gaps = [b - a for a, b in itertools.pairwise(times)] or [0.0]
    return (times[-1] - times[0]) / max(1, len(times) - 1), statistics.median(gaps)


def _medians(per_request: list[Figures]) -> Figures:
    return (
        statistics.median(f[0] for f in per_request),
        statistics.median(f[1] for f in per_request),
    )


def _offline_figures(llm, prompts: list[list[int]], params: dict) -> Figures:
    from llmd.sampling_params import SamplingParams

    outputs = llm.generate(prompts, SamplingParams(**params))
    return _medians([(o.metrics.tpot, statistics.median(o.metrics.itl)) for o in outputs])


async def _zmq_figures(address: str, prompts: list[list[int]], params: dict) -> Figures:
    async def one(client: AsyncClient, prompt: list[int]) -> Figures:
        times = []
        async for event in client.stream(prompt_token_ids=prompt, params=params):
            if isinstance(event, TokenDelta) and event.token_ids:
                times.append(time.perf_counter())
        return _figures(times)

    async with AsyncClient(address, timeout=120) as client:
        return _medians(await asyncio.gather(*(one(client, p) for p in prompts)))


async def _http_figures(url: str, prompts: list[list[int]], params: dict) -> Figures:
    async def one(client: httpx.AsyncClient, prompt: list[int]) -> Figures:
        return _figures(await _http_token_times(client, url, prompt, params))

    limits = httpx.Limits(max_connections=len(prompts) + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        return _medians(await asyncio.gather(*(one(client, p) for p in prompts)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="Checkpoint with a tokenizer.")
    parser.add_argument("--concurrency", default="1,4,16", help="Comma-separated batch sizes.")
    parser.add_argument("--input-len", type=int, default=256)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--json", type=Path, default=None, help="Write the figures here.")
    parser.add_argument(
        "--daemon-args", default="", help="Extra `llmd serve` flags, e.g. '--reserved-cpus 0'."
    )
    args = parser.parse_args()
    from llmd import LLM

    params = {"max_tokens": args.output_len, "ignore_eos": True, "temperature": 0.0}
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        address = f"ipc://{Path(directory) / 'bench.sock'}"
        port = _free_port()
        daemon_args = argparse.Namespace(model=args.model)
        extra = ["--dtype", args.dtype, "--max-model-len", "1024", *args.daemon_args.split()]
        process = _start_daemon(daemon_args, address, port, Path(directory) / "d.log", extra)
        url = f"http://127.0.0.1:{port}/v1/completions"
        try:
            with Client(address) as client:
                facts = client.stats(include_requests=False, include_block_map=False).daemon
            placement = facts.cpu_placement
            # The baseline is the engine alone on the daemon's forward-pass cores.
            forward_cpu_ids = list(placement.forward_cpu_ids) if placement else None
            if forward_cpu_ids:
                os.sched_setaffinity(0, forward_cpu_ids)
            num_threads = len(forward_cpu_ids) if forward_cpu_ids else None
            llm = LLM(args.model, dtype=args.dtype, max_model_len=1024, num_threads=num_threads)
            vocab_size = llm.tokenizer.vocab_size
            shown = placement.to_wire() if placement else None
            print(f"daemon placement {shown}; offline threads {num_threads}", flush=True)
            warm = _prompts(2, args.input_len, vocab_size, seed=0)
            _offline_figures(llm, warm, params)
            asyncio.run(_zmq_figures(address, warm, params))
            asyncio.run(_http_figures(url, warm, params))
            for concurrency in (int(c) for c in args.concurrency.split(",")):
                figures: dict[str, list[Figures]] = {"offline": [], "zmq": [], "http": []}
                engine_itl = [0.0, 0]
                for repeat in range(args.repeats):
                    prompts = _prompts(concurrency, args.input_len, vocab_size, seed=repeat + 1)
                    figures["offline"].append(_offline_figures(llm, prompts, params))
                    before = _engine_itl(address)
                    figures["zmq"].append(asyncio.run(_zmq_figures(address, prompts, params)))
                    figures["http"].append(asyncio.run(_http_figures(url, prompts, params)))
                    after = _engine_itl(address)
                    engine_itl[0] += after[0] - before[0]
                    engine_itl[1] += after[1] - before[1]
                ms = {r: 1000 * statistics.median(f[0] for f in v) for r, v in figures.items()}
                itl = {r: 1000 * statistics.median(f[1] for f in v) for r, v in figures.items()}
                row = {
                    "concurrency": concurrency,
                    "offline_tpot_ms": round(ms["offline"], 2),
                    "zmq_tpot_ms": round(ms["zmq"], 2),
                    "http_tpot_ms": round(ms["http"], 2),
                    "zmq_over_offline": round(ms["zmq"] / ms["offline"], 3),
                    "http_over_offline": round(ms["http"] / ms["offline"], 3),
                    "offline_itl_ms": round(itl["offline"], 2),
                    "zmq_itl_over_offline": round(itl["zmq"] / itl["offline"], 3),
                    "http_itl_over_offline": round(itl["http"] / itl["offline"], 3),
                    "daemon_engine_itl_ms": round(1000 * engine_itl[0] / max(engine_itl[1], 1), 2),
                    "runs_ms": {
                        r: [[round(1000 * x, 2) for x in f] for f in v] for r, v in figures.items()
                    },
                }
                rows.append(row)
                print(
                    f"c={concurrency:3d}: TPOT offline {ms['offline']:.2f} ms, zeromq "
                    f"{ms['zmq']:.2f} ms ({row['zmq_over_offline']:.3f}x), http "
                    f"{ms['http']:.2f} ms ({row['http_over_offline']:.3f}x); daemon engine ITL "
                    f"{row['daemon_engine_itl_ms']:.2f} ms; median ITL offline "
                    f"{itl['offline']:.2f} ms, zeromq {row['zmq_itl_over_offline']:.3f}x, http "
                    f"{row['http_itl_over_offline']:.3f}x (median of {args.repeats})",
                    flush=True,
                )
        finally:
            process.terminate()
            process.wait(60)
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": None}, "rows": rows}))


if __name__ == "__main__":
    main()
