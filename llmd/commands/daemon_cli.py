"""`llmd serve`, `llmd stop` and `llmd status`: start, stop and inspect the daemon.

Registered into the `llmd` group by llmd.cli; only click is imported at module scope,
so `llmd --help` stays instant and stop/status never load torch.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from llmd.cli_options import ENGINE_OPTIONS, apply_options, pop_engine_kwargs
from llmd.commands.cli_group import cli_error
from llmd.commands.help_text import ADDRESS_DEFAULT, ADDRESS_HELP
from llmd.daemon.serve_options import (
    ADMISSION_POLICIES,
    API_KEY_ENV,
    LOG_LEVELS,
    ServeOptions,
)
from llmd.option_spec import Flag, click_option
from llmd.tools.parser_choice import PARSER_OPTIONS

STOP_WAIT_S = 10.0
"""After the daemon acknowledged stopping, how long `llmd stop` waits for it to release its
address lock (the last thing it does before exiting)."""


SERVE_FLAGS = (
    Flag("address", show_default=ADDRESS_DEFAULT, help=ADDRESS_HELP),
    Flag("allow_remote", is_switch=True),
    Flag("kv_events", metavar="ADDRESS"),
    Flag("detach", is_switch=True),
    Flag("log_file", show_default="in the runtime directory"),
    Flag("max_queued_requests"),
    Flag("max_message_bytes"),
    Flag("max_connections", show_default="half the file descriptors free at start"),
    Flag("reserved_cpus", show_default="1 when 4 or more cores are available, else 0"),
    Flag("admission", choices=ADMISSION_POLICIES),
    Flag("slo_ttft_ms"),
    Flag("slo_tpot_ms"),
    Flag("drain_timeout_s", flag_name="--drain-timeout"),
    Flag("metrics_window_s", flag_name="--metrics-window"),
    Flag("ready_timeout_s", flag_name="--ready-timeout"),
    Flag("log_level", choices=LOG_LEVELS),
    Flag("http_host"),
    Flag("http_port"),
    Flag("is_http_enabled", flag_name="--http"),
    Flag("is_warmup_enabled", flag_name="--warmup"),
    Flag("api_key", envvar=API_KEY_ENV, show_default=f"${API_KEY_ENV}"),
    Flag("tool_call_parser", choices=PARSER_OPTIONS),
)
"""`llmd serve`'s own flags, from ServeOptions (the engine's come from EngineConfig)."""
SERVE_OPTIONS = [click_option(ServeOptions, flag) for flag in SERVE_FLAGS]


def register(main: click.Group) -> None:
    """Add the daemon commands to the `llmd` group."""
    main.add_command(serve)
    main.add_command(stop)
    main.add_command(status)
    main.add_command(logs)


@click.command(
    epilog="""\b
Examples:
  llmd serve                                  # the shipped model, in the foreground
  llmd serve --model ./my-model --detach      # in the background; `llmd logs -f` follows it
  llmd serve --address tcp://127.0.0.1:5599 --slo-ttft-ms 200
"""
)
@apply_options(ENGINE_OPTIONS)
@apply_options(SERVE_OPTIONS)
def serve(**kwargs: Any) -> None:
    """Serve a model over ZeroMQ and an OpenAI-compatible HTTP API (foreground unless --detach)."""
    from llmd.daemon.serve import run_serve
    from llmd.errors import LLMDError

    engine_kwargs = pop_engine_kwargs(kwargs)
    try:
        serve_kwargs = {flag.field: kwargs.pop(flag.dest_name) for flag in SERVE_FLAGS}
        options = ServeOptions(**serve_kwargs, engine_kwargs=engine_kwargs)
        run_serve(options)
    except LLMDError as error:
        raise cli_error(error) from None


@click.command(
    epilog="""\b
Examples:
  llmd stop                 # drain for up to the daemon's --drain-timeout, then exit
  llmd stop --timeout 5     # drain for at most 5 s, then abort what is left
  llmd stop --now           # abort in-flight requests and exit at once
