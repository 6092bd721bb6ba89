"""`llmd generate`: completions for prompts given on the command line (or `-` for stdin).

With a daemon running it sends the prompts there (no model load); otherwise, or with
--local or an engine flag, it loads the engine in this process. One prompt streams its
text as it is produced; several are batched and printed in order when done.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from typing import Any, TextIO

import click

from llmd.client.context_fit import context_warning, fitted_max_tokens
from llmd.commands.generate_output import (
    GeneratedText,
    TokenChoice,
    print_batch,
    print_logprobs,
    print_stats,
)
from llmd.errors import InvalidParameterError
from llmd.sampling_params import SamplingParams

EXIT_OK = 0
EXIT_ABORTED = 1


@dataclass(frozen=True)
class GenerateJob:
    """Everything the command was asked to do."""

    prompts: list[str]
    params: SamplingParams
    engine_kwargs: dict[str, Any]
    as_chat: bool = False
    show_stats: bool = False
    is_local: bool = False
    """Load the model in this process even when a daemon is running."""
    address: str | None = None


def read_prompts(arguments: tuple[str, ...], stdin: TextIO) -> list[str]:
    """The prompts, with a `-` argument replaced by all of stdin (which may be used once)."""
    if arguments.count("-") > 1:
        raise InvalidParameterError("`-` (read stdin) may be given only once", "prompts")
    prompts = []
    for argument in arguments:
        if argument == "-":
            argument = require_utf8(stdin.read(), "stdin").rstrip("\n")
            if not argument.strip():
                raise InvalidParameterError("stdin was empty", "prompts")
        prompts.append(require_utf8(argument, "the prompt"))
    return prompts


def require_utf8(text: str, where: str) -> str:
    """`text` unchanged, or a clear error when it came from bytes that are not UTF-8.

    Python decodes such stdin and arguments with surrogate escapes, which cannot be sent.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        byte = (
            ord(text[error.start]) - 0xDC00 if "\udc80" <= text[error.start] <= "\udcff" else None
        )
        what = f"byte 0x{byte:02x}" if byte is not None else "a character"
        raise InvalidParameterError(
            f"{where} is not UTF-8 text ({what} at character {error.start})"
        ) from None
    return text


def run_generate(job: GenerateJob) -> int:
    """Generate through the running daemon or in-process; the exit status."""
    if not job.is_local:
        from llmd.commands.generate_remote import find_daemon, generate_remote

        client = find_daemon(job.address)
        if client is not None:
            with client:
                return finish(job, generate_remote(client, job))
    return finish(job, generate_local(job))


def finish(job: GenerateJob, results: list[GeneratedText]) -> int:
    """Print what is left to print; non-zero when a request was aborted."""
    if len(job.prompts) > 1:
        print_batch(job.prompts, results)
    elif results:
        print_logprobs(results[0])
    if job.show_stats:
        sys.stdout.flush()  # stats go to stderr: keep them after the text
        print_stats(results)
    if any(result.finish_reason in ("abort", "error") for result in results):
        click.echo("Error: a request was aborted before it finished", err=True)
        return EXIT_ABORTED
    return EXIT_OK


def generate_local(job: GenerateJob) -> list[GeneratedText]:
    """Load the engine here and generate for every prompt."""
    from llmd.llm import LLM

    llm = LLM(**job.engine_kwargs)
    tokenizer = llm.tokenizer
    if job.as_chat:
        inputs = [tokenizer.apply_chat_template([{"role": "user", "content": prompt}])
                  for prompt in job.prompts]  # fmt: skip
    else:
        inputs = [tokenizer.encode(prompt) for prompt in job.prompts]
    params_list = []
    for token_ids in inputs:
        ids = token_ids if isinstance(token_ids, list) else tokenizer.encode(token_ids)
        max_model_len = llm.engine.max_model_len
        warning = context_warning(len(ids), job.params.max_tokens, max_model_len)
        if warning:
            click.echo(warning, err=True)
        max_tokens = fitted_max_tokens(len(ids), job.params.max_tokens, max_model_len)
        params_list.append(dataclasses.replace(job.params, max_tokens=max_tokens))
    outputs: dict[int, Any] = {}
    for delta in llm.stream(inputs, params_list):
        if len(inputs) == 1 and delta.text:
            sys.stdout.write(delta.text)
            sys.stdout.flush()
        if delta.output is not None:
            outputs[delta.index] = delta.output
    if len(inputs) == 1:
        sys.stdout.write("\n")
    return [_from_output(outputs[index], tokenizer) for index in sorted(outputs)]


def _from_output(output: Any, tokenizer: Any) -> GeneratedText:
    metrics = output.metrics
    choices = tuple(
        TokenChoice(
            entry.token_id,
            tokenizer.decode([entry.token_id], skip_special_tokens=False),
            entry.logprob,
            tuple(
                (token_id, tokenizer.decode([token_id], skip_special_tokens=False), logprob)
                for token_id, logprob in zip(entry.top_token_ids, entry.top_logprobs)
            ),
        )
        for entry in output.logprobs or ()
    )
    return GeneratedText(
        text=output.text,
        finish_reason=output.finish_reason,
        num_prompt_tokens=metrics.num_prompt_tokens,
        num_generated_tokens=metrics.num_generated_tokens,
        num_cached_tokens=metrics.num_cached_tokens,
        ttft_s=metrics.ttft,
        tpot_s=metrics.tpot,
        e2e_s=metrics.e2e,
        logprobs=choices,
    )
