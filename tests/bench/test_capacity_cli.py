"""`--capacity` wiring: its options are validated, by flag, before any daemon is reached."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from llmd.cli import main

NOWHERE = ["--address", "ipc:///nonexistent/llmd-capacity-test"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--capacity"], "Error: --capacity: capacity at SLO needs targets: pass --slo"),
        (["--capacity", "--slo", "ttft=500", "--capacity-attainment", "1.5"],
         "Error: --capacity-attainment: attainment threshold must be in (0, 1]"),
        (["--capacity", "--slo", "ttft=500", "--capacity-min-rate", "4",
          "--capacity-max-rate", "2"], "Error: --capacity-max-rate: the highest rate"),
        (["--capacity", "--slo", "ttft=500", "--capacity-max-probes", "1"],
         "Error: --capacity-max-probes: a search needs at least 2 probes"),
    ],
)  # fmt: skip
def test_serve_capacity_options_are_checked_before_connecting(args, message):
    result = CliRunner().invoke(main, ["bench", "serve", *NOWHERE, *args])
    assert result.exit_code == 1 and message in result.output, result.output


def test_serve_capacity_refuses_a_fixed_rate():
    result = CliRunner().invoke(main, ["bench", "serve", *NOWHERE, "--capacity", "--slo",
                                       "ttft=500", "--request-rate", "4"])  # fmt: skip
    assert result.exit_code == 2 and "drop --request-rate" in result.output


def test_sweep_needs_rates_or_capacity(tmp_path):
    result = CliRunner().invoke(main, ["bench", "sweep", "--max-num-batched-tokens", "64",
                                       "--output-dir", str(tmp_path)])  # fmt: skip
    assert result.exit_code == 1 and "--request-rates or --capacity" in result.output
    result = CliRunner().invoke(main, ["bench", "sweep", "--max-num-batched-tokens", "64",
                                       "--output-dir", str(tmp_path), "--capacity"])  # fmt: skip
    assert result.exit_code == 1 and "Error: --capacity: capacity at SLO needs" in result.output


def test_help_shows_the_capacity_options_with_defaults_and_an_example():
    for command in ("serve", "sweep"):
        result = CliRunner().invoke(main, ["bench", command, "--help"])
        assert result.exit_code == 0
        text = " ".join(result.output.split())
        assert "--capacity-attainment FLOAT" in text and "[default: 0.9]" in text
        assert f"llmd bench {command} " in text and "--capacity --slo" in text
