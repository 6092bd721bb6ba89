#!/usr/bin/env python
"""Environment probe and report writer for scripts/gpu_check.sh.

`env` records versions and the GPU (and fails, saying what is missing, when the machine
cannot run the check); `report` turns the stage table, test results and benchmark JSON
files of one run into gpu-report.json and gpu-report.md, so every figure comes with the
command, date, GPU and versions that produced it.

    python scripts/make_gpu_report.py env --out gpu-check-out/env.json
    python scripts/make_gpu_report.py report --out-dir gpu-check-out --command "..."
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import platform
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

REQUIRED_MODULES = ("torch", "triton", "transformers", "safetensors", "pytest")
E2E_RUNS = (
    # (JSON file, label, key of its output tokens/s, shown when absent)
    ("e2e_triton_async.json", "llmd, Triton + CUDA graphs, async scheduling", "llmd_tok_s", True),
    ("e2e_triton_sync.json", "llmd, Triton + CUDA graphs, sync scheduling", "llmd_tok_s", True),
    ("e2e_triton_graphs.json", "llmd, Triton kernels + CUDA graphs", "llmd_tok_s", False),
    ("e2e_torch.json", "llmd, torch attention backend (eager)", "llmd_tok_s", False),
    ("e2e_hf.json", "HF transformers generate (static batches)", "hf_tok_s", True),
)
HF_FILE = "e2e_hf.json"
TARGETS = {
    # acceptance targets of the GPU path (issue 13)
    "decode_bandwidth_pct": 80.0,
    "vs_hf": 5.0,
    "host_gap_fraction": 0.05,
}
TEST_SUITES = ("kernel_tests", "engine_tests")
LOG_TAIL_LINES = 20


def collect_env(out: Path) -> int:
    """Write versions and GPU facts to `out`; return 1 (with instructions) if unusable."""
    env: dict = {"python": platform.python_version(), "platform": platform.platform()}
    missing = []
    for name in REQUIRED_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            missing.append(name)
            continue
        env[name] = getattr(module, "__version__", "unknown")
    problems = [f"missing Python packages: {', '.join(missing)}"] if missing else []
    if "torch" not in missing:
        import torch

        env["torch_cuda"] = torch.version.cuda
        env["cuda_available"] = torch.cuda.is_available()
        if torch.cuda.is_available():
            properties = torch.cuda.get_device_properties(0)
            env["gpu"] = properties.name
            env["gpu_memory_gib"] = round(properties.total_memory / 1024**3, 1)
            env["gpu_capability"] = f"{properties.major}.{properties.minor}"
            env["gpu_count"] = torch.cuda.device_count()
        else:
            problems.append(f"torch {torch.__version__} sees no CUDA device")
    env["problems"] = problems
    out.write_text(json.dumps(env, indent=2))
    print(json.dumps(env, indent=2))
    if problems:
        print(
            "gpu_check needs an NVIDIA GPU and a Python environment with a CUDA build of torch "
            "plus triton, transformers, safetensors, tokenizers and pytest, e.g.\n"
            "    pip install torch  # a CUDA wheel\n"
            "    pip install -e '.[test]'\n"
            "then run it again (it installs nothing itself). Problems: " + "; ".join(problems),
            file=sys.stderr,
        )
        return 1
    return 0


def read_json(path: Path) -> dict | None:
    """The parsed file, or None when it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_stages(path: Path) -> list[dict]:
    """Rows of stages.tsv: name, status, seconds, exit code, time limit, note."""
    keys = ("name", "status", "seconds", "exit_code", "limit", "note")
    if not path.is_file():
        return []
    return [
        dict(zip(keys, (line.split("\t") + [""] * len(keys))[: len(keys)]))
        for line in path.read_text().splitlines()
        if line.strip()
    ]


