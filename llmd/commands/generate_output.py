"""What `llmd generate` prints: the text, logprobs and stats.

The in-process and the daemon paths both reduce a finished request to one GeneratedText,
so the two print exactly the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import click

MAX_ALTERNATIVES_SHOWN = 20


@dataclass(frozen=True)
class TokenChoice:
    """One generated token with its logprob and the top alternatives at its position."""

    token_id: int
    text: str | None
    logprob: float
    alternatives: tuple[tuple[int, str | None, float], ...] = ()
    """(token id, its text when known, logprob), most likely first."""


@dataclass(frozen=True)
class GeneratedText:
    """A finished request as `llmd generate` reports it."""

    text: str
    finish_reason: str
    num_prompt_tokens: int
    num_generated_tokens: int
    num_cached_tokens: int = 0
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    logprobs: tuple[TokenChoice, ...] = field(default_factory=tuple)


def print_logprobs(result: GeneratedText) -> None:
    """One line per generated token: its text, logprob and the alternatives."""
    if not result.logprobs:
        return
    click.echo(click.style("logprobs (token, logprob, top alternatives):", bold=True))
    for choice in result.logprobs:
        line = f"  {_token(choice.token_id, choice.text):<20} {choice.logprob:8.4f}"
        alternatives = ", ".join(
            f"{_token(token_id, text)} {logprob:.3f}"
            for token_id, text, logprob in choice.alternatives[:MAX_ALTERNATIVES_SHOWN]
        )
        click.echo(f"{line}   {alternatives}" if alternatives else line)


def print_stats(results: list[GeneratedText]) -> None:
    """Per-request latency metrics on stderr (after the text)."""
    for index, result in enumerate(results):
        click.echo(
            f"[{index}] finish={result.finish_reason} prompt={result.num_prompt_tokens} "
            f"generated={result.num_generated_tokens} cached={result.num_cached_tokens} "
            f"ttft={_ms(result.ttft_s)} tpot={_ms(result.tpot_s)} e2e={_ms(result.e2e_s)}",
            err=True,
        )


def print_batch(prompts: list[str], results: list[GeneratedText]) -> None:
    """Several prompts' results in input order, each under its prompt."""
    for index, result in enumerate(results):
        click.echo(click.style(f"--- [{index}] {prompts[index]!r}", bold=True))
        click.echo(result.text)
        print_logprobs(result)


def _token(token_id: int, text: str | None) -> str:
    return f"{text!r}" if text is not None else f"#{token_id}"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}ms"
