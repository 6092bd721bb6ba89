#!/usr/bin/env python3
"""Device idle time between decode steps, async scheduling off and on, in the same run.

    python scripts/bench_host_gap.py --model CKPT --device cuda --batch-size 64 --json out.json

Runs `--batch-size` requests (prompt `--prompt-len`, `--output-len` tokens, EOS ignored)
through the engine twice, sync then async. Over the steady window (every request decoding,
no prefill) it reports the device's idle time between steps, from CUDA events
(`StepStats.device_gap_s`), as a fraction of the window's wall time: the host gap the GPU
actually sees. On CPU there are no events; only step times are reported.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llmd.config import EngineConfig
from llmd.llm_engine import LLMEngine
from llmd.sampling_params import SamplingParams


def measure(args: argparse.Namespace, is_async: bool) -> dict:
    """One engine run; figures over the steady full-batch decode window."""
    config = EngineConfig(
        model=str(args.model), skip_tokenizer_init=True, device=args.device,
        max_num_seqs=args.batch_size, max_model_len=args.prompt_len + args.output_len + 8,
        gpu_memory_utilization=args.gpu_memory_utilization, async_scheduling=is_async,
    )  # fmt: skip
    engine = LLMEngine(config)
    vocab_size = engine.shape.vocab_size
    params = SamplingParams(temperature=0.0, max_tokens=args.output_len, ignore_eos=True)
    for warm in range(2):  # compile kernels outside the measurement
        engine.add_request([3 + warm] * 8, SamplingParams(max_tokens=4, ignore_eos=True))
    while engine.has_unfinished_requests():
        engine.step()
    for index in range(args.batch_size):
        prompt = [(index * 31 + j * 7) % (vocab_size - 3) + 3 for j in range(args.prompt_len)]
        engine.add_request(prompt, params)
    window: list[tuple[float, object]] = []  # (time the call returned, its stats)
    while engine.has_unfinished_requests():
        stats = engine.step().stats
        now = time.perf_counter()
        steady = (
            stats is not None
            and stats.num_prefill_tokens == 0
            and stats.num_decode_seqs == args.batch_size
        )
        if steady:
            window.append((now, stats))
    result: dict = {"async_scheduling": engine.async_scheduling, "num_steady_steps": len(window)}
    if len(window) > 2:
        wall_s = window[-1][0] - window[0][0]
        steps = [stats for _, stats in window[1:]]
        result["step_ms"] = wall_s / len(steps) * 1000
        result["decode_tok_s"] = args.batch_size * len(steps) / wall_s
        result["host_ms"] = statistics.mean(
            (s.schedule_s + s.prepare_s) * 1000 for s in steps
        )  # host work that precedes each launch
        gaps = [s.device_gap_s for s in steps if s.device_gap_s is not None]
        if gaps:
            result["device_gap_ms"] = statistics.mean(gaps) * 1000
            result["gap_fraction"] = sum(gaps) / wall_s
    del engine
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=192)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    command = "python scripts/bench_host_gap.py " + " ".join(sys.argv[1:])
    results = {"command": command, "batch_size": args.batch_size,
               "prompt_len": args.prompt_len, "output_len": args.output_len,
               "modes": {}}  # fmt: skip
    for name, is_async in (("sync", False), ("async", True)):
        results["modes"][name] = measure(args, is_async)
        print(name, json.dumps(results["modes"][name]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