def read_junit(path: Path) -> dict | None:
    """Test counts from a pytest --junitxml file."""
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError):
        return None
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    failed_names = []
    for suite in suites:
        for key in counts:
            counts[key] += int(suite.get(key, 0))
        for case in suite.iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed_names.append(f"{case.get('classname')}::{case.get('name')}")
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    counts["failed_tests"] = failed_names
    return counts


def e2e_summary(out_dir: Path) -> list[dict]:
    """One row per end-to-end run that produced JSON, with tokens/s and ratio to HF."""
    rows = []
    for file_name, label, key, is_shown_when_absent in E2E_RUNS:
        report = read_json(out_dir / file_name)
        if report is None or key not in report.get("median", {}):
            if is_shown_when_absent:
                rows.append({"label": label, "file": file_name, "tok_s": None})
            continue
        seconds_key = key.replace("tok_s", "s")
        rows.append(
            {
                "label": label,
                "file": file_name,
                "tok_s": report["median"][key],
                "seconds": report["median"].get(seconds_key),
                "num_output_tokens": report.get("num_output_tokens"),
                "num_requests": report.get("args", {}).get("num_requests"),
                "hf_batch_size": report.get("args", {}).get("hf_batch_size"),
                "engine": report.get("engine") or report.get("hf") or {},
            }
        )
    hf_tok_s = next((row["tok_s"] for row in rows if row["file"] == HF_FILE), None)
    for row in rows:
        has_both = row["tok_s"] is not None and hf_tok_s
        row["vs_hf"] = row["tok_s"] / hf_tok_s if has_both else None
    return rows


