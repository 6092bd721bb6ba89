"""`llmd bench`: serving load tests, budget sweeps, re-plotting, and offline throughput.

Only click wiring lives here; the work is in llmd.bench, imported when a command runs so
`llmd --help` stays instant.
"""

from __future__ import annotations

import sys

import click

from llmd.errors import LLMDError


def _rate(text: str) -> float:
    from llmd.bench.arrivals import parse_rate

    try:
        return parse_rate(text)
    except LLMDError as error:
        raise click.BadParameter(str(error)) from None


def _fail(error: LLMDError) -> click.ClickException:
    return click.ClickException(f"{error.code}: {error}")


@click.group()
def bench() -> None:
    """Benchmark a daemon (serve), sweep token budgets (sweep), re-plot (plot), offline."""


def serve_options(function):
    """The workload options shared by `bench serve` and `bench sweep`."""
    options = [
        click.option(
            "--dataset",
            type=click.Choice(["random", "shared-prefix", "sharegpt", "multi-turn"]),
            default="random",
            show_default=True,
            help="The workload.",
        ),
        click.option(
            "--num-prompts",
            type=int,
            default=100,
            show_default=True,
            help="Requests to send (sessions, for multi-turn).",
        ),
        click.option(
            "--input-len",
            type=int,
            default=128,
            show_default=True,
            help="Mean prompt tokens (the new tokens of each turn for multi-turn).",
        ),
        click.option(
            "--output-len",
            type=int,
            default=64,
            show_default=True,
            help="Mean tokens to generate (EOS is ignored).",
        ),
        click.option(
            "--range-ratio",
            type=float,
            default=0.0,
            show_default=True,
            help="random: lengths uniform in mean*(1-r)..mean*(1+r).",
        ),
        click.option(
            "--num-groups",
            type=int,
            default=4,
            show_default=True,
            help="shared-prefix: groups, each with its own system prompt.",
        ),
        click.option(
            "--prefix-len",
            type=int,
            default=256,
            show_default=True,
            help="shared-prefix: tokens of each group's system prompt.",
        ),
        click.option(
            "--num-turns",
            type=int,
            default=3,
            show_default=True,
            help="multi-turn: user turns per session.",
        ),
        click.option(
            "--dataset-path",
            type=click.Path(dir_okay=False),
            default=None,
            help="sharegpt: a ShareGPT JSON or JSONL file.",
        ),
        click.option(
            "--tokenizer",
            default=None,
            help="sharegpt: model dir with tokenizer.json (default: the daemon's).",
        ),
        click.option(
            "--arrival",
            type=click.Choice(["poisson", "gamma", "fixed"]),
            default="poisson",
            show_default=True,
            help="Inter-arrival law at --request-rate.",
        ),
        click.option(
            "--burstiness",
            type=float,
            default=1.0,
            show_default=True,
            help="Gamma shape: 1 is Poisson, <1 burstier, >1 steadier.",
        ),
        click.option(
            "--max-concurrency",
            type=int,
            default=None,
            help="Closed loop: at most N requests in flight.",
        ),
        click.option("--seed", type=int, default=0, show_default=True),
        click.option("--slo", default=None, help="Targets for goodput: ttft=MS,tpot=MS,e2e=MS."),
        click.option(
            "--vocab-size",
            type=int,
            default=None,
            help="Token-id range of random prompts (default: the daemon's vocab).",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


@bench.command("serve")
@click.option("--address", default=None, help="Daemon address (default: the user's socket).")
@click.option(
    "--request-rate",
    default="inf",
    show_default=True,
    help="Requests (sessions) per second, or inf to send all at once.",
)
@serve_options
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write every figure and each request's raw timings here.",
)
@click.option("--no-progress", is_flag=True, help="No progress bar.")
def serve_command(request_rate: str, json_path: str | None, no_progress: bool, **kwargs) -> None:
    """Drive a running daemon with a seeded workload and report latency and goodput."""
    from llmd.bench.report import render_table, write_json
    from llmd.bench.serve import ServeOptions, run_serve

    try:
        options = ServeOptions(
            request_rate=_rate(request_rate), show_progress=not no_progress, **kwargs
        )
        result = run_serve(options)
    except LLMDError as error:
        raise _fail(error) from None
    click.echo(render_table(result))
    if json_path:
        write_json(result, json_path)
        click.echo(f"wrote {json_path}")
    if result["num_completed"] == 0:
        sys.exit(1)


@bench.command(
    "offline",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def offline_command(args: tuple[str, ...]) -> None:
    """Offline throughput: llmd's engine against HF transformers (--help for its options)."""
    from llmd.bench.offline import main as offline_main

    sys.exit(offline_main(list(args)))


def register(main: click.Group) -> None:
    """Attach `llmd bench` to the top-level command group."""
    main.add_command(bench)
