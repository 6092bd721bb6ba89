"""Flags generated from the config dataclasses: defaults, types and help come from the field."""

from __future__ import annotations

import argparse
import dataclasses

import click
import pytest
from click.testing import CliRunner

from llmd.bench.offline import LLMD_FLAGS, build_parser
from llmd.cli_options import (
    ENGINE_FLAGS,
    ENGINE_OPTIONS,
    SAMPLING_FLAGS,
    SAMPLING_OPTIONS,
    apply_options,
    pop_engine_kwargs,
    pop_sampling_params,
)
from llmd.config import EngineConfig
from llmd.field_docs import field_docs
from llmd.option_spec import FROM_FIELD, Flag, add_argument, click_option, command_line_help
from llmd.sampling_params import SamplingParams
from llmd.structured_outputs import StructuredOutputs


def _parsed(options: list, argv: list[str]) -> dict:
    seen: dict = {}

    @click.command()
    @apply_options(options)
    def command(**kwargs):
        seen.update(kwargs)

    result = CliRunner().invoke(command, argv)
    assert result.exit_code == 0, result.output
    return seen


@pytest.mark.parametrize("cls", [EngineConfig, SamplingParams, StructuredOutputs])
def test_every_field_has_a_docstring(cls):
    docs = field_docs(cls)
    missing = [f.name for f in dataclasses.fields(cls) if not docs.get(f.name)]
    assert missing == []
    assert all("  " not in doc and "\n" not in doc for doc in docs.values())


def test_no_engine_flag_builds_the_default_config():
    assert EngineConfig(**pop_engine_kwargs(_parsed(ENGINE_OPTIONS, []))) == EngineConfig()


def test_engine_flags_reach_their_fields_with_their_types():
    argv = ["-m", "x", "--max-num-seqs", "5", "--kv-cache-memory-gib", "0.5",
            "--no-enable-prefix-caching", "--enforce-eager", "--async-scheduling",
            "--dtype", "float32"]  # fmt: skip
    config = EngineConfig(**pop_engine_kwargs(_parsed(ENGINE_OPTIONS, argv)))
    assert (config.model, config.max_num_seqs, config.kv_cache_memory_gib) == ("x", 5, 0.5)
    assert not config.enable_prefix_caching and config.enforce_eager
    assert config.async_scheduling is True and config.dtype == "float32"
    with pytest.raises(AssertionError):  # a closed set stays closed
        _parsed(ENGINE_OPTIONS, ["--dtype", "float8"])


def test_sampling_flags_differ_from_the_dataclass_only_where_declared():
    params = pop_sampling_params(_parsed(SAMPLING_OPTIONS, []))
    overridden = {f.field: f.default for f in SAMPLING_FLAGS if f.default is not FROM_FIELD}
    assert overridden == {"max_tokens": 128, "temperature": 0.0}
    assert params == dataclasses.replace(SamplingParams(), **overridden)
    argv = ["--sampling-seed", "3", "--stop", "a", "--stop", "b", "--stop-token-id", "7",
            "-t", "0.5", "--ignore-eos"]  # fmt: skip
    params = pop_sampling_params(_parsed(SAMPLING_OPTIONS, argv))
    assert (params.seed, params.stop, params.stop_token_ids) == (3, ("a", "b"), (7,))
    assert params.temperature == 0.5 and params.ignore_eos
    assert params.can_speculate is True
    assert pop_sampling_params(_parsed(SAMPLING_OPTIONS, ["--no-speculate"])).can_speculate is False


def test_constraint_flags_build_one_structured_output(tmp_path):
    assert pop_sampling_params(_parsed(SAMPLING_OPTIONS, [])).structured_outputs is None
    argv = ["--choice", "a,b", "--choice", "c d"]
    params = pop_sampling_params(_parsed(SAMPLING_OPTIONS, argv))
    assert params.structured_outputs == StructuredOutputs(choice=("a", "b", "c d"))
    schema_path = tmp_path / "s.json"
    schema_path.write_text('{"type": "integer"}')
    params = pop_sampling_params(_parsed(SAMPLING_OPTIONS, ["--json-schema", str(schema_path)]))
    assert params.structured_outputs == StructuredOutputs(json={"type": "integer"})
    params = pop_sampling_params(_parsed(SAMPLING_OPTIONS, ["--json-object"]))
    assert params.structured_outputs == StructuredOutputs(json_object=True)


def test_a_metavar_names_the_value_in_both_parsers():
    flag = Flag("regex", metavar="REGEX", help="Match REGEX.")
    parser = argparse.ArgumentParser()
    add_argument(parser, StructuredOutputs, flag)
    assert "--regex REGEX" in parser.format_help()
    command = click.command()(click_option(StructuredOutputs, flag)(lambda regex: None))
    assert "--regex REGEX" in command.get_help(click.Context(command))


def test_the_offline_benchmark_takes_the_same_flags_with_one_declared_override():
    args = build_parser().parse_args([])
    options = {flag.field: getattr(args, flag.dest_name) for flag in LLMD_FLAGS}
    defaults = {flag.field: getattr(EngineConfig(), flag.field) for flag in LLMD_FLAGS}
    assert {k for k in options if options[k] != defaults[k]} == {"kv_cache_memory_gib"}
    args = build_parser().parse_args(
        ["--no-prepack-weights", "--async-scheduling", "--max-num-seqs", "9", "--enforce-eager"]
    )
    assert (args.prepack_weights, args.async_scheduling, args.max_num_seqs) == (False, True, 9)
    assert args.enforce_eager
    engine_fields = {flag.field for flag in ENGINE_FLAGS}
    assert {flag.field for flag in LLMD_FLAGS} <= engine_fields


def test_help_drops_the_python_none_clause_which_the_default_says_instead():
    assert command_line_help("Token budget; None: the device's (see x).") == "Token budget."
    assert command_line_help("Seed. None means random.") == "Seed."
    assert command_line_help("Tokens per block (paging).") == "Tokens per block (paging)."
    assert command_line_help("Key (None: none). Secret.") == "Key. Secret."
    assert command_line_help("Cores; 0: off (None: 1 from 4 cores).") == "Cores; 0: off."


def test_serve_flags_build_the_default_options_and_keep_their_old_spellings():
    from llmd.commands.daemon_cli import SERVE_FLAGS, SERVE_OPTIONS
    from llmd.daemon.serve_options import ServeOptions

    def options(argv: list[str]) -> ServeOptions:
        kwargs = _parsed(SERVE_OPTIONS, argv)
        return ServeOptions(**{flag.field: kwargs.pop(flag.dest_name) for flag in SERVE_FLAGS})

    assert options([]) == ServeOptions()
    changed = options(["--no-http", "--no-warmup", "--drain-timeout", "5", "--detach"])
    assert not changed.is_http_enabled and not changed.is_warmup_enabled
    assert changed.drain_timeout_s == 5.0 and changed.detach
