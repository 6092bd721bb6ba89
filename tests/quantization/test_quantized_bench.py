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


def test_rounds_alternate_the_checkpoints_and_pair_the_ratios(monkeypatch, tmp_path):
    from llmd.bench import quantized_comparison

    source, quantized = tmp_path / "source", tmp_path / "w8"
    # Per round: the source's and the quantized step (ms); the machine slows in round 2.
    steps = iter([10.0, 5.0, 30.0, 20.0, 12.0, 6.0])
    facts = {"quantization": "dense", "weight_bytes": 100}
    monkeypatch.setattr(
        quantized_comparison, "decode_step_ms", lambda path, _: (next(steps), facts)
    )
    order = []
    rates = {source: iter([100.0, 50.0, 90.0]), quantized: iter([150.0, 100.0, 99.0])}

    def run_workload(path):
        order.append(path)
        return next(rates[path])

    rows = quantized_comparison.compare_quantized(
        source, [quantized], run_workload, {}, copy_gbps=None, num_rounds=3
    )
    assert order == [source, quantized] * 3
    # Paired ratios 2.0, 1.5, 2.0 -> 2.0; the ratio of the medians would be 12 / 6 = 2.0 too,
    # so the tok/s pairs tell them apart: 1.5, 2.0, 1.1 -> 1.5 against 100 / 90 = 1.11.
    assert rows[1]["decode_speedup"] == 2.0
    assert rows[1]["speedup"] == 1.5
    assert rows[0]["speedup"] == 1.0 and rows[0]["decode_step_ms"] == 12.0
    assert [run["decode_step_ms"] for run in rows[1]["rounds"]] == [5.0, 20.0, 6.0]
