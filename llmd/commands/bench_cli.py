"""`llmd bench`: serving load tests, budget sweeps, re-plotting, and offline throughput.

Only click wiring lives here; the work is in llmd.bench, imported when a command runs so
`llmd --help` stays instant.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from llmd.commands.bench_options import (
    capacity_options,
    file_option,
    pop_capacity,
    serve_options,
)
from llmd.commands.help_text import ADDRESS_DEFAULT, ADDRESS_HELP
from llmd.errors import LLMDError


def _rate(text: str) -> float:
    from llmd.bench.arrivals import parse_rate

    try:
        return parse_rate(text)
    except LLMDError as error:
        raise click.BadParameter(str(error)) from None


def _fail(error: LLMDError) -> click.ClickException:
    from llmd.commands.cli_group import cli_error

    return cli_error(error)


@click.group(
    epilog="""\b
Examples:
  llmd bench serve --request-rate 4 --num-prompts 200 --slo ttft=500,tpot=50
  llmd bench sweep --max-num-batched-tokens 256,1024,4096 --request-rates 1,2,4 --output-dir sweep/
  llmd bench plot sweep/ --png sweep.png
  llmd bench offline --num-requests 64 --repeats 3
"""
)
def bench() -> None:
    """Benchmark a daemon (serve), sweep token budgets (sweep), re-plot (plot), offline."""


@bench.command(
    "serve",
    epilog="""\b
Examples:
  llmd bench serve --request-rate 4 --num-prompts 200 --slo ttft=500,tpot=50
  llmd bench serve --dataset shared-prefix --max-concurrency 16 --json run.json
  llmd bench serve --http http://127.0.0.1:8000 --request-rate inf
  llmd bench serve --capacity --slo ttft=500,tpot=50 --num-prompts 100 --json capacity.json
""",
)
@click.option("--address", default=None, show_default=ADDRESS_DEFAULT, help=ADDRESS_HELP)
@click.option(
    "--http",
    "http_url",
    default=None,
    help="Drive an OpenAI-compatible server at this URL (/v1/completions, streamed) instead.",
)
@click.option("--served-model", default=None, help="With --http: the request's model field.")
@click.option(
    "--request-rate",
    default="inf",
    show_default=True,
    help="Requests (sessions) per second, or inf to send all at once.",
)
@serve_options
@capacity_options
@file_option("--json", "json_path", help="Write every figure and each request's raw timings here.")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@click.pass_context
def serve_command(
    ctx: click.Context,
    /,
    request_rate: str,
    json_path: str | None,
    no_progress: bool,
    **kwargs: Any,
) -> None:
    """Drive a running daemon with a seeded workload and report latency and goodput."""
    from llmd.bench.report import render_table, write_json
    from llmd.bench.serve import ServeOptions, run_capacity, run_serve

    try:
        search = pop_capacity(kwargs)
        if search is not None and not _is_default(ctx, "request_rate"):
            raise click.UsageError("--capacity chooses the rates itself: drop --request-rate")
        options = ServeOptions(
            request_rate=_rate(request_rate), show_progress=not no_progress, **kwargs
        )
        if search is None:
            result = run_serve(options)
        else:
            result = run_capacity(options, search, lambda line: click.echo(line, err=True))[1]
    except LLMDError as error:
        raise _fail(error) from None
    click.echo(render_table(result))
    if json_path:
        write_json(result, json_path)
        click.echo(f"wrote {json_path}")
    if result["num_completed"] == 0:
        sys.exit(1)


def _is_default(ctx: click.Context, name: str) -> bool:
    return ctx.get_parameter_source(name) is click.core.ParameterSource.DEFAULT


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(item) for item in text.split(",") if item.strip())
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise click.BadParameter(f"expected positive integers, got {text!r}")
    return values


@bench.command(
    "sweep",
    epilog="""\b
Examples:
  llmd bench sweep --max-num-batched-tokens 256,1024,4096 --request-rates 1,2,4 --output-dir sweep/
  llmd bench sweep --max-num-batched-tokens 256,1024 --capacity --slo ttft=500,tpot=50 \\
      --output-dir sweep/
""",
)
@click.option(
    "-m", "--model", default=None, show_default="the shipped one", help="Model of every daemon."
)
@click.option(
    "--max-num-batched-tokens",
    "budgets",
    required=True,
    help="Token budgets to compare, comma-separated (one daemon each).",
)
@click.option(
    "--max-num-seqs",
    "max_num_seqs",
    default=None,
    help="Also compare these --max-num-seqs values (comma-separated).",
)
@click.option(
    "--request-rates",
    default="",
    show_default="none; needed unless --capacity",
    help="Request rates to run on each daemon, comma-separated (inf allowed).",
)
@click.option(
    "--output-dir",
    type=click.Path(file_okay=False),
    required=True,
    help="Folder for every point's JSON, sweep.json, the PNG and daemon logs.",
)
@click.option(
    "--serve-arg",
    "serve_args",
    multiple=True,
    help="Extra `llmd serve` argument for each daemon (repeat: --serve-arg=--num-blocks=512).",
)
@serve_options
@capacity_options
def sweep_command(model, budgets, max_num_seqs, request_rates, output_dir, serve_args, **kwargs):
    """Start a daemon per budget, run `bench serve` at each rate (or find its capacity), rank."""
    from pathlib import Path

    from llmd.bench.serve import ServeOptions
    from llmd.bench.sweep import SweepOptions, finish_sweep, run_sweep

    rates = tuple(_rate(item) for item in request_rates.split(",") if item.strip())
    seqs = _int_list(max_num_seqs) if max_num_seqs else (None,)
    try:
        search = pop_capacity(kwargs)
        options = SweepOptions(
            budgets=_int_list(budgets),
            request_rates=rates,
            output_dir=Path(output_dir),
            workload=ServeOptions(show_progress=False, **kwargs),
            max_num_seqs=seqs,
            model=model,
            serve_args=tuple(serve_args),
            capacity=search,
        )
        run_sweep(options, click.echo)
        click.echo(finish_sweep(options.output_dir))
    except LLMDError as error:
        raise _fail(error) from None


@bench.command(
    "plot",
    epilog="""\b
Examples:
  llmd bench plot sweep/ --png sweep.png --slo ttft=500,tpot=50
""",
)
@click.argument("folder", type=click.Path(file_okay=False, exists=True))
@file_option("--png", "png_path", show_default="FOLDER/sweep.png", help="Where to write the PNG.")
@click.option("--slo", default=None, help="Re-judge goodput under ttft=MS,tpot=MS,e2e=MS.")
def plot_command(folder: str, png_path: str | None, slo: str | None) -> None:
    """Re-draw a sweep's table, charts and PNG from its saved points (nothing is re-run)."""
    from llmd.bench.slo import Slo
    from llmd.bench.sweep import finish_sweep

    try:
        targets = Slo.parse(slo) if slo else None
        click.echo(finish_sweep(folder, png_path, targets))
    except LLMDError as error:
        raise _fail(error) from None


@bench.command(
    "offline",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def offline_command(args: tuple[str, ...]) -> None:
    """Offline throughput: llmd's engine against HF transformers (--help for its options)."""
    try:
        from llmd.bench.offline import main as offline_main
    except ModuleNotFoundError as error:
        if error.name != "llmd.bench.offline":
            raise
        raise click.ClickException(
            "this llmd has no offline benchmark (llmd.bench.offline)"
        ) from None
    sys.exit(offline_main(list(args), prog="llmd bench offline"))


def register(main: click.Group) -> None:
    """Attach `llmd bench` to the top-level command group."""
    main.add_command(bench)
