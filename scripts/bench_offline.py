#!/usr/bin/env python
"""Offline throughput: llmd's continuous batching against HF transformers' static batching.

A seeded heterogeneous workload (prompts 16-512 tokens, outputs 8-256, EOS ignored) runs
on a random checkpoint shaped like SmolLM2-135M; both engines run in the same process and
the report is output tokens/s for each and their ratio, the median over --repeats runs.

    .venv/bin/python scripts/bench_offline.py --num-requests 64 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch

SMOLLM2_135M_SHAPE = {
    "hidden_size": 576,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "intermediate_size": 1536,
    "vocab_size": 49152,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": True,
    "rope_theta": 100000.0,
    "rms_norm_eps": 1e-5,
}


def make_checkpoint(path: Path, shape: dict) -> Path:
    """Save a random-weight Llama checkpoint of the given shape (float32)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        **shape, architectures=["LlamaForCausalLM"], eos_token_id=0, bos_token_id=1
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(path)
    return path


def make_workload(num_requests: int, vocab_size: int, seed: int, max_prompt: int, max_output: int):
    """Seeded (prompt_token_ids, num_output_tokens) pairs with heterogeneous lengths."""
    rng = random.Random(seed)
    return [
        (
            [rng.randrange(2, vocab_size) for _ in range(rng.randint(16, max_prompt))],
            rng.randint(8, max_output),
        )
        for _ in range(num_requests)
    ]


def run_llmd(path: Path, workload, engine_options: dict) -> tuple[float, int]:
    """Seconds to finish the whole workload with llmd's engine, and output tokens produced."""
    from llmd.config import EngineConfig
    from llmd.llm_engine import LLMEngine
    from llmd.sampling_params import SamplingParams

    engine = LLMEngine(EngineConfig(model=str(path), skip_tokenizer_init=True, **engine_options))
    start = time.perf_counter()
    for prompt, num_output in workload:
        params = SamplingParams(temperature=0.0, max_tokens=num_output, ignore_eos=True)
        engine.add_request(prompt, params)
    num_output_tokens = 0
    while engine.has_unfinished_requests():
        for update in engine.step().updates:
            num_output_tokens += len(update.new_token_ids)
    elapsed = time.perf_counter() - start
    del engine
    return elapsed, num_output_tokens


def run_hf_static(path: Path, workload, batch_size: int) -> tuple[float, int]:
    """Seconds for HF generate in fixed batches (left-padded, run to the batch's longest output)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
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
                input_ids,
                attention_mask=attention_mask,
                max_new_tokens=max_new,
                min_new_tokens=max_new,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
            )
        # Only the tokens each request asked for are useful; the rest is static-batching waste.
        num_useful_tokens += sum(num_output for _, num_output in batch)
    return time.perf_counter() - start, num_useful_tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--max-prompt", type=int, default=512)
    parser.add_argument("--max-output", type=int, default=256)
    parser.add_argument("--hf-batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--kv-cache-memory-gib", type=float, default=4.0)
    parser.add_argument("--skip-hf", action="store_true", help="measure llmd only")
    parser.add_argument("--json", type=Path, default=None, help="write results here")
    parser.add_argument("--model", type=Path, default=None, help="existing checkpoint dir")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path = args.model or make_checkpoint(Path(tmp) / "smollm2-135m-shape", SMOLLM2_135M_SHAPE)
        workload = make_workload(
            args.num_requests, SMOLLM2_135M_SHAPE["vocab_size"], args.seed,
            args.max_prompt, args.max_output,
        )  # fmt: skip
        engine_options = {
            "max_num_seqs": args.max_num_seqs,
            "max_num_batched_tokens": args.max_num_batched_tokens,
            "kv_cache_memory_gib": args.kv_cache_memory_gib,
        }
        runs = []
        for repeat in range(args.repeats):
            llmd_s, llmd_tokens = run_llmd(path, workload, engine_options)
            run = {"llmd_s": llmd_s, "llmd_tok_s": llmd_tokens / llmd_s}
            if not args.skip_hf:
                hf_s, hf_tokens = run_hf_static(path, workload, args.hf_batch_size)
                run.update(hf_s=hf_s, hf_tok_s=hf_tokens / hf_s)
                run["ratio"] = run["llmd_tok_s"] / run["hf_tok_s"]
            runs.append(run)
            figures = ", ".join(f"{key}={value:.2f}" for key, value in run.items())
            print(f"run {repeat + 1}/{args.repeats}: {figures}", flush=True)

    summary = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    num_output = sum(n for _, n in workload)
    print(f"\nworkload: {args.num_requests} requests, {num_output} output tokens, "
          f"threads={torch.get_num_threads()}")  # fmt: skip
    print(f"llmd (continuous batching): {summary['llmd_tok_s']:8.1f} output tok/s (median)")
    if "hf_tok_s" in summary:
        hf_label = f"HF static batches of {args.hf_batch_size}:"
        print(f"{hf_label:28s}{summary['hf_tok_s']:8.1f} output tok/s")
        print(f"ratio llmd / HF: {summary['ratio']:.2f}x (median of {args.repeats})")
    if args.json:
        options = {key: str(value) for key, value in vars(args).items()}
        report = {"args": options, "runs": runs, "median": summary}
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
