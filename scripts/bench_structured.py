#!/usr/bin/env python3
"""What structured outputs cost: constrained against free throughput, and free requests' ITL
while a slow grammar compiles, each pair measured in the same run.

    .venv/bin/python scripts/bench_structured.py --repeats 3 --json structured.json

Throughput: `--batch-size` requests (the batch the engine runs at once), every one
constrained to one simple JSON schema (sampled at temperature 1, seeded), against the same
prompts unconstrained with EOS ignored and each request's `max_tokens` set to the length of
its constrained output: the same tokens per request and the same batch occupancy, so the
ratio is the mask's cost alone (target: constrained >= 0.80 of free output tok/s). The
two runs alternate, `--repeats` times each; medians are reported.

Slow compile: `--num-free` free requests alone, then again beside one constrained request
whose compile the compiler's gate (`GrammarCompiler.compile_gate`) holds pending until
every free request has finished; the median inter-token latency of the free requests,
loaded over unloaded (target: within 20%, a ratio <= 1.20). The held compile waits on an
event: it stands for a compile that takes long off the engine thread, not for the CPU a
real one would also take.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from llmd.llm import LLM
from llmd.sampling_params import SamplingParams

SIMPLE_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "city": {"enum": ["Paris", "London", "Rome", "Berlin"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 4},
    },
    "required": ["name", "age", "city", "tags"],
    "additionalProperties": False,
}
PROMPTS = ["Once upon a time", "Tell me about a cat.", "Who are you?", "The red fox"]


def _prompts(num: int) -> list[str]:
    return [f"{PROMPTS[index % len(PROMPTS)]} ({index})" for index in range(num)]


def _timed(llm: LLM, prompts: list[str], params: list[SamplingParams]) -> tuple[float, list]:
    started = time.perf_counter()
    outputs = llm.generate(prompts, params)
    return time.perf_counter() - started, outputs


def measure_throughput(llm: LLM, args: argparse.Namespace) -> dict:
    """Output tok/s with every request constrained, and unconstrained at the same lengths."""
    prompts = _prompts(args.batch_size)
    constrained = [
        SamplingParams(temperature=1.0, seed=index, max_tokens=args.max_tokens,
                       structured_outputs={"json": SIMPLE_SCHEMA})
        for index in range(len(prompts))
    ]  # fmt: skip
    _, first = _timed(llm, prompts, constrained)  # untimed: compiles and warms the shapes
    lengths = [len(output.token_ids) for output in first]
    free = [
        SamplingParams(temperature=1.0, seed=index, max_tokens=length, ignore_eos=True)
        for index, length in enumerate(lengths)
    ]
    _timed(llm, prompts, free)
    rates: dict[str, list[float]] = {"constrained": [], "free": []}
    num_changed = 0
    for _ in range(args.repeats):
        for name, params in (("constrained", constrained), ("free", free)):
            wall_s, outputs = _timed(llm, prompts, params)
            rates[name].append(sum(len(output.token_ids) for output in outputs) / wall_s)
            if name == "constrained":
                num_changed += sum(len(o.token_ids) != n for o, n in zip(outputs, lengths))
    medians = {name: statistics.median(values) for name, values in rates.items()}
    return {
        "num_requests": len(prompts),
        "num_output_tokens": sum(lengths),
        "num_cut_by_max_tokens": sum(o.finish_reason == "length" for o in first),
        "num_length_changes": num_changed,
        "constrained_tok_s": rates["constrained"],
        "free_tok_s": rates["free"],
        "median_constrained_tok_s": medians["constrained"],
        "median_free_tok_s": medians["free"],
        "ratio": medians["constrained"] / medians["free"],
    }


def _median_itl(outputs: list) -> float:
    return statistics.median(gap for output in outputs for gap in output.metrics.itl)


def _run_beside_held_compile(llm: LLM, prompts: list[str], params: list, repeat: int) -> tuple:
    """The free requests' outputs, run beside one request whose compile is held meanwhile."""
    grammars = llm.engine.grammars
    assert grammars is not None  # made by measure_slow_compile's first constrained request
    gate = threading.Event()
    grammars.compiler.compile_gate = gate
    held = SamplingParams(max_tokens=16, structured_outputs={"regex": f"[a-c]{{{repeat + 2}}}"})
    outputs: dict[int, object] = {}
    is_pending_throughout = True
    try:
        for delta in llm.stream([*prompts, "Held"], [*params, held]):
            if not gate.is_set():
                is_pending_throughout &= len(grammars.compiling) == 1
            if delta.output is not None and delta.index < len(prompts):
                outputs[delta.index] = delta.output
                if len(outputs) == len(prompts):
                    gate.set()  # every free request ended with the compile still pending
    finally:
        gate.set()
        grammars.compiler.compile_gate = None
    return [outputs[index] for index in range(len(prompts))], is_pending_throughout


