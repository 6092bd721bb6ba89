"""Options shared by `llmd bench serve` and `llmd bench sweep`: workload, capacity search.

Declared once here so both commands spell, default and document them the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from llmd.bench.capacity import CapacityOptions


def file_option(*names: str, help: str, **settings: Any) -> Any:
    """A click option naming one file (not a folder), None when not given."""
    file_type = click.Path(dir_okay=False)
    return click.option(*names, type=file_type, default=None, help=help, **settings)


def serve_options(function):
    """The workload options shared by `bench serve` and `bench sweep`."""
    options = [
        click.option(
            "--dataset",
            type=click.Choice(["random", "shared-prefix", "sharegpt", "multi-turn", "repeat"]),
            default="random",
            show_default=True,
            help="The workload (repeat: text passages of --input-len words to repeat, where "
            "speculative decoding's n-gram drafts hit).",
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
        file_option("--dataset-path", help="sharegpt: a ShareGPT JSON or JSONL file."),
        click.option(
            "--tokenizer",
            default=None,
            show_default="the daemon's",
            help="sharegpt: model dir with tokenizer.json.",
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
        click.option(
            "--seed",
            type=int,
            default=0,
            show_default=True,
            help="Seed of the workload: prompts, lengths and arrival times.",
        ),
        click.option(
            "--slo", default=None, help="Goodput and --capacity targets: ttft=MS,tpot=MS,e2e=MS."
        ),
        click.option(
            "--vocab-size",
            type=int,
            default=None,
            show_default="the daemon's vocab",
            help="Token-id range of random prompts.",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def capacity_options(function):
    """`--capacity` and the bounds of its rate search (llmd.bench.capacity.CapacityOptions)."""
    options = [
        click.option(
            "--capacity",
            is_flag=True,
            help="Bisect for the highest request rate at which --capacity-attainment of the "
            "requests meet --slo (instead of one run at --request-rate).",
        ),
        click.option(
            "--capacity-attainment",
            "attainment_threshold",
            type=float,
            default=0.9,
            show_default=True,
            help="Fraction of requests that must meet every --slo target, in (0, 1].",
        ),
        click.option(
            "--capacity-min-rate",
            "min_rate_rps",
            type=float,
            default=1.0,
            show_default=True,
            help="First and lowest rate probed (req/s); if it fails, capacity is 0.",
        ),
        click.option(
            "--capacity-max-rate",
            "max_rate_rps",
            type=float,
            default=None,
            show_default="none, doubles from the min until a rate fails",
            help="Highest rate probed (req/s); if it passes, capacity is at least it.",
        ),
        click.option(
            "--capacity-tolerance",
            "relative_tolerance",
            type=float,
            default=0.1,
            show_default=True,
            help="Stop when the failing rate is within this fraction above the passing one.",
        ),
        click.option(
            "--capacity-max-probes",
            "max_probes",
            type=int,
            default=10,
            show_default=True,
            help="At most this many runs of the workload in one search.",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


CAPACITY_FIELDS = (
    "attainment_threshold", "min_rate_rps", "max_rate_rps", "relative_tolerance", "max_probes"
)  # fmt: skip
"""The click parameters capacity_options adds besides the flag (CapacityOptions' fields)."""


def pop_capacity(kwargs: dict[str, Any]) -> CapacityOptions | None:
    """Pop capacity_options' parameters from `kwargs`: CapacityOptions, or None without the flag."""
    from llmd.bench.capacity import CapacityOptions

    fields = {name: kwargs.pop(name) for name in CAPACITY_FIELDS}
    if not kwargs.pop("capacity"):
        return None
    if not kwargs.get("slo"):
        from llmd.errors import InvalidParameterError

        raise InvalidParameterError("capacity at SLO needs targets: pass --slo", "capacity")
    return CapacityOptions(**fields)