"""
)
@click.option("--address", default=None, show_default=ADDRESS_DEFAULT, help=ADDRESS_HELP)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.0),
    default=None,
    show_default="the daemon's --drain-timeout",
    help="Seconds in-flight requests may take to finish; the rest are aborted.",
)
@click.option("--now", is_flag=True, help="Abort in-flight requests instead of draining.")
def stop(address: str | None, timeout: float | None, now: bool) -> None:
    """Stop the daemon: drain in-flight requests (or abort them with --now), then exit."""
    from llmd.client import Client
    from llmd.commands.daemon_files import raise_if_crashed
    from llmd.protocol import default_address

    address = address or default_address()
    raise_if_crashed(address)
    with Client(address) as client:
        health = client.health()
        summary = client.shutdown(now=now, timeout=timeout, wait=True)
    pid = health["pid"]
    _wait_for_lock_release(client.address, STOP_WAIT_S)
    click.echo(f"stopped the llmd daemon at {client.address} (pid {pid}){_counts(summary)}")


def _counts(summary: str | None) -> str:
    """': 3 requests drained, 1 aborted' from the daemon's "stopped: drained 3, aborted 1"."""
    if not summary or not summary.startswith("stopped: "):
        return ""
    counts = dict(part.split() for part in summary.removeprefix("stopped: ").split(", "))
    num_drained, num_aborted = counts.get("drained", "0"), counts.get("aborted", "0")
    noun = "request" if num_drained == "1" else "requests"
    return f": {num_drained} {noun} drained, {num_aborted} aborted"


@click.command(
    epilog="""\b
Examples:
  llmd status                         # the daemon at the default address
  llmd status --json | jq .kv.usage   # for scripts (exit status 1 when none runs)
  llmd status --address tcp://127.0.0.1:5599
"""
)
@click.option("--address", default=None, show_default=ADDRESS_DEFAULT, help=ADDRESS_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def status(address: str | None, as_json: bool) -> None:
    """Show the daemon's model, device, queue, KV-cache use and log file."""
    from llmd.client import Client, DaemonNotRunningError
    from llmd.client.status_report import format_status, status_report
    from llmd.commands.daemon_files import raise_if_crashed, read_daemon_files
    from llmd.protocol import default_address, parse_address

    address = address or default_address()
    files = read_daemon_files(parse_address(address))
    try:
        raise_if_crashed(address)
        with Client(address) as client:
            snapshot = client.stats(include_requests=False, include_block_map=False)
    except DaemonNotRunningError as error:
        if as_json:
            not_running = {"running": False, "address": address, "error": str(error)}
            click.echo(json.dumps(not_running, indent=2))
            sys.exit(1)
        raise cli_error(error) from None
    report = status_report(snapshot)
    log_path = files.log_path(snapshot.daemon.log_file)
    report["log_file"] = None if log_path is None else str(log_path)
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        click.echo(format_status(report))


@click.command(
    epilog="""\b
Examples:
  llmd logs                 # the last 50 lines of the daemon's log
  llmd logs -f              # follow it (Ctrl-C stops)
  llmd logs -n 0 -f         # only new lines
"""
)
@click.option("--address", default=None, show_default=ADDRESS_DEFAULT, help=ADDRESS_HELP)
@click.option("--follow", "-f", is_flag=True, help="Keep printing lines as they are written.")
@click.option(
    "--lines", "-n", type=click.IntRange(min=0), default=50, show_default=True,
    help="How many of the last lines to print first.",
)  # fmt: skip
def logs(address: str | None, follow: bool, lines: int) -> None:
    """Print the log of a detached daemon (`llmd serve --detach`)."""
    from llmd.commands.daemon_files import read_daemon_files
    from llmd.commands.log_tail import follow_log, last_lines
    from llmd.errors import InvalidParameterError
    from llmd.protocol import default_address, parse_address

    address = address or default_address()
    files = read_daemon_files(parse_address(address))
    log_path = files.log_path(_reported_log_file(address) if files.is_lock_held else None)
    if log_path is None or not log_path.exists():
        raise InvalidParameterError(
            f"no log file for the daemon at {address} (a daemon started without --detach "
            "logs to its terminal; --log-file chooses the file)"
        )
    offset = last_lines(log_path, lines, sys.stdout)
    if follow:
        follow_log(log_path, offset, sys.stdout)


def _reported_log_file(address: str) -> str | None:
    """The log file a running daemon reports in its stats, if it answers."""
    from llmd.client import Client, DaemonNotRunningError

    try:
        with Client(address, timeout=2.0) as client:
            snapshot = client.stats(include_requests=False, include_block_map=False)
    except DaemonNotRunningError:
        return None
    return snapshot.daemon.log_file


def _wait_for_lock_release(address: str, timeout_s: float) -> None:
    """Wait until the daemon has released its address lock (so a new one can start)."""
    from llmd.daemon.instance_lock import InstanceLock
    from llmd.protocol import parse_address

    lock = InstanceLock(parse_address(address))
    deadline = time.monotonic() + timeout_s
    while lock.is_held() and time.monotonic() < deadline:
        time.sleep(0.05)