def measure_slow_compile(llm: LLM, args: argparse.Namespace) -> dict:
    """Median ITL of free requests beside a held compile, over their ITL alone."""
    llm.generate(["Hi"], SamplingParams(max_tokens=4, structured_outputs={"regex": "w"}))
    prompts = _prompts(args.num_free)
    params = [
        SamplingParams(temperature=1.0, seed=index, max_tokens=args.free_tokens, ignore_eos=True)
        for index in range(len(prompts))
    ]
    llm.generate(prompts, params)  # untimed warm-up of this batch's shapes
    unloaded, loaded, pending = [], [], []
    for repeat in range(args.repeats):
        unloaded.append(_median_itl(llm.generate(prompts, params)))
        outputs, is_pending = _run_beside_held_compile(llm, prompts, params, repeat)
        loaded.append(_median_itl(outputs))
        pending.append(is_pending)
    return {
        "num_free": len(prompts),
        "free_tokens": args.free_tokens,
        "unloaded_itl_ms": [value * 1000 for value in unloaded],
        "loaded_itl_ms": [value * 1000 for value in loaded],
        "compile_pending_throughout": all(pending),
        "ratio": statistics.median(loaded) / statistics.median(unloaded),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add = parser.add_argument
    add("--model", default=None, help="checkpoint (default: the shipped default model)")
    add("--device", default="cpu", choices=["auto", "cpu", "cuda"])
    add("--dtype", default="float32")
    add("--threads", type=int, default=None, help="compute threads (default: llmd's own)")
    add("--async-scheduling", action="store_true", help="pipeline the steps")
    add("--batch-size", type=int, default=32, help="requests of the throughput runs")
    add("--max-tokens", type=int, default=160, help="limit of a constrained output")
    add("--num-free", type=int, default=8, help="free requests of the slow-compile runs")
    add("--free-tokens", type=int, default=64, help="output tokens of each free request")
    add("--repeats", type=int, default=3, help="timed runs of each kind; report: median")
    add("--json", type=Path, default=None, help="write the results here too")
    args = parser.parse_args()
    options = {"num_threads": args.threads} if args.threads is not None else {}
    llm = LLM(
        args.model, device=args.device, dtype=args.dtype, max_num_seqs=args.batch_size,
        async_scheduling=args.async_scheduling, **options,
    )  # fmt: skip
    results = {
        "command": "python scripts/bench_structured.py " + " ".join(sys.argv[1:]),
        "throughput": measure_throughput(llm, args),
        "slow_compile": measure_slow_compile(llm, args),
    }
    throughput, slow = results["throughput"], results["slow_compile"]
    print(
        f"throughput, batch {throughput['num_requests']}: constrained "
        f"{throughput['median_constrained_tok_s']:.0f} tok/s, free "
        f"{throughput['median_free_tok_s']:.0f} tok/s, ratio {throughput['ratio']:.2f} "
        "(target >= 0.80)"
    )
    print(
        f"slow compile, {slow['num_free']} free requests: median ITL "
        f"{statistics.median(slow['loaded_itl_ms']):.2f} ms beside a held compile, "
        f"{statistics.median(slow['unloaded_itl_ms']):.2f} ms alone, ratio {slow['ratio']:.2f} "
        f"(target <= 1.20); compile pending throughout: {slow['compile_pending_throughout']}"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
