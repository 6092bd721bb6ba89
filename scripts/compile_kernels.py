#!/usr/bin/env python
"""Compile every llmd Triton kernel for GPU targets without a GPU, and check resources.

The launchers run as usual on CPU tensors, but each kernel launch is captured instead of
executed and compiled ahead of time for the target with triton's bundled ptxas, using the
launch configuration the launcher picks for that architecture (llmd/kernels/launch_configs).
The report shows registers, spills (stack), shared memory and whether the PTX uses tensor
cores and async copies; a kernel that spills or exceeds its arch's shared memory fails the
run. It catches what the interpreter-based tests cannot, on machines with no GPU.

    .venv/bin/python scripts/compile_kernels.py                    # 8.0, 8.6, 8.9, 9.0: all
    .venv/bin/python scripts/compile_kernels.py --arch 89 --dtype bfloat16 --head-dim 256
    .venv/bin/python scripts/compile_kernels.py --arch 89 90 --case fp8kv   # fp8 KV cache
"""

from __future__ import annotations

import argparse
import json
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
    checks,
    decode_attention,
    grouped_gemm,
    kv_store,
    launch_configs,
    paged_launch,
    prefill_attention,
    rmsnorm,
    rotary,
    silu_mul,
    w4a16_gemm,
)

POINTER_TYPES = {
    torch.bfloat16: "*bf16",
    torch.float16: "*fp16",
    torch.float32: "*fp32",
    torch.int32: "*i32",
    torch.int64: "*i64",
    torch.float8_e4m3fn: "*fp8e4nv",
    torch.uint8: "*u8",
}
PTX_FEATURES = ("wgmma", "mma.sync", "cp.async", "ld.global.v4")
NUM_SMS = {80: 108, 86: 84, 89: 128, 90: 132}
"""Streaming multiprocessors of a representative GPU per arch (split-K choice only)."""
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
HEAD_DIMS = (64, 128, 256)
FP8_KV_MIN_ARCH = 89
"""Triton has e4m3 only from sm_89 ("fp8e4nv not supported in this architecture" before),
so the fp8 KV cases compile there and later; the triton backend refuses fp8 before. Under
fp32 activations they stop at head dim 128: at 256 the fp32 3xTF32 tiles plus the
in-register e4m3 conversion spill on every tile size tried (a known gap, bf16 is fine)."""


class CapturedLaunch:
    """Stands in for a @triton.jit kernel: records `kernel[grid](*args, **kwargs)` calls."""

    def __init__(self, kernel, launches: list) -> None:
        self.kernel = kernel
        self.launches = launches

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append((self.kernel, grid, args, kwargs))


def capture_kernels(launches: list) -> None:
    """Swap each kernel module's kernels for recorders and make the checks accept CPU tensors."""
    kernel_modules = (decode_attention, prefill_attention, kv_store, rmsnorm, rotary, silu_mul,
                      grouped_gemm, w4a16_gemm)  # fmt: skip
    for module in kernel_modules:
        for name in dir(module):
            value = getattr(module, name)
            if isinstance(value, triton.runtime.jit.JITFunction) and name.endswith("_kernel"):
                setattr(module, name, CapturedLaunch(value, launches))
        if hasattr(module, "must_dot_in_fp32"):
            module.must_dot_in_fp32 = lambda dtype: dtype == torch.float32
        if hasattr(module, "check_devices"):
            module.check_devices = _first_device
    checks.check_devices = _first_device
    paged_launch.must_dot_in_fp32 = lambda dtype: dtype == torch.float32


def _first_device(tensors: dict) -> torch.device:
    """Stands in for checks.check_devices: CPU tensors stand for the target GPU's."""
    return next(iter(tensors.values())).device


def target_arch(arch: int) -> None:
    """Make the launchers pick `arch`'s launch configuration and SM count."""
    for module in (decode_attention, prefill_attention, grouped_gemm, w4a16_gemm):
        module.arch_of = lambda device: arch
    decode_attention._num_sms = lambda device: NUM_SMS[arch]


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


