"""The CLI without a daemon: bad input gives one clean `Error:` line, never a traceback."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time

import click
import pytest
from click.testing import CliRunner

from llmd.cli import main
from llmd.commands.daemon_cli import _counts
from llmd.commands.generate import read_prompts
from llmd.commands.log_tail import follow_log
from llmd.daemon.instance_lock import InstanceLock
from llmd.errors import InvalidParameterError
from llmd.protocol import parse_address
from llmd.tui.chat.oneshot import run_once
from llmd.tui.chat.settings import DEFAULT_CHAT_PARAMS
from tests.tui.daemon_process import REPO_ROOT, subprocess_env
from tests.tui.fake_client import FakeClient, ScriptedReply

BAD_ADDRESS = "127.0.0.1:5599"
COMMANDS_WITH_AN_ADDRESS = [
    ["status"],
    ["status", "--json"],
    ["stop"],
    ["logs"],
    ["top"],
    ["chat", "-p", "hi"],
    ["generate", "hi"],
]


@pytest.mark.parametrize("command", COMMANDS_WITH_AN_ADDRESS, ids=lambda c: " ".join(c))
def test_a_malformed_address_is_one_clean_error_line(command):
    result = CliRunner().invoke(main, [*command, "--address", BAD_ADDRESS])
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.output == (
        f"Error: --address: '{BAD_ADDRESS}': use ipc://PATH or tcp://HOST:PORT\n"
    )


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (["generate", "--sampling-seed", "-1", "hi"], "--sampling-seed: must be >= 0, got -1"),
        (["generate", "--stop-token-id", "-3", "hi"], "--stop-token-id: must be >= 0, got -3"),
        (["chat", "--sampling-seed", "-1", "-p", "hi"], "--sampling-seed: must be >= 0, got -1"),
        (["serve", "--drain-timeout", "-1"], "--drain-timeout: must be a non-negative number"),
        (["serve", "--block-size", "0"], "--block-size: must be a positive integer, got 0"),
    ],
)
def test_a_bad_flag_value_is_named_by_its_flag_not_an_internal_field(arguments, expected):
    result = CliRunner().invoke(main, arguments)
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: {expected}")  # not "seed:", "drain_timeout_s:"


def test_stop_refuses_a_negative_timeout_before_asking_the_daemon(tmp_path):
    address = f"ipc://{tmp_path / 'nobody.sock'}"
    result = CliRunner().invoke(main, ["stop", "--address", address, "--timeout", "-5"])
    assert result.exit_code == 2
    assert "Error: Invalid value for '--timeout': -5.0 is not in the range x>=0." in result.output


def test_no_daemon_at_the_default_address_is_one_plain_error_line(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.delenv("LLMD_ADDRESS", raising=False)
    for command in (["status"], ["stop"], ["logs"], ["chat", "-p", "hi"], ["top"]):
        result = CliRunner().invoke(main, command)
        assert result.exit_code == 1, command
        assert result.output.startswith(("Error: no llmd daemon is answering at ipc://",
                                         "Error: no log file for the daemon at ipc://")), (
            result.output  # not "Error: address: no llmd daemon ..."
        )  # fmt: skip


def test_bare_llmd_prints_help_and_exits_0():
    result = CliRunner().invoke(main, [])
    assert result.exit_code == 0
    assert "Commands:" in result.output and "_LLMD_COMPLETE=bash_source llmd" in result.output


def all_commands(group: click.Group = main, path: tuple[str, ...] = ()):
    """(words after `llmd`, command) for every command and subcommand."""
    for name, command in group.commands.items():
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from all_commands(command, (*path, name))


PASS_THROUGH = {("bench", "offline")}
"""Commands that hand their arguments to another parser (see its own --help)."""


def test_every_command_has_an_example_and_described_options():
    for words, command in all_commands():
        if words in PASS_THROUGH:
            continue
        text = CliRunner().invoke(main, [*words, "--help"], terminal_width=100).output
        assert "Examples:" in text, words
        for parameter in command.params:
            if isinstance(parameter, click.Option) and parameter.name != "help":
                assert parameter.help, f"llmd {' '.join(words)} {parameter.opts[0]} has no help"


def test_every_default_is_shown_one_way():
    # click's `[default: ...]` after the description, never "(default: ...)" inside it
    for words, command in all_commands():
        for parameter in command.params:
            if isinstance(parameter, click.Option) and parameter.help:
                help_text = parameter.help.lower()
                assert "default" not in help_text, f"llmd {' '.join(words)} {parameter.opts[0]}"


def test_top_with_no_daemon_fails_at_once_instead_of_retrying(tmp_path):
    address = f"ipc://{tmp_path / 'nobody.sock'}"
    process = subprocess.run(
        [sys.executable, "-m", "llmd.cli", "top", "--address", address],
        env=subprocess_env(), cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert process.returncode == 1
    assert process.stderr.startswith(f"Error: no llmd daemon is answering at {address}")


def test_status_after_kill_9_says_the_daemon_crashed_and_names_its_log(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    address = f"ipc://{tmp_path / 'd.sock'}"
    holder = subprocess.Popen(  # holds the address's lock like a daemon, then is killed -9
        [sys.executable, "-c",
         "import sys, time; from llmd.daemon.instance_lock import InstanceLock; "
         f"from llmd.protocol import parse_address; InstanceLock(parse_address({address!r}))"
         ".acquire(); print('locked', flush=True); time.sleep(60)"],
        env={**subprocess_env(), "XDG_RUNTIME_DIR": str(tmp_path)}, cwd=REPO_ROOT,
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout.readline().strip() == "locked"
    lock = InstanceLock(parse_address(address))
    log_path = lock.directory / f"{parse_address(address).instance_name}.log"
    log_path.write_text("engine ready\n")
    holder.kill()
    holder.wait()
    assert lock.read_pid() == holder.pid and not lock.is_held()  # what kill -9 leaves behind
    result = CliRunner().invoke(main, ["status", "--address", address])
    assert result.exit_code == 1
    assert f"crashed (pid {holder.pid} is gone); log: {log_path}" in result.output
    assert "Traceback" not in result.output


def test_a_daemon_killed_but_not_yet_reaped_is_reported_crashed_at_once(tmp_path, monkeypatch):
    # kill -9 leaves a zombie until its parent reaps it (a container's init may take
    # seconds, or never): its pid still "exists", but its lock is gone, so it is dead.
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    address = f"ipc://{tmp_path / 'd.sock'}"
    holder = subprocess.Popen(  # holds the lock and serves a socket file, like a daemon
        [sys.executable, "-c",
         "import time, zmq; from llmd.daemon.instance_lock import InstanceLock; "
         f"from llmd.protocol import parse_address; InstanceLock(parse_address({address!r}))"
         f".acquire(); zmq.Context().socket(zmq.ROUTER).bind({address!r}); "
         "print('locked', flush=True); time.sleep(60)"],
        env={**subprocess_env(), "XDG_RUNTIME_DIR": str(tmp_path)}, cwd=REPO_ROOT,
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "locked"
        lock = InstanceLock(parse_address(address))
        holder.kill()  # and not reaped until the end of the test
        deadline = time.monotonic() + 30
        while lock.is_held() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert os.path.exists(tmp_path / "d.sock") and lock.read_pid() == holder.pid
        for command in (["status"], ["stop"], ["chat", "-p", "hi"], ["top"]):
            result = CliRunner().invoke(main, [*command, "--address", address])
            assert result.exit_code == 1, command
            assert result.output.startswith(
                f"Error: the llmd daemon at {address} crashed (pid {holder.pid} is gone)"
            ), result.output
            assert f"restart it with: llmd serve --address {address}\n" in result.output
    finally:
        holder.kill()
        holder.wait()


def test_chat_p_exits_non_zero_when_the_daemon_aborts_the_reply(capsys):
    client = FakeClient(ScriptedReply(chunks=["Half a rep"], finish_reason="abort"))
    code = run_once(client, "hi", DEFAULT_CHAT_PARAMS, sys.stdout, sys.stderr)
    captured = capsys.readouterr()
    assert code == 1
    assert captured.out == "Half a rep\n"
    assert captured.err == "Error: the daemon aborted the reply before it finished\n"
    complete = FakeClient(ScriptedReply(chunks=["Whole."], finish_reason="stop"))
    assert run_once(complete, "hi", DEFAULT_CHAT_PARAMS, sys.stdout, sys.stderr) == 0


def test_stop_summarises_the_daemons_counts():
    assert _counts("stopped: drained 3, aborted 1") == ": 3 requests drained, 1 aborted"
    assert _counts("stopped: drained 1, aborted 0") == ": 1 request drained, 0 aborted"
    assert _counts("stopped") == ""  # an older daemon


def test_generate_dash_reads_the_prompt_from_stdin_once():
    assert read_prompts(("a", "-"), io.StringIO("from stdin\n")) == ["a", "from stdin"]
    with pytest.raises(InvalidParameterError, match="only once"):
        read_prompts(("-", "-"), io.StringIO("x"))
    with pytest.raises(InvalidParameterError, match="stdin was empty"):
        read_prompts(("-",), io.StringIO("\n"))


@pytest.mark.parametrize(
    "arguments",
    [["generate", "-"], ["chat"], ["generate", b"caf\xe9".decode(errors="surrogateescape")]],
    ids=["generate -", "chat", "argument"],
)
def test_text_that_is_not_utf8_is_one_clear_error_line(arguments):
    process = subprocess.run(
        [sys.executable, "-m", "llmd.cli", *arguments, "--address", "ipc:///nonexistent/x"],
        env=subprocess_env(), cwd=REPO_ROOT, input=b"caf\xe9 au lait\n", capture_output=True,
        timeout=60,
    )  # fmt: skip
    assert process.returncode == 1
    where = "the prompt" if len(arguments) > 1 and arguments[1] != "-" else "stdin"
    assert process.stderr.decode() == (
        f"Error: {where} is not UTF-8 text (byte 0xe9 at character 3)\n"
    )


def test_writing_to_a_full_stdout_is_an_error_line_not_a_traceback():
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    with open("/dev/full", "w") as full:
        process = subprocess.run(
            [sys.executable, "-m", "llmd.cli", "--help"],
            env=subprocess_env(), cwd=REPO_ROOT, stdout=full, stderr=subprocess.PIPE,
            text=True, timeout=60,
        )  # fmt: skip
    assert process.returncode == 1
    assert process.stderr == "Error: cannot write the output: No space left on device\n"


def test_the_first_ctrl_c_of_serve_says_a_second_one_aborts(capsys):
    from llmd.daemon.serve import _drain_on_signals

    class RecordingDaemon:
        def __init__(self) -> None:
            self.drains: list[bool] = []

        def request_drain(self, now: bool = False) -> None:
            self.drains.append(now)

    daemon = RecordingDaemon()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        _drain_on_signals(daemon)
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGINT)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    assert daemon.drains == [False, True]
    assert capsys.readouterr().err == (
        "llmd: draining in-flight requests; press Ctrl-C again to abort them\n"
    )


def test_logs_prints_the_end_of_the_log_and_follows_new_lines(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    address = f"ipc://{tmp_path / 'd.sock'}"
    log_path = tmp_path / "llmd" / f"{parse_address(address).instance_name}.log"
    log_path.parent.mkdir()
    log_path.write_text("one\ntwo\nthree\n")
    result = CliRunner().invoke(main, ["logs", "--address", address, "-n", "2"])
    assert result.exit_code == 0 and result.output == "two\nthree\n"
    out = io.StringIO()
    follower = threading.Thread(
        target=follow_log,
        args=(log_path, log_path.stat().st_size, out, lambda: "four" in out.getvalue()),
    )
    follower.start()
    with open(log_path, "a") as log:
        log.write("fo")  # half a line is held back until its end arrives
        log.flush()
        time.sleep(0.3)
        log.write("ur\n")
    follower.join(10)
    assert out.getvalue() == "four\n"
    missing = CliRunner().invoke(main, ["logs", "--address", f"ipc://{tmp_path / 'x.sock'}"])
    assert missing.exit_code == 1 and "no log file for the daemon at" in missing.output
