#!/usr/bin/env python
"""Compile every llmd Triton kernel for a GPU target without a GPU, and report resources.

The launchers run as usual on meta-free CPU tensors, but each kernel launch is captured
instead of executed and compiled ahead of time for the target (default sm_90, Hopper)
with triton's bundled ptxas; the report shows registers, spills (stack), shared memory and
whether the PTX uses tensor cores and async copies. It catches compile errors and resource
overflows on machines with no GPU, which the interpreter-based tests cannot.

    .venv/bin/python scripts/compile_kernels.py              # sm_90
    .venv/bin/python scripts/compile_kernels.py --arch 80    # Ampere
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)  # kernels must be built for the compiler
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend

from llmd.kernels import (
    decode_attention,
    kv_store,
    prefill_attention,
    rmsnorm,
    rotary,
    silu_mul,
)

POINTER_TYPES = {
    torch.bfloat16: "*bf16",
    torch.float16: "*fp16",
    torch.float32: "*fp32",
    torch.int32: "*i32",
    torch.int64: "*i64",
}
PTX_FEATURES = ("wgmma", "mma.sync", "cp.async", "ld.global.v4")
SHARED_LIMIT = 227 * 1024  # per-block dynamic shared memory on sm_90


class CapturedLaunch:
    """Stands in for a @triton.jit kernel: records `kernel[grid](*args, **kwargs)` calls."""

    def __init__(self, kernel, launches: list) -> None:
        self.kernel = kernel
        self.launches = launches

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append((self.kernel, grid, args, kwargs))


def capture_kernels(launches: list) -> None:
    """Swap each kernel module's kernels for recorders and make its checks accept CPU tensors."""
    for module in (decode_attention, prefill_attention, kv_store, rmsnorm, rotary, silu_mul):
        for name in dir(module):
            value = getattr(module, name)
            if isinstance(value, triton.runtime.jit.JITFunction) and name.endswith("_kernel"):
                setattr(module, name, CapturedLaunch(value, launches))
        module.check_devices = lambda tensors: next(iter(tensors.values())).device
        if hasattr(module, "must_dot_in_fp32"):
            module.must_dot_in_fp32 = lambda dtype: dtype == torch.float32
    tuned = prefill_attention._launch_config
    prefill_attention._launch_config = lambda head_dim, dtype, device: tuned(
        head_dim, dtype, torch.device("cuda")
    )
    decode_attention._num_sms = lambda device: 132


def compile_launch(kernel, args: tuple, kwargs: dict, target: GPUTarget):
    """Compile one captured launch, specialising ints the way the JIT does (1, % 16)."""
    kwargs = dict(kwargs)
    options = {"num_warps": kwargs.pop("num_warps", 4), "num_stages": kwargs.pop("num_stages", 3)}
    signature, constants, attrs = {}, dict(kwargs), {}
    for index, (name, value) in enumerate(zip(kernel.arg_names, args)):
        if isinstance(value, torch.Tensor):
            signature[name] = POINTER_TYPES[value.dtype]
            attrs[(index,)] = [["tt.divisibility", 16]]
        elif isinstance(value, int) and value == 1:
            constants[name] = 1
        elif isinstance(value, int):
            signature[name] = "i32" if -(2**31) <= value < 2**31 else "i64"
            if value % 16 == 0:
                attrs[(index,)] = [["tt.divisibility", 16]]
        else:
            signature[name] = "fp32"
    signature |= dict.fromkeys(constants, "constexpr")
    signature = {name: signature[name] for name in kernel.arg_names}
    source = ASTSource(fn=kernel, signature=signature, constexprs=constants, attrs=attrs)
    backend = make_backend(target)
    return triton.compile(source, target=target, options=backend.parse_options(options).__dict__)


