"""`llmd bench` wiring: offline forwards its arguments; bad options are typed errors."""

from __future__ import annotations

import sys
import types

from click.testing import CliRunner

from llmd.cli import main
from tests.daemon.harness import REPO_ROOT, daemon_env


def test_offline_forwards_every_argument_and_the_exit_code(monkeypatch):
    calls = []
    fake = types.ModuleType("llmd.bench.offline")

    def fake_main(argv=None, prog=None):
        calls.append((argv, prog))
        return 3

    fake.main = fake_main
    monkeypatch.setitem(sys.modules, "llmd.bench.offline", fake)
    result = CliRunner().invoke(main, ["bench", "offline", "--num-prompts", "8", "--help"])
    assert calls == [(["--num-prompts", "8", "--help"], "llmd bench offline")]
    assert result.exit_code == 3


def test_serve_rejects_a_bad_rate_and_slo_before_connecting():
    runner = CliRunner()
    result = runner.invoke(main, ["bench", "serve", "--request-rate", "fast"])
    assert result.exit_code == 2 and "request rate" in result.output
    result = runner.invoke(main, ["bench", "serve", "--address", "ipc:///nonexistent/x",
                                  "--slo", "ttft=abc"])  # fmt: skip
    assert result.exit_code == 1 and "Error: --slo: SLO ttft is not a number" in result.output


def test_bench_modules_do_not_import_torch():
    import subprocess

    code = (
        "import sys, llmd.commands.bench_cli, llmd.bench.serve, llmd.bench.sweep, "
        "llmd.bench.zmq_driver; print('torch' in sys.modules)"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], env=daemon_env(), cwd=REPO_ROOT, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert completed.stdout.strip() == "False", completed.stderr


def test_offline_help_names_the_command_describes_every_option_and_has_examples():
    from llmd.bench.offline import build_parser

    result = CliRunner().invoke(main, ["bench", "offline", "--help"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("usage: llmd bench offline")
    assert "Examples:\n  llmd bench offline" in result.output
    for action in build_parser()._actions:
        assert action.help, f"llmd bench offline {action.option_strings[0]} has no help"
