"""Offline throughput: llmd's continuous batching against HF transformers' static batching.

A seeded heterogeneous workload (prompts 16-512 tokens, outputs 8-256, EOS ignored) runs
on a random checkpoint shaped like SmolLM2-135M (or, with --shape, Qwen3-0.6B); both
engines run in the same process and the report is output tokens/s for each and their
ratio, the median over --repeats runs. On CPU, --cpu-limits first measures the machine's
copy bandwidth and GEMM rate and reports decode attention and decode steps against them.

    .venv/bin/python scripts/bench_offline.py --num-requests 64 --repeats 3
    .venv/bin/python scripts/bench_offline.py --cpu-limits --skip-hf --repeats 0
    .venv/bin/python scripts/bench_offline.py --model SOURCE --quantized W8A16 W4A16 --skip-hf
    python scripts/bench_offline.py --shape qwen3-0.6b --device cuda --num-requests 256 \\
        --repeats 1 --hf-batch-size 64 --max-model-len 1024 --warmup-requests 16
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from llmd.bench.triton_compiles import counting_triton_compiles
from llmd.bench.workload import SHAPES, make_checkpoint, make_workload
from llmd.config import ATTENTION_BACKENDS, DEVICES, DTYPES, KV_CACHE_DTYPES, EngineConfig
from llmd.option_spec import Flag, add_argument


def run_llmd(path: Path, workload, engine_options: dict, info: dict | None = None):
    """Seconds to finish the whole workload with llmd's engine, and output tokens produced.

    When `info` is given it receives what the engine ran on (device, dtype, backend, KV
    blocks, CUDA graphs captured and replayed) and the Triton kernels compiled while timed.
    """
    from llmd.llm_engine import LLMEngine
    from llmd.sampling_params import SamplingParams

    engine = LLMEngine(EngineConfig(model=str(path), skip_tokenizer_init=True, **engine_options))
    with counting_triton_compiles() as compiled:
        start = time.perf_counter()
        for prompt, num_output in workload:
            params = SamplingParams(temperature=0.0, max_tokens=num_output, ignore_eos=True)
            engine.add_request(prompt, params)
        num_output_tokens = 0
        while engine.has_unfinished_requests():
            for update in engine.step().updates:
                num_output_tokens += len(update.new_token_ids)
        elapsed = time.perf_counter() - start
    if info is not None:
        runner = engine.runner
        graph_runner = runner.graph_runner
        info.update(
            device=engine.device,
            dtype=engine.dtype,
            attention_backend=runner.backend.name,
            triton_layer_kernels=runner.kernel_config.use_triton,
            num_kv_blocks=runner.num_blocks,
            num_cuda_graphs=len(runner.graph_batch_sizes) if graph_runner else 0,
            num_graph_replays=graph_runner.num_replays if graph_runner else 0,
            async_scheduling=engine.async_scheduling,
            # None without Triton's hook; a non-empty list means compiles inside the timing.
            triton_compiles_timed=None if compiled is None else list(compiled),
        )
    del engine
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # the next engine profiles free memory
    return elapsed, num_output_tokens


def run_hf_static(
    path: Path,
    workload,
    batch_size: int,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> tuple[float, int]:
    """Seconds for HF generate in fixed batches (left-padded, run to the batch's longest output)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
    start = time.perf_counter()
    num_useful_tokens = 0
    for first in range(0, len(workload), batch_size):
        batch = workload[first : first + batch_size]
        max_prompt = max(len(prompt) for prompt, _ in batch)
        input_ids = torch.zeros(len(batch), max_prompt, dtype=torch.long)
        attention_mask = torch.zeros(len(batch), max_prompt, dtype=torch.long)
        for row, (prompt, _) in enumerate(batch):
            input_ids[row, max_prompt - len(prompt) :] = torch.tensor(prompt)
            attention_mask[row, max_prompt - len(prompt) :] = 1
        max_new = max(num_output for _, num_output in batch)
        with torch.no_grad():
            model.generate(
                input_ids.to(device),
                attention_mask=attention_mask.to(device),
                max_new_tokens=max_new,
                min_new_tokens=max_new,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
            )
        # Only the tokens each request asked for are useful; the rest is static-batching waste.
        num_useful_tokens += sum(num_output for _, num_output in batch)
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
    elapsed = time.perf_counter() - start
    del model
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return elapsed, num_useful_tokens


def resolve_device_and_dtype(args) -> tuple[str, torch.dtype]:
    """The device and dtype HF runs with: the same choice llmd's `auto` makes."""
    from llmd.runner.device import resolve_device, resolve_dtype

    device = resolve_device(args.device)
    return device.type, resolve_dtype(args.dtype, device)


LLMD_FLAGS = (
    Flag("max_num_seqs", show_default="the device's offline default"),
    Flag("max_num_batched_tokens", show_default="the device's offline default"),
    # The 64-request workload holds up to 64 x 768 tokens of KV; 1 GiB would preempt.
    Flag("kv_cache_memory_gib", default=4.0),
    Flag("attention_backend", choices=ATTENTION_BACKENDS),
    Flag("kv_cache_dtype", choices=KV_CACHE_DTYPES),
    Flag("num_threads", show_default="the cores llmd may use"),
    Flag("enforce_eager", is_switch=True),
    Flag("prepack_weights"),
    Flag("max_model_len", show_default="the model's"),
    Flag("async_scheduling", show_default="on for CUDA, off on CPU"),
    Flag("gpu_memory_utilization"),
)
"""The llmd engine flags the benchmark takes (the engine's own, from EngineConfig)."""

EXAMPLES = """\
Examples:
  llmd bench offline --num-requests 64 --repeats 3            # SmolLM2-135M shape, CPU or GPU
  llmd bench offline --cpu-limits --skip-hf --repeats 1       # llmd against this CPU's limits
  llmd bench offline --shape qwen3-0.6b --device cuda --num-requests 256 --warmup-requests 16
"""


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The benchmark's flags (also those of `llmd bench offline`), each described."""
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__.splitlines()[0], epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip

    def add(*names: str, help: str, **kwargs) -> None:
        shown = kwargs.get("default")
        is_flag = kwargs.get("action") == "store_true"
        suffix = "" if is_flag or shown is None else " [default: %(default)s]"
        parser.add_argument(*names, help=help + suffix, **kwargs)

    add("--num-requests", type=int, default=64, help="Requests in the workload.")
    add("--max-prompt", type=int, default=512, help="Longest prompt (tokens; shortest 16).")
    add("--max-output", type=int, default=256, help="Longest output (tokens; shortest 8).")
    add("--hf-batch-size", type=int, default=16, help="HF's static batch size.")
    add("--repeats", type=int, default=3, help="Timed runs; the report is their median.")
    add("--seed", type=int, default=0, help="Seed of the workload's lengths and tokens.")
    add("--skip-hf", action="store_true", help="Measure llmd only.")
    add("--skip-llmd", action="store_true", help="Measure HF only.")
    add("--json", type=Path, default=None, help="Write the runs and medians to this file.")
    add("--model", type=Path, default=None,
        help="An existing checkpoint directory instead of a random one.")  # fmt: skip
    add("--shape", choices=sorted(SHAPES), default="smollm2-135m",
        help="Shape of the random checkpoint.")  # fmt: skip
    add("--checkpoint-dir", type=Path, default=None,
        help="Create the random checkpoint here and keep it (reused if it has "
        "config.json).")  # fmt: skip
    add("--device", choices=DEVICES, default="auto",
        help="Where both engines run (auto: CUDA if visible).")  # fmt: skip
    add("--dtype", choices=DTYPES, default="auto",
        help="Both engines' dtype (auto: llmd's choice for the device).")  # fmt: skip
    add("--cpu-limits", action="store_true",
        help="Also measure copy GB/s, decode attention GB/s and decode steps vs GEMM "
        "(CPU).")  # fmt: skip
    for flag in LLMD_FLAGS:
        add_argument(parser, EngineConfig, flag, help_prefix="llmd: ")
    add("--quantized", type=Path, nargs="+", default=None, metavar="CHECKPOINT",
        help="Quantized checkpoints of the benchmark's model: each runs the same workload "
        "after it (llmd), with its weight bytes and batch-1 decode step.")  # fmt: skip
    add("--warmup-requests", type=int, default=0,
        help="Untimed llmd run of this many requests first, lengths as the workload's "
        "(compiles Triton kernels).")  # fmt: skip
    return parser


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Run the benchmark with `argv` (default: sys.argv[1:]); returns the exit status."""
    args = build_parser(prog).parse_args(argv)
    arch, shape, shape_dtype = SHAPES[args.shape]
    hf_device, hf_dtype = resolve_device_and_dtype(args)

    with tempfile.TemporaryDirectory() as tmp:
        path = args.model
        if path is None and args.checkpoint_dir is not None:
            path = args.checkpoint_dir
            if not (path / "config.json").is_file():
                make_checkpoint(path, shape, arch, shape_dtype, hf_device)
        if path is None:
            path = make_checkpoint(
                Path(tmp) / f"{args.shape}-shape", shape, arch, shape_dtype, hf_device
            )
        workload = make_workload(
            args.num_requests, shape["vocab_size"], args.seed, args.max_prompt, args.max_output
        )
        engine_options = {
            **{flag.field: getattr(args, flag.dest_name) for flag in LLMD_FLAGS},
            "device": args.device,
            "dtype": args.dtype,
        }
        if args.warmup_requests and not args.skip_llmd:
            # The timed run's length mix (not short outputs), so that its mixed prefill and
            # decode steps, and every Triton variant they need, have run once already.
            warmup = make_workload(
                args.warmup_requests, shape["vocab_size"], args.seed + 1, args.max_prompt,
                args.max_output,
            )  # fmt: skip
            warmup_s, _ = run_llmd(path, warmup, engine_options)
            print(f"warm-up: {args.warmup_requests} requests in {warmup_s:.1f} s", flush=True)
        limits = measure_cpu_limits(path, shape, engine_options) if args.cpu_limits else {}
        runs = []
        engine_info: dict = {}
        for repeat in range(args.repeats):
            run = {}
            if not args.skip_llmd:
                llmd_s, llmd_tokens = run_llmd(path, workload, engine_options, engine_info)
                run.update(llmd_s=llmd_s, llmd_tok_s=llmd_tokens / llmd_s)
                compiled = engine_info.get("triton_compiles_timed")
                if compiled is not None:
                    run["llmd_triton_compiles"] = len(compiled)
                if compiled:
                    print(f"warning: {len(compiled)} Triton compiles inside the timed run "
                          f"({', '.join(sorted(set(compiled)))}): this run's figure includes "
                          "them; raise --warmup-requests or --repeats", flush=True)  # fmt: skip
            if not args.skip_hf:
                hf_s, hf_tokens = run_hf_static(
                    path, workload, args.hf_batch_size, hf_device, hf_dtype
                )
                run.update(hf_s=hf_s, hf_tok_s=hf_tokens / hf_s)
            if "llmd_tok_s" in run and "hf_tok_s" in run:
                run["ratio"] = run["llmd_tok_s"] / run["hf_tok_s"]
            runs.append(run)
            figures = ", ".join(f"{key}={value:.2f}" for key, value in run.items())
            print(f"run {repeat + 1}/{args.repeats}: {figures}", flush=True)
        quantized_rows = []
        if args.quantized:
            quantized_rows = run_quantized(args, path, workload, engine_options, limits)

    summary = {key: statistics.median(run[key] for run in runs) for key in runs[0]} if runs else {}
    num_output = sum(n for _, n in workload)
    print(f"\nworkload: {args.num_requests} requests, {num_output} output tokens, "
          f"threads={torch.get_num_threads()}")  # fmt: skip
    if "llmd_tok_s" in summary:
        print(f"llmd (continuous batching): {summary['llmd_tok_s']:8.1f} output tok/s (median)")
    if "hf_tok_s" in summary:
        hf_label = f"HF static batches of {args.hf_batch_size}:"
        print(f"{hf_label:28s}{summary['hf_tok_s']:8.1f} output tok/s")
    if "ratio" in summary:
        print(f"ratio llmd / HF: {summary['ratio']:.2f}x (median of {args.repeats})")
    if args.json:
        options = {key: str(value) for key, value in vars(args).items()}
        report = {"args": options, "runs": runs, "median": summary}
        report |= {"num_output_tokens": num_output, "engine": engine_info}
        if limits:
            report["cpu_limits"] = limits
        if quantized_rows:
            report["quantized"] = quantized_rows
        if not args.skip_hf:
            report["hf"] = {"device": hf_device, "dtype": str(hf_dtype).removeprefix("torch.")}
        args.json.write_text(json.dumps(report, indent=2))
    return 0


def run_quantized(args, source: Path, workload, engine_options: dict, limits: dict) -> list[dict]:
    """`--quantized`: each checkpoint against `source`, in --repeats alternating rounds."""
    from llmd.bench import cpu_limits
    from llmd.bench.quantized_comparison import compare_quantized

    def tok_s(path: Path) -> float:
        seconds, num_tokens = run_llmd(path, workload, engine_options)
        return num_tokens / seconds

    copy_gbps = limits.get("copy_gbps")
    if copy_gbps is None and resolve_device_and_dtype(args)[0] == "cpu":
        copy_gbps = cpu_limits.copy_bandwidth_gbps()
    print("\nquantized checkpoints against the source (llmd, same workload):", flush=True)
    return compare_quantized(
        source, args.quantized, tok_s, engine_options, copy_gbps, num_rounds=args.repeats
    )


def measure_cpu_limits(path: Path, shape: dict, engine_options: dict) -> dict:
    """Copy GB/s, decode attention GB/s and decode-step GFLOP/s vs GEMM, printed and returned."""
    from llmd.bench import cpu_limits
    from llmd.runner.device import resolve_dtype, set_num_threads

    set_num_threads(engine_options.get("num_threads"))
    dtype = resolve_dtype(engine_options["dtype"], torch.device("cpu"))
    num_heads = shape["num_attention_heads"]
    head_dim = shape.get("head_dim", shape["hidden_size"] // num_heads)
    copy_gbps = cpu_limits.copy_bandwidth_gbps()
    print(f"copy bandwidth: {copy_gbps:.1f} GB/s (bytes read)", flush=True)
    limits: dict = {"copy_gbps": copy_gbps, "dtype": str(dtype).removeprefix("torch.")}
    kv_name = engine_options.get("kv_cache_dtype", "auto")
    cache_dtype = dtype if kv_name == "auto" else getattr(torch, kv_name)
    for backend in ("cpu", "torch") if cache_dtype == dtype else ("cpu",):
        attention = cpu_limits.decode_attention_gbps(
            num_heads=num_heads, num_kv_heads=shape["num_key_value_heads"], head_dim=head_dim,
            dtype=dtype, backend_name=backend, cache_dtype=cache_dtype,
        )  # fmt: skip
        attention["pct_of_copy"] = 100 * attention["gbps"] / copy_gbps
        limits[f"decode_attention_{backend}"] = attention
        print(
            f"decode attention ({attention['backend']}, 32 seqs x 512 tokens): "
            f"{attention['gbps']:.1f} GB/s = {attention['pct_of_copy']:.0f}% of copy, "
            f"{attention['ms_per_layer']:.2f} ms per layer",
            flush=True,
        )
    step = cpu_limits.decode_step_vs_gemm(path, engine_options)
    step["pct_of_gemm"] = 100 * step["decode_gflops"] / step["gemm_gflops"]
    limits["decode_step"] = step
    print(
        f"decode step (32 seqs x 512 tokens): {step['decode_gflops']:.1f} GFLOP/s "
        f"({step['step_ms']:.1f} ms) vs GEMM {step['gemm_gflops']:.1f} GFLOP/s at M=32 "
        f"({step['gemm_ms']:.1f} ms, {step['gemm_kind']}; torch's own "
        f"{step['torch_gemm_gflops']:.1f}): {step['pct_of_gemm']:.0f}%",
        flush=True,
    )
    return limits
