"""`llmd generate`, `chat -p` and `stop` against a real daemon: output and exit status."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
from click.testing import CliRunner

from llmd.cli import main
from llmd.client import Client
from llmd.sampling_params import SamplingParams
from tests.daemon.harness import inprocess_daemon
from tests.tui.daemon_process import REPO_ROOT, subprocess_env

pytestmark = pytest.mark.slow

EIGHT = ["--temperature", "0", "--max-tokens", "8", "--ignore-eos"]


def generate(address: str, *args: str, stdin: str | None = None):
    return CliRunner().invoke(main, ["generate", "--address", address, *args], input=stdin)


def test_generate_uses_the_running_daemon_and_reads_stdin(daemon_address):
    with Client(daemon_address) as client:
        expected = client.generate(
            "hello", params=SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
        )
    result = generate(daemon_address, *EIGHT, "--stats", "-", stdin="hello\n")
    assert result.exit_code == 0, result.output
    assert result.stdout == expected.text + "\n"  # the daemon's model, not the shipped one
    assert "finish=length prompt=" in result.stderr and "generated=8" in result.stderr


def test_generate_prints_logprobs_through_the_daemon(daemon_address):
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True, logprobs=2)
    with Client(daemon_address) as client:
        expected = client.generate("hello", params=params).logprobs
    result = generate(daemon_address, *EIGHT, "--logprobs", "2", "hello")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    start = lines.index("logprobs (token, logprob, top alternatives):")
    rows = lines[start + 1 :]
    assert len(rows) == 8
    for row, entry in zip(rows, expected):  # token texts as the local path prints them
        assert row.startswith(f"  {entry['token']!r:<20} {entry['logprob']:8.4f}")
        assert f"{entry['top_tokens'][1]!r} {entry['top_logprobs'][1]:.3f}" in row


def test_generate_stop_string_and_a_max_tokens_beyond_the_context(daemon_address):
    whole = generate(daemon_address, "--temperature", "0", "--max-tokens", "24", "--ignore-eos",
                     "once")  # fmt: skip
    text = whole.stdout.rstrip("\n")
    stop = text[6:9]
    assert len(stop) == 3 and stop in text
    cut = generate(daemon_address, "--temperature", "0", "--max-tokens", "24", "--ignore-eos",
                   "--stop", stop, "once")  # fmt: skip
    assert cut.exit_code == 0, cut.output
    assert cut.stdout == text[: text.index(stop)] + "\n"
    too_long = generate(daemon_address, "--max-tokens", "300", "--ignore-eos", "once")
    assert too_long.exit_code == 0, too_long.output
    assert "warning: --max-tokens 300 does not fit: the prompt has" in too_long.stderr
    assert "context 256, so at most" in too_long.stderr


def test_chat_p_to_a_full_stdout_is_one_error_line(daemon_address):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    with open("/dev/full", "w") as full:
        process = subprocess.run(
            [sys.executable, "-m", "llmd.cli", "chat", "--address", daemon_address,
             "--max-tokens", "8", "-p", "hello"],
            env=subprocess_env(), cwd=REPO_ROOT, stdout=full, stderr=subprocess.PIPE,
            text=True, timeout=60,
        )  # fmt: skip
    assert process.returncode == 1
    assert process.stderr == "Error: cannot write the output: No space left on device\n"


@pytest.mark.parametrize("now", [False, True], ids=["drain", "now"])
def test_stop_reports_how_many_requests_were_drained_and_aborted(tiny_model_dir, tmp_path, now):
    address = f"ipc://{tmp_path / 's.sock'}"
    long = SamplingParams(max_tokens=200, ignore_eos=True)
    with inprocess_daemon(tiny_model_dir, address), Client(address) as client:
        stream = client.stream("keep going", params=long)
        next(stream)  # accepted: the request is in flight
        events: list = []
        reader = threading.Thread(target=lambda: events.extend(stream))
        reader.start()
        result = CliRunner().invoke(main, ["stop", "--address", address, *(["--now"] * now)])
        reader.join(30)
    assert result.exit_code == 0, result.output
    counts = "0 requests drained, 1 aborted" if now else "1 request drained, 0 aborted"
    assert result.stdout == f"stopped the llmd daemon at {address} (pid {os.getpid()}): {counts}\n"
    assert events[-1].finish_reason == ("abort" if now else "length")


def test_local_generate_prints_logprobs_with_token_text(tiny_model_dir):
    args = ["generate", "--model", str(tiny_model_dir), "--num-blocks", "64", *EIGHT]
    result = CliRunner().invoke(main, [*args, "--logprobs", "1", "hi"])
    assert result.exit_code == 0, result.output
    rows = result.stdout.split("logprobs (token, logprob, top alternatives):\n")[1].splitlines()
    assert len(rows) == 8 and all(row.lstrip().startswith(("'", '"')) for row in rows)
