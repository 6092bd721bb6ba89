"""The `llmd` command line: wires subcommands together and imports each one lazily.

Nothing heavy is imported at module scope, so `llmd --help`, `llmd chat` and `llmd top`
start instantly on machines without torch.
"""

from __future__ import annotations

import sys

import click

from llmd.cli_options import (
    ENGINE_OPTIONS,
    SAMPLING_OPTIONS,
    apply_options,
    pop_engine_kwargs,
    pop_sampling_params,
)
from llmd.errors import LLMDError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="llmd")
def main() -> None:
    """llmd: a single-node LLM serving engine, daemon and terminal apps."""


@main.command()
@apply_options(ENGINE_OPTIONS)
@apply_options(SAMPLING_OPTIONS)
@click.option("--chat", "as_chat", is_flag=True, help="Wrap each prompt in the chat template.")
@click.option("--stats", is_flag=True, help="Print per-request latency metrics.")
@click.argument("prompts", nargs=-1, required=True)
def generate(prompts: tuple[str, ...], as_chat: bool, stats: bool, **kwargs) -> None:
    """Generate completions for PROMPTS (streams when there is one prompt)."""
    from llmd.commands.generate import run_generate

    try:
        params = pop_sampling_params(kwargs)
        engine_kwargs = pop_engine_kwargs(kwargs)
        run_generate(list(prompts), params, engine_kwargs, as_chat=as_chat, show_stats=stats)
    except LLMDError as error:
        raise click.ClickException(f"{error.code}: {error}") from None


def _register_optional_commands() -> None:
    """Attach the daemon, TUI and bench commands defined in their own modules."""
    import importlib

    for module_name in (
        "llmd.commands.daemon_cli",
        "llmd.commands.tui_cli",
        "llmd.commands.bench_cli",
    ):
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name != module_name:
                raise
            continue
        module.register(main)


_register_optional_commands()

if __name__ == "__main__":
    sys.exit(main())