def log_tail(path: Path) -> str:
    """The last lines of a stage's log."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-LOG_TAIL_LINES:])


def read_text(path: Path) -> str | None:
    """The stripped file contents, or None when it is missing."""
    return path.read_text(errors="replace").strip() if path.is_file() else None


def build_report(out_dir: Path, command: str) -> dict:
    """Everything the run left in `out_dir`, gathered into one dictionary."""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "env": read_json(out_dir / "env.json") or {},
        "nvidia_smi": read_text(out_dir / "nvidia-smi.txt"),
        "git": read_text(out_dir / "git.txt"),
        "stages": read_stages(out_dir / "stages.tsv"),
        "tests": {suite: read_junit(out_dir / f"{suite}.xml") for suite in TEST_SUITES},
        "kernels": read_json(out_dir / "bench_kernels.json"),
        "e2e": e2e_summary(out_dir),
        "host_gap": read_json(out_dir / "host_gap.json"),
    }


def _number(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render_markdown(report: dict, out_dir: Path) -> str:
    """The human-readable report."""
    env = report["env"]
    lines = [
        "# llmd GPU check",
        "",
        f"- Date (UTC): {report['date']}",
        f"- Command: `{report['command']}`",
        f"- GPU: {report['nvidia_smi'] or env.get('gpu', 'unknown')}",
        f"- torch {env.get('torch', '?')} (CUDA {env.get('torch_cuda', '?')}), "
        f"triton {env.get('triton', '?')}, transformers {env.get('transformers', '?')}, "
        f"Python {env.get('python', '?')}",
        f"- Source: {report['git'] or 'unknown'}",
        "",
        "## Stages",
        "",
        "| stage | status | seconds | exit code | time limit (s) | note |",
        "|---|---|---:|---:|---:|---|",
    ]
    for stage in report["stages"]:
        lines.append(
            f"| {stage['name']} | {stage['status']} | {stage['seconds']} | "
            f"{stage['exit_code']} | {stage['limit']} | {stage['note']} |"
        )
    lines += ["", "## Tests on CUDA (`pytest -m cuda`)", ""]
    lines += ["| suite | passed | failed | errors | skipped |", "|---|---:|---:|---:|---:|"]
    for suite, counts in report["tests"].items():
        if counts is None:
            lines.append(f"| {suite} | - | - | - | - |")
            continue
        lines.append(
            f"| {suite} | {counts['passed']} | {counts['failures']} | {counts['errors']} | "
            f"{counts['skipped']} |"
        )
        lines += [f"  - FAILED `{name}`" for name in counts["failed_tests"]]
    lines += ["", "## Kernel bandwidth (`scripts/bench_kernels.py`)", ""]
    kernels = report["kernels"]
    if kernels is None:
        lines.append("No results (see the bench_kernels stage).")
    else:
        lines.append(
            f"{kernels['device']}, {kernels['dtype']}; device-to-device copy bandwidth "
            f"{kernels['copy_bandwidth_gbs']:.0f} GB/s (measured in the same run)."
        )
        lines.append(
            "Times are device time per call from CUDA-graph replays (as decode steps run); "
            "`eager us` is the per-call time launched from Python, launch cost included."
        )
        lines += ["", "| kernel | shape | us | GB/s | % of copy | TFLOP/s | eager us |"]
        lines.append("|---|---|---:|---:|---:|---:|---:|")
        for result in kernels["results"]:
            lines.append(
                f"| {result['kernel']} | {result['shape']} | {_number(result['time_us'])} | "
                f"{_number(result['bandwidth_gbs'], 0)} | {_number(result['bandwidth_pct'], 0)} | "
                f"{_number(result['tflops'])} | {_number(result.get('eager_us'))} |"
            )
    lines += ["", "## End to end: random Qwen3-0.6B-shaped checkpoint, bf16", ""]
    e2e = report["e2e"]
    first = next((row for row in e2e if row["tok_s"] is not None), None)
    if first is not None:
        lines.append(
            f"Workload of `scripts/bench_offline.py`: {first['num_requests']} requests, "
            f"prompts 16-512 tokens, outputs 8-256 (EOS ignored), {first['num_output_tokens']} "
            "output tokens; greedy. Output tokens/s over the whole workload."
        )
        lines.append("")
    lines += ["| engine | output tok/s | seconds | vs HF | details |", "|---|---:|---:|---:|---|"]
    for row in e2e:
        details = ", ".join(f"{key}={value}" for key, value in row.get("engine", {}).items())
        if row["file"] == "e2e_hf.json" and row.get("hf_batch_size"):
            details = ", ".join(filter(None, [f"batch size {row['hf_batch_size']}", details]))
        vs_hf = "-" if row["vs_hf"] is None else f"{row['vs_hf']:.2f}x"
        lines.append(
            f"| {row['label']} | {_number(row['tok_s'])} | {_number(row.get('seconds'))} | "
            f"{vs_hf} | {details} |"
        )
    by_file = {row["file"]: row["tok_s"] for row in e2e}
    on, off = by_file.get("e2e_triton_async.json"), by_file.get("e2e_triton_sync.json")
    if on and off:
        lines += ["", f"Async scheduling on vs off: {on / off:.2f}x."]
    triton = on or by_file.get("e2e_triton_graphs.json")
    torch_backend = by_file.get("e2e_torch.json")
    if triton and torch_backend:
        lines += ["", f"Triton + CUDA graphs vs torch backend: {triton / torch_backend:.2f}x."]
    lines += render_host_gap(report.get("host_gap"))
    lines += render_targets(report)
    problems = [stage for stage in report["stages"] if stage["status"] != "passed"]
    if problems:
        lines += ["", "## Stages that did not pass", ""]
        for stage in problems:
            log = out_dir / f"{stage['name']}.log"
            lines += [
                f"<details><summary>{stage['name']}: {stage['status']}</summary>",
                "",
                "```",
                log_tail(log) if stage["status"] != "skipped" else stage["note"],
                "```",
                "</details>",
                "",
            ]
    return "\n".join(lines) + "\n"


def render_host_gap(host_gap: dict | None) -> list[str]:
    """The host-gap section: device idle between decode steps, async off and on."""
    lines = ["", "## Host gap (`scripts/bench_host_gap.py`)", ""]
    if not host_gap:
        return lines + ["No results (see the host_gap stage)."]
    lines += [
        f"`{host_gap.get('command', '')}`: {host_gap['batch_size']} requests decoding together "
        f"(prompt {host_gap.get('prompt_len')} tokens, {host_gap.get('output_len')} outputs). "
        "Device idle time between consecutive decode steps (CUDA events), as a share of the "
        "steady window's wall time.",
        "",
        "| scheduling | steady steps | step ms | decode tok/s | host ms before launch | "
        "device gap ms | gap share |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, mode in host_gap.get("modes", {}).items():
        share = mode.get("gap_fraction")
        lines.append(
            f"| {name} | {mode.get('num_steady_steps', '-')} | {_number(mode.get('step_ms'), 2)} "
            f"| {_number(mode.get('decode_tok_s'), 0)} | {_number(mode.get('host_ms'), 2)} "
            f"| {_number(mode.get('device_gap_ms'), 3)} "
            f"| {'-' if share is None else f'{100 * share:.1f}%'} |"
        )
    return lines


def target_checks(report: dict) -> list[tuple[str, str, bool | None]]:
    """(what, measured, met) for each acceptance target; met is None when unmeasured."""
    checks = []
    kernels = report.get("kernels") or {}
    decode = [r for r in kernels.get("results", []) if r.get("kernel") == "decode_attention"]
    for row in decode:
        pct = row.get("bandwidth_pct")
        checks.append((
            f"decode attention {row['shape']} >= {TARGETS['decode_bandwidth_pct']:.0f}% of copy",
            _number(pct, 0) + "%",
            None if pct is None else pct >= TARGETS["decode_bandwidth_pct"],
        ))  # fmt: skip
    if not decode:
        checks.append(("decode attention bandwidth", "-", None))
    for row in report.get("e2e", []):
        if row["file"] == HF_FILE:
            continue
        vs_hf = row.get("vs_hf")
        checks.append((
            f"{row['label']} >= {TARGETS['vs_hf']:.0f}x HF end to end",
            "-" if vs_hf is None else f"{vs_hf:.2f}x",
            None if vs_hf is None else vs_hf >= TARGETS["vs_hf"],
        ))  # fmt: skip
    modes = (report.get("host_gap") or {}).get("modes", {})
    share = modes.get("async", {}).get("gap_fraction")
    batch = (report.get("host_gap") or {}).get("batch_size", 64)
    checks.append((
        f"host gap < {100 * TARGETS['host_gap_fraction']:.0f}% of step time at batch {batch}, "
        "async scheduling",
        "-" if share is None else f"{100 * share:.1f}%",
        None if share is None else share < TARGETS["host_gap_fraction"],
    ))  # fmt: skip
    return checks


def render_targets(report: dict) -> list[str]:
    """The acceptance targets, each met, missed or not measured."""
    lines = ["", "## Targets", "", "| target | measured | met |", "|---|---:|---|"]
    for what, measured, met in target_checks(report):
        verdict = "not measured" if met is None else ("yes" if met else "**no**")
        lines.append(f"| {what} | {measured} | {verdict} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command_name", required=True)
    env_parser = commands.add_parser("env", help="probe versions and the GPU")
    env_parser.add_argument("--out", type=Path, required=True)
    report_parser = commands.add_parser("report", help="write gpu-report.{json,md}")
    report_parser.add_argument("--out-dir", type=Path, required=True)
    report_parser.add_argument("--command", default="scripts/gpu_check.sh")
    args = parser.parse_args()
    if args.command_name == "env":
        return collect_env(args.out)
    report = build_report(args.out_dir, args.command)
    (args.out_dir / "gpu-report.json").write_text(json.dumps(report, indent=2))
    markdown = render_markdown(report, args.out_dir)
    (args.out_dir / "gpu-report.md").write_text(markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