def resource_usage(compiled) -> tuple[str, str]:
    """(registers, stack bytes) of a compiled kernel, read from its cubin with cuobjdump."""
    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        usage = subprocess.run(
            [str(cuobjdump), "--dump-resource-usage", cubin.name],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    registers = re.search(r"REG:(\d+)", usage)
    stack = re.search(r"STACK:(\d+)", usage)
    return (registers.group(1) if registers else "?", stack.group(1) if stack else "?")


def launch_cases() -> list[tuple[str, object]]:
    """(label, call) pairs covering each kernel's specialisations at model-like shapes."""
    bf16, i32 = torch.bfloat16, torch.int32

    def decode(head_dim, group, kv_heads, num_splits, dtype=bf16):
        query = torch.empty(4, group * kv_heads, head_dim, dtype=dtype)
        cache = torch.empty(64, 16, kv_heads, head_dim, dtype=dtype)
        tables, lens = torch.zeros(4, 256, dtype=i32), torch.ones(4, dtype=i32)
        return lambda: decode_attention.decode_attention(
            query, cache, cache, tables, lens, 0.1, num_splits=num_splits
        )

    def prefill(head_dim, group, kv_heads, dtype=bf16):
        query = torch.empty(64, group * kv_heads, head_dim, dtype=dtype)
        cache = torch.empty(64, 16, kv_heads, head_dim, dtype=dtype)
        tables, lens = torch.zeros(2, 16, dtype=i32), torch.ones(2, dtype=i32)
        starts = torch.zeros(3, dtype=i32)
        return lambda: prefill_attention.prefill_attention(
            query, cache, cache, tables, lens, starts, 32, 0.1
        )

    tokens = torch.empty(8, 8, 128, dtype=bf16)
    cache = torch.empty(4, 16, 8, 128, dtype=bf16)
    hidden = torch.empty(8, 4096, dtype=bf16)
    return [
        ("decode d128 g4 (auto split)", decode(128, 4, 8, None)),
        ("decode d128 g4 split 1", decode(128, 4, 8, 1)),
        ("decode d64 g3 fp16", decode(64, 3, 3, 1, torch.float16)),
        ("decode d256 g8", decode(256, 8, 2, 2)),
        ("decode d128 fp32", decode(128, 1, 8, 1, torch.float32)),
        ("prefill d128 g4", prefill(128, 4, 8)),
        ("prefill d64 g3", prefill(64, 3, 3)),
        ("prefill d256 g2", prefill(256, 2, 4)),
        ("prefill d128 fp32", prefill(128, 1, 8, torch.float32)),
        (
            "kv_store",
            lambda: kv_store.kv_store(tokens, tokens, cache, cache, torch.zeros(8).long()),
        ),
        ("rms_norm", lambda: rmsnorm.rms_norm(hidden, hidden[0], 1e-6)),
        ("fused_add_rms_norm", lambda: rmsnorm.fused_add_rms_norm(hidden, hidden, hidden[0], 1e-6)),
        (
            "rotary",
            lambda: rotary.rotary_embedding(
                torch.zeros(8).long(), tokens, tokens, torch.empty(9, 64), torch.empty(9, 64)
            ),
        ),
        ("silu_mul", lambda: silu_mul.silu_mul(torch.empty(8, 2 * 14336, dtype=bf16))),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", type=int, default=90, help="compute capability, e.g. 90, 80")
    args = parser.parse_args()
    target = GPUTarget("cuda", args.arch, 32)
    launches: list = []
    capture_kernels(launches)
    failures = 0
    print(f"{'case':<28} {'kernel':<26} {'warps':>5} {'smem':>7} {'regs':>4} {'stack':>5}  ptx")
    for label, call in launch_cases():
        launches.clear()
        call()
        for kernel, _grid, launch_args, launch_kwargs in launches:
            compiled = compile_launch(kernel, launch_args, launch_kwargs, target)
            registers, stack = resource_usage(compiled)
            shared = compiled.metadata.shared
            features = [name for name in PTX_FEATURES if name in compiled.asm["ptx"]]
            warning = "  SHARED MEMORY OVER LIMIT" if shared > SHARED_LIMIT else ""
            failures += bool(warning)
            print(
                f"{label:<28} {kernel.fn.__name__:<26} {compiled.metadata.num_warps:>5} "
                f"{shared:>7} {registers:>4} {stack:>5}  {','.join(features)}{warning}"
            )
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