def launch_cases(dtype: torch.dtype, head_dim: int, arch: int) -> list[tuple[str, object]]:
    """(label, call) pairs covering each kernel's specialisations at model-like shapes
    (with the fp8 KV-cache variants where `arch` has e4m3)."""
    i32 = torch.int32

    def decode(group, kv_heads, num_splits, cache_dtype=dtype):
        query = torch.empty(4, group * kv_heads, head_dim, dtype=dtype)
        cache = torch.empty(64, 16, kv_heads, head_dim, dtype=cache_dtype)
        tables, lens = torch.zeros(4, 256, dtype=i32), torch.ones(4, dtype=i32)
        return lambda: decode_attention.decode_attention(
            query, cache, cache, tables, lens, 0.1, num_splits=num_splits
        )

    def prefill(group, kv_heads, cache_dtype=dtype):
        query = torch.empty(64, group * kv_heads, head_dim, dtype=dtype)
        cache = torch.empty(64, 16, kv_heads, head_dim, dtype=cache_dtype)
        tables, lens = torch.zeros(2, 16, dtype=i32), torch.ones(2, dtype=i32)
        starts = torch.zeros(3, dtype=i32)
        return lambda: prefill_attention.prefill_attention(
            query, cache, cache, tables, lens, starts, 32, 0.1
        )

    def w4a16(num_rows, dtype, num_splits=1):
        packed, scales = torch.empty(512, 4096, dtype=i32), torch.empty(32, 4096)
        return lambda: w4a16_gemm.w4a16_gemm(
            torch.empty(num_rows, 4096, dtype=dtype), packed, scales, scales, 128,
            torch.empty(4096, dtype=dtype), num_splits=num_splits)  # fmt: skip

    tokens = torch.empty(8, 8, head_dim, dtype=dtype)
    cache = torch.empty(4, 16, 8, head_dim, dtype=dtype)
    hidden = torch.empty(8, 4096, dtype=dtype)
    half = head_dim // 2
    fp8 = torch.float8_e4m3fn
    fp8_cache = torch.empty(4, 16, 8, head_dim, dtype=fp8)
    has_fp8 = arch >= FP8_KV_MIN_ARCH and (dtype != torch.float32 or head_dim <= 128)
    fp8_cases = [
        ("decode g4 split fp8kv", decode(4, 8, 4, fp8)),
        ("decode g8 no split fp8kv", decode(8, 2, 1, fp8)),
        ("prefill g4 fp8kv", prefill(4, 8, fp8)),
        ("kv_store fp8kv", lambda: kv_store.kv_store(tokens, tokens, fp8_cache, fp8_cache,
                                                     torch.zeros(8).long(), 0.5, 2.0)),
    ] if has_fp8 else []  # fmt: skip
    return fp8_cases + [
        ("decode g4 split", decode(4, 8, 4)),  # the attention and the split-K reduce
        ("decode g8 no split", decode(8, 2, 1)),
        ("prefill g4", prefill(4, 8)),
        ("prefill g8", prefill(8, 2)),
        ("kv_store", lambda: kv_store.kv_store(tokens, tokens, cache, cache,
                                               torch.zeros(8).long())),
        ("rms_norm", lambda: rmsnorm.rms_norm(hidden, hidden[0], 1e-6)),
        ("fused_add_rms_norm", lambda: rmsnorm.fused_add_rms_norm(hidden, hidden, hidden[0],
                                                                  1e-6)),
        ("rotary", lambda: rotary.rotary_embedding(
            torch.zeros(8).long(), tokens, tokens, torch.empty(9, half), torch.empty(9, half))),
        ("silu_mul", lambda: silu_mul.silu_mul(torch.empty(8, 2 * 14336, dtype=dtype))),
        ("grouped_gemm", lambda: grouped_gemm.grouped_gemm(  # Qwen3-30B-A3B's gate/up
            torch.empty(64, 2048, dtype=dtype), torch.empty(128, 1536, 2048, dtype=dtype),
            torch.full((128,), 0).index_fill_(0, torch.arange(8), 8))),
        ("w4a16 decode", w4a16(1, dtype)),  # Llama-3-8B's o_proj, AWQ-style g128 with zeros
        ("w4a16 decode split", w4a16(1, dtype, num_splits=4)),
        ("w4a16 prefill", w4a16(64, dtype)),
    ]  # fmt: skip


def compile_matrix(
    archs: list[int], dtype_names: list[str], head_dims: list[int], case_filter: str | None
) -> list[dict]:
    """Compile every case for every arch x dtype x head_dim; one result row per kernel."""
    launches: list = []
    capture_kernels(launches)
    rows = []
    for arch in archs:
        target = GPUTarget("cuda", arch, 32)
        target_arch(arch)
        shared_limit = launch_configs.SHARED_MEMORY_BYTES[arch]
        for dtype_name in dtype_names:
            for head_dim in head_dims:
                for label, call in launch_cases(DTYPES[dtype_name], head_dim, arch):
                    if case_filter and case_filter not in label:
                        continue
                    launches.clear()
                    call()
                    for kernel, _grid, args, kwargs in launches:
                        compiled = compile_launch(kernel, args, kwargs, target)
                        registers, stack = resource_usage(compiled)
                        shared = compiled.metadata.shared
                        problems = []
                        if shared > shared_limit:
                            problems.append(f"shared memory {shared} > {shared_limit}")
                        if stack not in ("0", "?"):
                            problems.append(f"spills ({stack} B stack)")
                        rows.append({
                            "arch": arch, "dtype": dtype_name, "head_dim": head_dim,
                            "case": label, "kernel": kernel.fn.__name__,
                            "num_warps": compiled.metadata.num_warps,
                            "num_stages": compiled.metadata.num_stages, "shared": shared,
                            "shared_limit": shared_limit, "registers": registers,
                            "stack": stack, "problems": problems,
                            "ptx": [f for f in PTX_FEATURES if f in compiled.asm["ptx"]],
                        })  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--arch",
        type=int,
        nargs="+",
        default=list(launch_configs.SUPPORTED_ARCHS),
        choices=launch_configs.SUPPORTED_ARCHS,
        help="compute capabilities",
    )
    parser.add_argument("--dtype", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    parser.add_argument("--head-dim", type=int, nargs="+", default=list(HEAD_DIMS))
    parser.add_argument("--case", default=None, help="only cases whose label contains this")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args()
    rows = compile_matrix(args.arch, args.dtype, args.head_dim, args.case)
    print(f"{'arch':>4} {'dtype':<9} {'d':>3} {'case':<20} {'kernel':<26} {'warps':>5} "
          f"{'stages':>6} {'smem':>7} {'regs':>4} {'stack':>5}  ptx")  # fmt: skip
    for row in rows:
        problems = ("  " + "; ".join(row["problems"]).upper()) if row["problems"] else ""
        print(f"{row['arch']:>4} {row['dtype']:<9} {row['head_dim']:>3} {row['case']:<20} "
              f"{row['kernel']:<26} {row['num_warps']:>5} {row['num_stages']:>6} "
              f"{row['shared']:>7} {row['registers']:>4} {row['stack']:>5}  "
              f"{','.join(row['ptx'])}{problems}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    num_bad = sum(1 for row in rows if row["problems"])
    print(f"{len(rows)} kernels compiled, {num_bad} over a limit or spilling")
    sys.exit(1 if num_bad else 0)


if __name__ == "__main__":
    main()
