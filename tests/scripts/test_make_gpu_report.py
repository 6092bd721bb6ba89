"""The GPU report writer on CPU, from fake stage files: ratios, host gap and targets are
computed from the stage outputs exactly as written here by hand."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "make_gpu_report.py"


def _load_module():
    spec = importlib.util.spec_from_file_location("make_gpu_report", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _e2e(tok_s: float, key: str, extra: dict | None = None) -> str:
    seconds = 35000 / tok_s
    median = {key: tok_s, key.replace("tok_s", "s"): seconds}
    return json.dumps({"median": median, "num_output_tokens": 35000,
                       "args": {"num_requests": "256", "hf_batch_size": "64"},
                       "engine": extra or {}})  # fmt: skip


def _fake_run(out: Path) -> None:
    stages = [
        ("env", "passed", "9", "0", "60", ""),
        ("kernel_tests", "passed", "60", "0", "100", ""),
        ("engine_tests", "failed", "30", "1", "90", ""),
        ("e2e_triton_sync", "passed", "30", "0", "75", ""),
        ("e2e_triton_async", "passed", "28", "0", "75", ""),
        ("host_gap", "passed", "20", "0", "60", ""),
        ("e2e_hf", "passed", "70", "0", "90", ""),
    ]
    (out / "stages.tsv").write_text("".join("\t".join(row) + "\n" for row in stages))
    (out / "engine_tests.log").write_text("E   AssertionError: tokens differ\n1 failed, 8 passed\n")
    (out / "env.json").write_text(json.dumps({"torch": "2.11.0", "python": "3.12.3"}))
    (out / "nvidia-smi.txt").write_text("NVIDIA H200, 143771 MiB, 580.159.04")
    (out / "git.txt").write_text("abc1234 (0 uncommitted changes)")
    (out / "engine_tests.xml").write_text(
        '<testsuites><testsuite tests="9" failures="1" errors="0" skipped="0">'
        '<testcase classname="tests.runner.test_async_cuda" name="test_equal">'
        "<failure>x</failure></testcase></testsuite></testsuites>"
    )
    kernels = {
        "device": "NVIDIA H200", "dtype": "bfloat16", "copy_bandwidth_gbs": 4200.0,
        "results": [
            {"kernel": "decode_attention", "shape": "b=64 ctx=4096", "time_us": 283.1,
             "bandwidth_gbs": 3780.0, "bandwidth_pct": 90.0, "tflops": None},
            {"kernel": "decode_attention", "shape": "b=1 ctx=32768", "time_us": 166.2,
             "bandwidth_gbs": 798.0, "bandwidth_pct": 19.0, "tflops": None,
             "eager_us": 201.5},
        ],
    }  # fmt: skip
    (out / "bench_kernels.json").write_text(json.dumps(kernels))
    (out / "e2e_triton_async.json").write_text(_e2e(7000.0, "llmd_tok_s", {"async": True}))
    (out / "e2e_triton_sync.json").write_text(_e2e(6000.0, "llmd_tok_s"))
    (out / "e2e_hf.json").write_text(_e2e(700.0, "hf_tok_s"))
    host_gap = {
        "command": "python scripts/bench_host_gap.py --batch-size 64", "batch_size": 64,
        "prompt_len": 64, "output_len": 192,
        "modes": {
            "sync": {"num_steady_steps": 180, "step_ms": 5.0, "decode_tok_s": 12800.0,
                     "host_ms": 1.2, "device_gap_ms": 1.5, "gap_fraction": 0.3},
            "async": {"num_steady_steps": 180, "step_ms": 3.6, "decode_tok_s": 17777.0,
                      "host_ms": 1.1, "device_gap_ms": 0.108, "gap_fraction": 0.03},
        },
    }  # fmt: skip
    (out / "host_gap.json").write_text(json.dumps(host_gap))


def test_report_from_fake_stage_files(tmp_path):
    _fake_run(tmp_path)
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), "report", "--out-dir", str(tmp_path), "--command", "x"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    markdown = (tmp_path / "gpu-report.md").read_text()
    assert completed.stdout.strip() == markdown.strip()
    # 7000 / 700 and 6000 / 700 tokens/s, and on vs off 7000 / 6000.
    assert "| 7000.0 | 5.0 | 10.00x |" in markdown
    assert "| 6000.0 | 5.8 | 8.57x |" in markdown
    assert "Async scheduling on vs off: 1.17x." in markdown
    assert "| async | 180 | 3.60 | 17777 | 1.10 | 0.108 | 3.0% |" in markdown
    assert "| sync | 180 | 5.00 | 12800 | 1.20 | 1.500 | 30.0% |" in markdown
    # Graph-replay time first, eager (launch-bound) time last; older runs have none.
    assert "| decode_attention | b=1 ctx=32768 | 166.2 | 798 | 19 | - | 201.5 |" in markdown
    assert "| decode_attention | b=64 ctx=4096 | 283.1 | 3780 | 90 | - | - |" in markdown
    assert "  - FAILED `tests.runner.test_async_cuda::test_equal`" in markdown
    assert "AssertionError: tokens differ" in markdown  # the failed stage's log tail
    assert "e2e_torch" not in markdown and "torch attention backend" not in markdown
    report = json.loads((tmp_path / "gpu-report.json").read_text())
    assert report["host_gap"]["modes"]["async"]["gap_fraction"] == 0.03


def test_targets_met_missed_and_unmeasured(tmp_path):
    module = _load_module()
    _fake_run(tmp_path)
    checks = module.target_checks(module.build_report(tmp_path, "x"))
    verdicts = {what: (measured, met) for what, measured, met in checks}
    assert verdicts["decode attention b=64 ctx=4096 >= 80% of copy"] == ("90%", True)
    assert verdicts["decode attention b=1 ctx=32768 >= 80% of copy"] == ("19%", False)
    assert verdicts[
        "llmd, Triton + CUDA graphs, async scheduling >= 5x HF end to end"
    ] == ("10.00x", True)
    gap = "host gap < 5% of step time at batch 64, async scheduling"
    assert verdicts[gap] == ("3.0%", True)
    (tmp_path / "host_gap.json").unlink()
    (tmp_path / "e2e_hf.json").unlink()
    checks = module.target_checks(module.build_report(tmp_path, "x"))
    unmeasured = {what for what, _, met in checks if met is None}
    assert gap in unmeasured
    assert "llmd, Triton + CUDA graphs, async scheduling >= 5x HF end to end" in unmeasured
