"""`bench offline --quantized` and the checkpoint script, smoke-run on a tiny model (a few
requests: the code path and the report, never a figure)."""

from __future__ import annotations

import json

from llmd.bench import offline
from llmd.bench.quantized_comparison import format_row
from scripts.make_quantized_checkpoint import main as make_quantized
from tests.checkpoints import make_tiny_checkpoint


def test_quantized_checkpoints_run_against_their_source(tmp_path, capsys):
    # The workload draws token ids from --shape's vocabulary (SmolLM2's): the model takes them.
    source = make_tiny_checkpoint("llama", tmp_path / "source", vocab_size=49152)
    assert make_quantized([str(source), str(tmp_path / "w4"), "--recipe", "w4a16-g32"]) == 0
    assert json.loads((tmp_path / "w4" / "config.json").read_text())["quantization_config"]
    report_path = tmp_path / "report.json"
    argv = [
        "--model", str(source), "--quantized", str(tmp_path / "w4"), "--skip-hf",
        "--repeats", "1", "--num-requests", "2", "--max-prompt", "20", "--max-output", "9",
        "--device", "cpu", "--json", str(report_path), "--kv-cache-memory-gib", "0.01",
    ]  # fmt: skip
    assert offline.main(argv) == 0
    rows = json.loads(report_path.read_text())["quantized"]
    assert [row["quantization"] for row in rows] == ["dense", "compressed-tensors w4a16-g32"]
    assert rows[0]["speedup"] == 1.0 and rows[1]["weight_bytes"] < rows[0]["weight_bytes"]
    assert all(row["decode_step_ms"] > 0 and row["weights_at_copy_ms"] > 0 for row in rows)
    assert format_row(rows[1]) in capsys.readouterr().out


def test_a_row_reads_as_one_line():
    row = {"checkpoint": "/m/w4", "quantization": "awq w4a16-g128", "weight_bytes": 96_300_000,
           "tok_s": 150.0, "speedup": 1.5, "decode_step_ms": 8.0, "decode_speedup": 1.62,
           "weights_at_copy_ms": 4.8}  # fmt: skip
    assert format_row(row) == (
        "w4: awq w4a16-g128, 96.3 MB; 150.0 output tok/s (1.50x); decode step 8.00 ms "
        "(1.62x) (weights at copy bandwidth 4.80 ms)"
    )
