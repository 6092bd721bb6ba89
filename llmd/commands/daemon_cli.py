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

STOP_WAIT_S = 10.0
"""After the daemon acknowledged stopping, how long `llmd stop` waits for it to release its
address lock (the last thing it does before exiting)."""


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
@click.option("--address", default=None, show_default=ADDRESS_DEFAULT, help=ADDRESS_HELP)
@click.option(
    "--allow-remote",
    is_flag=True,
    help="Allow a non-loopback tcp address (the protocol has no authentication).",
)
@click.option(
    "--detach", is_flag=True, help="Run in the background; return once the daemon is healthy."
)
@click.option(
    "--log-file",
    default=None,
    show_default="in the runtime directory",
    help="Log file of a detached daemon.",
)
@click.option(
    "--max-queued-requests",
    type=int,
    default=1024,
    show_default=True,
    help="Most requests in flight; more are refused with `overloaded`.",
)
@click.option(
    "--max-message-bytes",
    type=int,
    default=8 * 1024 * 1024,
    show_default=True,
    help="Largest message a client may send.",
)
@click.option(
    "--max-connections",
    type=int,
    default=None,
    show_default="half the file descriptors free at start",
    help="Most client connections at once; more are refused with a log line.",
)
@click.option(
    "--reserved-cpus",
    type=int,
    default=None,
    show_default="1 when 4 or more cores are available, else 0",
    help="CPU device: cores kept off the forward pass for the daemon's I/O, text and HTTP "
    "work (0: no pinning).",
)
@click.option(
    "--admission",
    type=click.Choice(["queue", "slo"]),
    default="queue",
    show_default=True,
    help="queue: every request waits its turn; slo: refuse at once (429, overloaded) a "
    "request that could not start within --slo-ttft-ms at the measured prefill rate.",
)
@click.option(
    "--slo-ttft-ms", type=float, default=None, help="Time-to-first-token target for goodput."
)
@click.option(
    "--slo-tpot-ms", type=float, default=None, help="Time-per-output-token target for goodput."
)
@click.option(
    "--drain-timeout",
    type=float,
    default=30.0,
    show_default=True,
    help="Seconds in-flight requests may take to finish on SIGTERM.",
)
@click.option(
    "--metrics-window",
    type=float,
    default=60.0,
    show_default=True,
    help="Seconds of history in latency percentiles and rates.",
)
@click.option(
    "--ready-timeout",
    type=float,
    default=600.0,
    show_default=True,
    help="With --detach: seconds to wait for the daemon to become healthy.",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
    help="Least severe log messages written.",
)
@click.option(
    "--http-host",
    default="127.0.0.1",
    show_default=True,
    help="Host of the OpenAI-compatible HTTP API (non-loopback needs --allow-remote).",
)
@click.option("--http-port", type=int, default=8000, show_default=True, help="HTTP API port.")
@click.option("--no-http", is_flag=True, help="Do not serve the HTTP API.")
@click.option(
    "--no-warmup",
    is_flag=True,
    help="Report healthy without first running the warm-up workload on the engine.",
)
@click.option(
    "--api-key",
    envvar="LLMD_API_KEY",
    default=None,
    help="Require 'Authorization: Bearer KEY' on the HTTP /v1 routes (or $LLMD_API_KEY).",
)
def serve(**kwargs: Any) -> None:
    """Serve a model over ZeroMQ and an OpenAI-compatible HTTP API (foreground unless --detach)."""
    from llmd.daemon.serve import run_serve
    from llmd.daemon.serve_options import ServeOptions
    from llmd.errors import LLMDError

    engine_kwargs = pop_engine_kwargs(kwargs)
    try:
        options = ServeOptions(
            address=kwargs["address"],
            allow_remote=kwargs["allow_remote"],
            detach=kwargs["detach"],
            log_file=kwargs["log_file"],
            max_queued_requests=kwargs["max_queued_requests"],
            max_message_bytes=kwargs["max_message_bytes"],
            max_connections=kwargs["max_connections"],
            reserved_cpus=kwargs["reserved_cpus"],
            admission=kwargs["admission"],
            slo_ttft_ms=kwargs["slo_ttft_ms"],
            slo_tpot_ms=kwargs["slo_tpot_ms"],
            drain_timeout_s=kwargs["drain_timeout"],
            metrics_window_s=kwargs["metrics_window"],
            ready_timeout_s=kwargs["ready_timeout"],
            log_level=kwargs["log_level"],
            is_http_enabled=not kwargs["no_http"],
            is_warmup_enabled=not kwargs["no_warmup"],
            http_host=kwargs["http_host"],
            http_port=kwargs["http_port"],
            api_key=kwargs["api_key"],
            engine_kwargs=engine_kwargs,
        )
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
    log_path = files.log_path(snapshot.get("daemon", {}).get("log_file"))
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
            facts = client.stats(include_requests=False, include_block_map=False)
    except DaemonNotRunningError:
        return None
    return facts.get("daemon", {}).get("log_file")


def _wait_for_lock_release(address: str, timeout_s: float) -> None:
    """Wait until the daemon has released its address lock (so a new one can start)."""
    from llmd.daemon.instance_lock import InstanceLock
    from llmd.protocol import parse_address

    lock = InstanceLock(parse_address(address))
    deadline = time.monotonic() + timeout_s
    while lock.is_held() and time.monotonic() < deadline:
        time.sleep(0.05)
