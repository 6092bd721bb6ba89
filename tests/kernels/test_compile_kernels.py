"""Kernels compile for every supported GPU architecture without a GPU: no register spills,
shared memory within each arch's limit (scripts/compile_kernels.py, in a subprocess).

Compiling is slow on a small CPU (seconds per kernel), so CI compiles the kernel most
likely to break, prefill attention at head dim 256 in bf16 and fp32 (the largest tiles and
the most registers), on every arch; the script itself runs the whole kernel x arch x dtype
x head_dim matrix (`python scripts/compile_kernels.py`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmd.kernels import launch_configs

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "compile_kernels.py"
ARCHS = [str(arch) for arch in launch_configs.SUPPORTED_ARCHS]


def _compile(tmp_path: Path, *args: str) -> list[dict]:
    out = tmp_path / "rows.json"
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--json", str(out)],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    if not out.is_file():
        pytest.fail(f"compile_kernels.py produced no results:\n{completed.stderr[-3000:]}")
    return json.loads(out.read_text())


def test_prefill_fits_every_arch_at_head_dim_256(tmp_path):
    pytest.importorskip("triton")
    rows = _compile(
        tmp_path, "--arch", *ARCHS, "--dtype", "bfloat16", "float32", "--head-dim", "256",
        "--case", "prefill g4",
    )  # fmt: skip
    compiled = {(row["arch"], row["dtype"], row["kernel"]) for row in rows}
    assert compiled == {
        (arch, dtype, "_prefill_attention_kernel")
        for arch in launch_configs.SUPPORTED_ARCHS
        for dtype in ("bfloat16", "float32")
    }
    problems = [row for row in rows if row["problems"]]
    assert not problems, "\n".join(
        f"sm_{r['arch']} {r['dtype']} d{r['head_dim']} {r['kernel']}: {r['problems']}"
        for r in problems
    )
    for row in rows:  # the check itself uses each arch's own limit
        assert row["shared_limit"] == launch_configs.SHARED_MEMORY_BYTES[row["arch"]]


def test_fp32_decode_at_head_dim_64_does_not_spill_on_ada_and_ampere_consumer(tmp_path):
    # The full matrix found 8 bytes of stack here with 32-token tiles (sm_86, sm_89).
    pytest.importorskip("triton")
    rows = _compile(
        tmp_path, "--arch", "86", "89", "--dtype", "float32", "--head-dim", "64",
        "--case", "decode g4 split",
    )  # fmt: skip
    kernels = {(row["arch"], row["kernel"]) for row in rows}
    assert (86, "_decode_attention_kernel") in kernels and (
        89,
        "_decode_attention_kernel",
    ) in kernels
    problems = [row for row in rows if row["problems"]]
    assert not problems, [(r["arch"], r["kernel"], r["problems"]) for r in problems]


def test_the_grouped_gemm_fits_every_arch_in_fp32_and_bf16(tmp_path):
    """The MoE experts' kernel: fp32's 3xTF32 products spilled at 64 x 128 tiles, so fp32
    has its own (smaller) configuration; both dtypes must compile clean everywhere."""
    pytest.importorskip("triton")
    rows = _compile(
        tmp_path, "--arch", *ARCHS, "--dtype", "bfloat16", "float32", "--head-dim", "64",
        "--case", "grouped_gemm",
    )  # fmt: skip
    assert {(row["arch"], row["dtype"]) for row in rows} == {
        (arch, dtype)
        for arch in launch_configs.SUPPORTED_ARCHS
        for dtype in ("bfloat16", "float32")
    }
    assert not [row for row in rows if row["problems"]]


def test_the_w4a16_gemm_fits_every_arch_for_decode_and_prefill(tmp_path):
    """The 4-bit weight GEMM (never run on a GPU): its decode (whole and split K) and prefill
    tiles must compile clean on every arch, with tensor-core dots."""
    pytest.importorskip("triton")
    rows = _compile(
        tmp_path, "--arch", *ARCHS, "--dtype", "bfloat16", "--head-dim", "64", "--case", "w4a16"
    )
    assert {(row["arch"], row["case"]) for row in rows} == {
        (arch, case)
        for arch in launch_configs.SUPPORTED_ARCHS
        for case in ("w4a16 decode", "w4a16 decode split", "w4a16 prefill")
    }
    assert not [row for row in rows if row["problems"]]
    assert all({"mma.sync", "wgmma"} & set(row["ptx"]) for row in rows)


def test_fp8_kv_kernels_compile_from_sm89_only(tmp_path):
    """The fp8 KV-cache variants (e4m3 loads) compile on Ada and Hopper without spilling;
    Ampere has no e4m3 in Triton, so the script builds none there (the backend refuses)."""
    pytest.importorskip("triton")
    rows = _compile(
        tmp_path, "--arch", *ARCHS, "--dtype", "bfloat16", "--head-dim", "128", "--case", "fp8kv"
    )
    compiled = {(row["arch"], row["kernel"]) for row in rows}
    kernels = ("_decode_attention_kernel", "_decode_reduce_kernel", "_prefill_attention_kernel",
               "_kv_store_kernel")  # fmt: skip
    assert compiled == {(arch, kernel) for arch in (89, 90) for kernel in kernels}
    assert not [row for row in rows if row["problems"]]
