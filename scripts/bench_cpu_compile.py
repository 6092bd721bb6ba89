#!/usr/bin/env python3
"""Eager vs torch.compile'd model forward on CPU: prefill and decode step times, compile time.

    .venv/bin/python scripts/bench_cpu_compile.py --model /tmp/smollm2-135m-random
    .venv/bin/python scripts/bench_cpu_compile.py --num-threads 1 \
        --variants eager-packed compiled-frozen compiled-packed   # figures in ARCHITECTURE.md

(without --model a SmolLM2-135M-shaped random checkpoint is written to a temporary folder;
compiling the full model takes minutes per compiled variant on a 2-core machine).
Variants, each its own copy of the model over one shared paged KV cache:

- `eager-packed`: the engine's default (oneDNN-prepacked linears): the baseline.
- `eager-plain`: plain nn.Linear (torch's default GEMM), for reference.
- `compiled-frozen`: inductor (`dynamic=True`, so token and sequence counts stay symbolic)
  with `freezing=True` over plain nn.Linear: weights become constants that inductor packs
  itself (MKL's packed GEMM for float32) and elementwise ops fuse between the GEMMs.
- `compiled-packed`: inductor over the oneDNN-prepacked linears, each called through an
  opaque custom op (inductor cannot trace opaque mkldnn tensors); the elementwise ops fuse.

The C++ paged-attention op gets a fake (meta) implementation so dynamo traces through it
without a graph break. Steps: one prefill of `--prefill-tokens` tokens and decode steps of
`--decode-seqs` sequences with `--context` tokens each. Every repeat runs all variants one
after the other (alternated, so load on a shared machine hits them alike); the figure is
the median. Greedy next tokens (argmax of the logits) are checked equal to the baseline's.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llmd.attention.factory import create_attention_backend
from llmd.engine.plan_writer import PlanWriter
from llmd.engine.request import Request, RequestStatus
from llmd.layers import packed_linear
from llmd.layers.packed_linear import pack_linear_layers
from llmd.models.loader import load_hf_config, load_model, model_shape
from llmd.runner.input_batch import InputBatch, build_input_batch
from llmd.runner.kv_cache import allocate_kv_cache
from llmd.sampling_params import SamplingParams

BLOCK_SIZE = 16
VARIANTS = ("eager-packed", "eager-plain", "compiled-frozen", "compiled-packed")
BASELINE = "eager-packed"

_PACKED_WEIGHTS: list[tuple[torch.Tensor, torch.Tensor | None]] = []
"""oneDNN-packed (weight, bias) per handle, for the `llmd_bench::packed_linear` op."""


@torch.library.custom_op("llmd_bench::packed_linear", mutates_args=())
def packed_linear_op(hidden: torch.Tensor, handle: int, out_features: int) -> torch.Tensor:
    """[num_tokens, in_features] -> [num_tokens, out_features] with packed weight `handle`."""
    weight, bias = _PACKED_WEIGHTS[handle]
    return torch.ops.mkldnn._linear_pointwise(hidden, weight, bias, "none", [], "")


@packed_linear_op.register_fake
def _(hidden: torch.Tensor, handle: int, out_features: int) -> torch.Tensor:
    return hidden.new_empty((*hidden.shape[:-1], out_features))


class HandlePackedLinear(nn.Module):
    """A PackedLinear whose packed weight hides behind an integer handle (traceable)."""

    def __init__(self, layer: packed_linear.PackedLinear) -> None:
        super().__init__()
        self.handle = len(_PACKED_WEIGHTS)
        self.out_features = layer.out_features
        (_, _, packed_weight, bias) = layer.shards[0]  # the body's linears have one shard
        _PACKED_WEIGHTS.append((packed_weight, bias))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return packed_linear_op(hidden, self.handle, self.out_features)


def register_attention_fake() -> None:
    """Give llmd_cpu::paged_attention a fake kernel: it only writes its mutable arguments."""

    @torch.library.register_fake("llmd_cpu::paged_attention")
    def _(out, query, key, value, k_cache, v_cache, slots, tables, starts, seq_lens, scale):
        return None


def make_request(index: int, num_tokens: int, first_block: int) -> Request:
    request = Request(f"r{index}", [1 + index % 50] * num_tokens, SamplingParams(max_tokens=1))
    request.block_ids = list(range(first_block, first_block + -(-num_tokens // BLOCK_SIZE)))
    return request


def prefill_batch(num_tokens: int) -> InputBatch:
    """One prompt of `num_tokens` tokens on blocks 0..n-1."""
    request = make_request(0, num_tokens, 0)
    plan = PlanWriter().plan([(request, num_tokens, True)])
    return build_input_batch(plan, BLOCK_SIZE, torch.device("cpu"))


def decode_batch(num_seqs: int, context: int, first_block: int) -> InputBatch:
    """`num_seqs` sequences decoding their `context`-th token, each on its own blocks."""
    chunks = []
    blocks_per_seq = -(-context // BLOCK_SIZE)
    for index in range(num_seqs):
        request = make_request(index, context, first_block + index * blocks_per_seq)
        request.num_computed_tokens = context - 1
        request.status = RequestStatus.RUNNING
        chunks.append((request, 1, True))
    plan = PlanWriter().plan(chunks)  # every request new to the runner: whole block tables
    return build_input_batch(plan, BLOCK_SIZE, torch.device("cpu"))


def build_variants(
    base: nn.Module, names: list[str], mode: str
) -> dict[str, Callable[[InputBatch, list], torch.Tensor]]:
    """One forward callable per variant name (compilation happens lazily, on first call)."""
    forwards = {}
    for name in names:
        model = copy.deepcopy(base)
        if name.endswith("packed") and pack_linear_layers(model) == 0:
            raise SystemExit("oneDNN weight packing is unavailable here")
        if name == "compiled-packed":
            for parent in list(model.modules()):
                for child_name, child in list(parent.named_children()):
                    if isinstance(child, packed_linear.PackedLinear):
                        setattr(parent, child_name, HandlePackedLinear(child))
        forward = model.forward
        if name.startswith("compiled"):
            forward = torch.compile(model, dynamic=True, mode=None if mode == "default" else mode)
        forwards[name] = _with_logits(model, forward)
    return forwards


def _with_logits(model: nn.Module, forward: Callable) -> Callable:
    def run(batch: InputBatch, kv_caches: list) -> torch.Tensor:
        hidden = forward(batch.input_ids, batch.positions, kv_caches, batch.metadata)
        return hidden[batch.logits_indices]

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, help="checkpoint (default: a random 135M one)")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--mode", default="default", help="torch.compile mode")
    parser.add_argument("--prefill-tokens", type=int, default=2048)
    parser.add_argument("--decode-seqs", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--context", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--num-threads", type=int, default=2)
    parser.add_argument("--num-layers", type=int, help="keep only the first N layers (probes)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    if args.model is not None:
        return run(args, args.model)
    with tempfile.TemporaryDirectory(prefix="llmd-compile-bench-") as scratch:
        return run(args, make_default_checkpoint(Path(scratch)))


def run(args: argparse.Namespace, model_path: Path) -> int:
    """Build the variants over `model_path`, compile them, time every step, print a table."""
    torch.set_num_threads(args.num_threads)
    torch._inductor.config.freezing = True  # only affects compiled variants
    hf_config = load_hf_config(model_path)
    device = torch.device("cpu")
    backend = create_attention_backend("cpu", device)  # builds or loads the op
    register_attention_fake()
    base = load_model(model_path, hf_config, backend, torch.float32, device)
    if args.num_layers:
        base.model.layers = base.model.layers[: args.num_layers]
    base.model.rotary.cos_sin(torch.zeros(1, dtype=torch.int64), torch.float32)  # build tables
    names = [BASELINE] + [name for name in args.variants if name != BASELINE]
    forwards = build_variants(base, names, args.mode)
    lm_head = base.lm_head
    shape = model_shape(hf_config)
    num_prefill_blocks = -(-args.prefill_tokens // BLOCK_SIZE)
    decode_blocks = max(args.decode_seqs) * -(-args.context // BLOCK_SIZE)
    kv_caches = allocate_kv_cache(
        len(base.model.layers), num_prefill_blocks + decode_blocks, BLOCK_SIZE,
        shape.num_kv_heads, shape.head_dim, torch.float32, device,
        shapes=backend.kv_cache_shapes(
            num_prefill_blocks + decode_blocks, BLOCK_SIZE, shape.num_kv_heads, shape.head_dim
        ),
    )  # fmt: skip
    steps = {f"prefill {args.prefill_tokens}": prefill_batch(args.prefill_tokens)}
    for num_seqs in args.decode_seqs:
        steps[f"decode {num_seqs}x{args.context}"] = decode_batch(
            num_seqs, args.context, num_prefill_blocks
        )
    command = "python scripts/bench_cpu_compile.py " + " ".join(sys.argv[1:])
    print(f"# {command.strip()}\n# torch {torch.__version__}, {args.num_threads} threads")
    results = {"command": command, "compile_s": {}, "steps": {}, "tokens_equal": {}}
    with torch.inference_mode():
        for name, forward in forwards.items():
            # The first calls compile: one graph for single-sequence steps (size 1 is
            # specialized), one for every larger batch (token and sequence counts symbolic).
            started = time.perf_counter()
            for batch in steps.values():
                forward(batch, kv_caches)
            results["compile_s"][name] = time.perf_counter() - started
            print(f"first calls of {name}: {results['compile_s'][name]:.1f} s", flush=True)
        for step_name, batch in steps.items():
            medians, equal = time_step(forwards, batch, kv_caches, lm_head, args.repeats)
            results["steps"][step_name] = medians
            results["tokens_equal"][step_name] = equal
            for name, seconds in medians.items():
                speed_up = medians[BASELINE] / seconds
                print(f"{step_name:>16} {name:>16} {seconds * 1000:9.1f} ms {speed_up:6.2f}x  "
                      f"greedy equal: {equal[name]}", flush=True)  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


def time_step(
    forwards: dict[str, Callable],
    batch: InputBatch,
    kv_caches: list,
    lm_head: nn.Module,
    num_repeats: int,
) -> tuple[dict[str, float], dict[str, bool]]:
    """Median seconds per variant (alternated each repeat) and greedy tokens equal to the
    baseline's (argmax of the logits of every sampled row)."""
    times: dict[str, list[float]] = {name: [] for name in forwards}
    greedy = {}
    for _ in range(num_repeats):
        for name, forward in forwards.items():
            started = time.perf_counter()
            hidden = forward(batch, kv_caches)  # [num_sampled_rows, hidden_size]
            times[name].append(time.perf_counter() - started)
            greedy[name] = lm_head(hidden).argmax(-1)
    medians = {name: statistics.median(values) for name, values in times.items()}
    equal = {name: bool(torch.equal(greedy[name], greedy[BASELINE])) for name in forwards}
    return medians, equal


def make_default_checkpoint(folder: Path) -> Path:
    """A random SmolLM2-135M-shaped checkpoint in `folder` (the offline benchmark's shape)."""
    from llmd.bench.workload import SHAPES, make_checkpoint

    arch, fields, dtype = SHAPES["smollm2-135m"]
    return make_checkpoint(folder / "smollm2-135m-random", fields, arch, dtype)


if __name__ == "__main__":
    sys.exit(main())
