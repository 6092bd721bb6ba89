"""`llmd generate`: offline generation for prompts given on the command line.

One prompt streams its text as it is produced; several are batched together (continuous
batching does the work) and printed in order when done.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from llmd.sampling_params import SamplingParams


def run_generate(
    prompts: list[str],
    params: SamplingParams,
    engine_kwargs: dict[str, Any],
    as_chat: bool = False,
    show_stats: bool = False,
) -> None:
    """Load the engine, generate for every prompt, print the results."""
    from llmd.llm import LLM

    llm = LLM(**engine_kwargs)
    inputs: list[Any] = list(prompts)
    if as_chat:
        template = llm.tokenizer.apply_chat_template
        inputs = [template([{"role": "user", "content": prompt}]) for prompt in prompts]
    if len(inputs) == 1:
        output = None
        for delta in llm.stream(inputs, params):
            sys.stdout.write(delta.text)
            sys.stdout.flush()
            output = delta.output or output
        sys.stdout.write("\n")
        outputs = [output] if output is not None else []
    else:
        outputs = llm.generate(inputs, params)
        for index, output in enumerate(outputs):
            click.echo(click.style(f"--- [{index}] {prompts[index]!r}", bold=True))
            click.echo(output.text)
    if show_stats:
        sys.stdout.flush()  # stats go to stderr: keep them after the text
        for index, output in enumerate(outputs):
            metrics = output.metrics
            click.echo(
                f"[{index}] finish={output.finish_reason} prompt={metrics.num_prompt_tokens} "
                f"generated={metrics.num_generated_tokens} cached={metrics.num_cached_tokens} "
                f"ttft={_ms(metrics.ttft)} tpot={_ms(metrics.tpot)} e2e={_ms(metrics.e2e)}",
                err=True,
            )


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}ms"
