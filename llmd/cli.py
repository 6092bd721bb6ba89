"""The `llmd` command line: wires subcommands together and imports each one lazily.

Nothing heavy is imported at module scope, so `llmd --help`, `llmd chat` and `llmd top`
start instantly on machines without torch.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from llmd.cli_options import (
    ENGINE_OPTIONS,
    SAMPLING_OPTIONS,
    apply_options,
    pop_engine_kwargs,
    pop_sampling_params,
)
from llmd.commands.cli_group import LLMDGroup
from llmd.commands.help_text import ADDRESS_DEFAULT, ADDRESS_HELP, MAIN_EPILOG

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(
    cls=LLMDGroup,
    context_settings=CONTEXT_SETTINGS,
    invoke_without_command=True,
    epilog=MAIN_EPILOG,
)
@click.version_option(package_name="llmd")
@click.pass_context
def main(ctx: click.Context) -> None:
    """llmd: a single-node LLM serving engine, daemon and terminal apps."""
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())
        ctx.exit(0)


@main.command(
    epilog="""\b
Examples:
  llmd generate "Once upon a time"                 # the running daemon, else in-process
  llmd generate --chat --max-tokens 64 "Tell me a joke."
  echo "Hello" | llmd generate -                    # the prompt from stdin
  llmd generate --local --model ./my-model --logprobs 3 "Hi" "Bonjour"
  llmd generate --choice yes,no "Is the sky blue?"   # or --regex, --json-schema FILE, ...
"""
)
@apply_options(ENGINE_OPTIONS)
@apply_options(SAMPLING_OPTIONS)
@click.option("--chat", "as_chat", is_flag=True, help="Wrap each prompt in the chat template.")
@click.option("--stats", is_flag=True, help="Print per-request latency metrics to stderr.")
@click.option(
    "--local",
    is_flag=True,
    help="Load the model in this process even when a daemon is running (implied by any "
    "engine flag such as --model).",
)
@click.option("--address", default=None, show_default=ADDRESS_DEFAULT, help=ADDRESS_HELP)
@click.argument("prompts", nargs=-1, required=True)
@click.pass_context
def generate(ctx: click.Context, /, prompts: tuple[str, ...], as_chat: bool, stats: bool,
             local: bool, address: str | None, **kwargs: Any) -> None:  # fmt: skip
    """Generate completions for PROMPTS (`-` reads one from stdin; one prompt streams).

    Uses the daemon running at --address when there is one, else loads the model here.
    """
    from llmd.commands.generate import GenerateJob, read_prompts, run_generate

    params = pop_sampling_params(kwargs)
    engine_kwargs = pop_engine_kwargs(kwargs)
    explicit_engine_flags = [
        name
        for name in engine_kwargs
        if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT
    ]
    job = GenerateJob(
        prompts=read_prompts(prompts, sys.stdin),
        params=params,
        engine_kwargs=engine_kwargs,
        as_chat=as_chat,
        show_stats=stats,
        is_local=local or bool(explicit_engine_flags),
        address=address,
    )
    sys.exit(run_generate(job))


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
