"""Click option groups shared by the commands that build an engine or sampling params.

`llmd generate`, `llmd serve` and `llmd bench` take the same engine flags, and the
clients take the same sampling flags, so each flag is declared once, here, without torch.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from llmd.batch_limits import describe_defaults
from llmd.config import (
    ATTENTION_BACKENDS,
    DEVICES,
    DTYPES,
    KV_CACHE_DTYPES,
    POLICIES,
    QUANTIZATIONS,
    SPECULATIVE_METHODS,
    EngineConfig,
)
from llmd.errors import InvalidParameterError
from llmd.option_spec import Flag, click_option
from llmd.sampling_params import SamplingParams
from llmd.structured.grammar_source import check_grammar
from llmd.structured_outputs import StructuredOutputs

ENGINE_FLAGS = (
    Flag("model", short_names=("-m",), show_default="the small model shipped with llmd"),
    Flag("tokenizer", show_default="the model's"),
    Flag("served_model_name", show_default="the --model value"),
    Flag("dtype", choices=DTYPES),
    Flag("num_threads", show_default="the cores llmd may use"),
    Flag("device", choices=DEVICES),
    Flag("kv_cache_dtype", choices=KV_CACHE_DTYPES),
    Flag("quantization", choices=QUANTIZATIONS),
    Flag("block_size"),
    Flag("kv_cache_memory_gib"),
    Flag("gpu_memory_utilization"),
    Flag("num_blocks"),
    Flag("max_model_len", show_default="the model's"),
    Flag("max_num_seqs", show_default=describe_defaults("max_num_seqs")),
    Flag("max_num_batched_tokens", show_default=describe_defaults("max_num_batched_tokens")),
    Flag("enable_prefix_caching"),
    Flag("enable_chunked_prefill"),
    Flag("scheduling_policy", choices=POLICIES),
    Flag("seed"),
    Flag("attention_backend", choices=ATTENTION_BACKENDS),
    Flag("enforce_eager", is_switch=True),
    Flag("prepack_weights"),
    Flag("async_scheduling", show_default="on for CUDA, off on CPU"),
    Flag("speculative_method", choices=SPECULATIVE_METHODS, show_default="off"),
    Flag("num_speculative_tokens"),
    Flag("prompt_lookup_min"),
    Flag("prompt_lookup_max"),
    Flag("speculative_max_batch_size", show_default="any batch"),
    Flag("draft_model", show_default="none"),
)
"""The engine flags of `llmd generate`, `llmd serve` and `llmd bench`, from EngineConfig."""
ENGINE_OPTIONS = [click_option(EngineConfig, flag) for flag in ENGINE_FLAGS]
ENGINE_KEYS = tuple(flag.field for flag in ENGINE_FLAGS)

SAMPLING_FLAGS = (
    # A terminal user wants a whole answer, reproducibly: more tokens than the API's 16,
    # and greedy unless asked.
    Flag("max_tokens", default=128),
    Flag("min_tokens"),
    Flag("temperature", short_names=("-t",), default=0.0),
    Flag("top_k"),
    Flag("top_p"),
    Flag("min_p"),
    Flag("seed", flag_name="--sampling-seed", dest="sampling_seed"),
    Flag("repetition_penalty"),
    Flag("presence_penalty"),
    Flag("frequency_penalty"),
    Flag("stop"),
    Flag("stop_token_ids", flag_name="--stop-token-id"),
    Flag("ignore_eos", is_switch=True),
    Flag("logprobs"),
    Flag(
        "can_speculate",
        flag_name="--speculate",
        help="Let speculative decoding (--speculative-method, here or the daemon's) draft "
        "tokens for these prompts; --no-speculate opts them out (the output is the same).",
    ),
)
"""The sampling flags of `llmd generate`, from SamplingParams."""
STRUCTURED_FLAGS = (
    Flag("json", flag_name="--json-schema", dest="json_schema", metavar="FILE",
         help="Constrain the output to the JSON schema in FILE."),
    Flag("json_object", is_switch=True, help="Constrain the output to any JSON object."),
    Flag("regex", metavar="REGEX", help="Constrain the whole output to match REGEX."),
    Flag("choice", metavar="A,B,...",
         help="The output is exactly one of these comma-separated strings, taken as written "
         "(repeat the flag to add more)."),
    Flag("grammar", metavar="FILE",
         help="Constrain the output to the Lark grammar in FILE (llguidance's dialect)."),
)  # fmt: skip
"""The output constraints of `llmd generate` (at most one), from StructuredOutputs."""
FILE_FLAGS = ("json", "grammar")
"""Constraint fields whose flag names a file to read rather than the value itself."""
SAMPLING_OPTIONS = [
    *(click_option(SamplingParams, flag) for flag in SAMPLING_FLAGS),
    *(click_option(StructuredOutputs, flag) for flag in STRUCTURED_FLAGS),
]


F = TypeVar("F", bound=Callable[..., object])
"""A click command function, before and after its options are applied."""


def apply_options(options: list[Callable[[F], F]]) -> Callable[[F], F]:
    """Decorate a click command with a list of options, in order."""

    def decorate(function: F) -> F:
        for option in reversed(options):
            function = option(function)
        return function

    return decorate


def pop_engine_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Remove the engine flags from a command's kwargs and return them as EngineConfig kwargs."""
    return {key: kwargs.pop(key) for key in ENGINE_KEYS if key in kwargs}


def pop_sampling_params(kwargs: dict[str, Any]) -> SamplingParams:
    """Remove the sampling and constraint flags from a command's kwargs; SamplingParams."""
    structured_outputs = pop_structured_outputs(kwargs)
    fields = {flag.field: kwargs.pop(flag.dest_name) for flag in SAMPLING_FLAGS}
    return SamplingParams(**fields, structured_outputs=structured_outputs)


def pop_structured_outputs(kwargs: dict[str, Any]) -> StructuredOutputs | None:
    """Remove the constraint flags from kwargs; their one constraint, grammar checked.

    Errors name the flag (its dest, which the CLI shows as typed), and a bad regex or
    schema is refused here, before a model loads or a daemon is asked.
    """
    values = {flag: kwargs.pop(flag.dest_name) for flag in STRUCTURED_FLAGS}
    given = [flag for flag, value in values.items() if value not in (None, False, ())]
    if not given:
        return None
    if len(given) > 1:
        names = ", ".join(flag.long_name for flag in STRUCTURED_FLAGS)
        got = " and ".join(flag.long_name for flag in given)
        raise InvalidParameterError(f"give at most one of {names}; got {got}")
    (flag,) = given
    value = values[flag]
    if flag.field in FILE_FLAGS:
        try:
            value = Path(value).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            reason = error.strerror if isinstance(error, OSError) and error.strerror else error
            raise InvalidParameterError(f"cannot read {value}: {reason}", flag.dest_name) from None
    elif flag.field == "choice":
        value = [option for text in value for option in text.split(",")]
    try:
        spec = StructuredOutputs(**{flag.field: value})
        check_grammar(spec)
    except InvalidParameterError as error:
        raise InvalidParameterError(error.message, flag.dest_name) from None
    return spec
