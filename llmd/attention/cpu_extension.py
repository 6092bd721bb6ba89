"""Builds and loads llmd's C++ CPU ops, once per source, compiler flags and CPU.

One extension holds the paged-attention op, the fused layer ops (RMSNorm, rotary, SiLU-and-mul),
the MoE layers' grouped expert linear, the greedy sampler's row argmax and the int8/int4
weight-only linears.

The op is compiled on first use with torch's cpp_extension (gcc, ninja) for the host's
instruction set and cached in a per-user directory keyed by a hash of everything that
shapes the binary, so later processes load it in milliseconds and a changed source or CPU
can never load a stale build.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import sys
import time
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

SOURCE_PATH = Path(__file__).parent / "csrc" / "paged_attention.cpp"
LAYER_OPS_PATH = Path(__file__).parent.parent / "layers" / "csrc" / "cpu_layer_ops.cpp"
MOE_LINEAR_PATH = Path(__file__).parent.parent / "layers" / "csrc" / "moe_grouped_linear.cpp"
ROW_ARGMAX_PATH = Path(__file__).parent.parent / "runner" / "csrc" / "row_argmax.cpp"
QUANT_DIR = Path(__file__).parent.parent / "quantization" / "csrc"
INT_LINEAR_PATHS = (QUANT_DIR / "int8_linear.cpp", QUANT_DIR / "int4_linear.cpp")
SOURCE_PATHS = (SOURCE_PATH, LAYER_OPS_PATH, MOE_LINEAR_PATH, ROW_ARGMAX_PATH, *INT_LINEAR_PATHS)
HEADER_PATHS = (
    *(
        Path(__file__).parent / "csrc" / name
        for name in ("vec_math.h", "work_items.h", "amx_attention.h")
    ),
    QUANT_DIR / "weight_only_rows.h",
)
"""Headers the sources include: part of the build key, not compiled on their own."""
COMPILE_FLAGS = ("-O3", "-march=native", "-fopenmp")
"""-march=native: the host's vector ISA (AVX2, AVX-512); -fopenmp: at::parallel_for runs on
torch's OpenMP threads (without it ATen's inline parallel_for quietly runs serially, which
left the ops on one core) and `omp simd` is honoured."""
LINK_FLAGS = ("-fopenmp",)
"""Links libgomp.so.1: the copy torch already loaded, so both share one thread pool."""


CPU_OP_DTYPES = (torch.float32, torch.bfloat16)
"""The dtypes every op of the extension reads and writes itself (computing in float32);
callers convert other dtypes around it or keep torch's ops."""


class CpuExtensionUnavailableError(RuntimeError):
    """The C++ op cannot be built or loaded here (no compiler, no ninja, build error)."""


def cache_root() -> Path:
    """Where built extensions live: $LLMD_CACHE_DIR, else $XDG_CACHE_HOME/llmd, else ~/.cache."""
    if os.environ.get("LLMD_CACHE_DIR"):
        return Path(os.environ["LLMD_CACHE_DIR"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "llmd"


def build_key() -> str:
    """A hash of the sources, flags, torch version and the CPU's feature flags.

    Raises CpuExtensionUnavailableError naming the file when a source or header cannot be
    read (an install that lacks it), so callers fall back as for any other build failure.
    """
    digest = hashlib.sha256()
    for path in SOURCE_PATHS + HEADER_PATHS:
        try:
            digest.update(path.read_bytes())
        except OSError as error:
            raise CpuExtensionUnavailableError(
                f"cannot read {path}: {error.strerror or error}"
            ) from error
    digest.update(" ".join(COMPILE_FLAGS + LINK_FLAGS).encode())
    digest.update(torch.__version__.encode())
    digest.update(cpu_flags().encode())
    return digest.hexdigest()[:16]


def cpu_flags() -> str:
    """The CPU's feature flags line (Linux); -march=native builds are only valid for it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return ""


def load_paged_attention_op():
    """Return torch.ops.llmd_cpu.paged_attention's overload (called once per layer and step,
    where the op packet's dispatch costs ~0.6 us more), building it first if no cached build
    fits.

    Raises CpuExtensionUnavailableError with the reason when building is impossible.
    """
    return load_cpu_ops().paged_attention.default


@functools.cache
def load_cpu_ops():
    """Return the torch.ops.llmd_cpu namespace, building the extension if no cached build fits.

    Raises CpuExtensionUnavailableError with the reason when building is impossible.
    """
    key = build_key()
    build_dir = cache_root() / "cpu_attention" / key
    venv_bin = str(Path(sys.executable).parent)
    if shutil.which("ninja") is None and shutil.which("ninja", path=venv_bin):
        os.environ["PATH"] = venv_bin + os.pathsep + os.environ.get("PATH", "")
    for tool in ("ninja", os.environ.get("CXX", "c++")):
        if shutil.which(tool) is None:
            raise CpuExtensionUnavailableError(f"{tool} not found on PATH")
    try:
        from torch.utils.cpp_extension import load

        build_dir.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        load(
            name=f"llmd_cpu_attention_{key}",
            sources=[str(path) for path in SOURCE_PATHS],
            extra_cflags=list(COMPILE_FLAGS),
            extra_ldflags=list(LINK_FLAGS),
            build_directory=str(build_dir),
            is_python_module=False,
            verbose=False,
        )
        elapsed = time.perf_counter() - start
        if elapsed > 1.0:
            logger.info("built the CPU paged-attention op in %.1f s (%s)", elapsed, build_dir)
    except Exception as error:  # compiler errors, missing headers, unwritable cache
        raise CpuExtensionUnavailableError(f"{type(error).__name__}: {error}") from error
    return torch.ops.llmd_cpu
