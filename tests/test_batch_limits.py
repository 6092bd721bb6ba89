"""Batch-limit defaults: unset limits resolve per device and usage, set ones are kept."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from llmd.batch_limits import (
    DEFAULT_BATCH_LIMITS,
    USAGE_OFFLINE,
    USAGE_SERVE,
    default_batch_limits,
    resolve_batch_limits,
)
from llmd.config import EngineConfig
from llmd.errors import InvalidParameterError


def test_unset_limits_take_the_usage_default_and_set_ones_are_kept():
    served = resolve_batch_limits(EngineConfig(), "cpu", USAGE_SERVE)
    offline = resolve_batch_limits(EngineConfig(), "cpu", USAGE_OFFLINE)
    assert served.max_num_seqs == DEFAULT_BATCH_LIMITS[("cpu", USAGE_SERVE)].max_num_seqs
    assert (served.max_num_seqs, served.max_num_batched_tokens) != (
        offline.max_num_seqs,
        offline.max_num_batched_tokens,
    )
    mixed = resolve_batch_limits(EngineConfig(max_num_seqs=3), "cpu", USAGE_SERVE)
    assert mixed.max_num_seqs == 3
    assert mixed.max_num_batched_tokens == served.max_num_batched_tokens
    both = EngineConfig(max_num_seqs=3, max_num_batched_tokens=40)
    assert resolve_batch_limits(both, "cuda", USAGE_SERVE) is both


def test_every_device_has_both_usages_and_bad_keys_are_typed_errors():
    for device_type in ("cpu", "cuda"):
        for usage in (USAGE_OFFLINE, USAGE_SERVE):
            limits = default_batch_limits(device_type, usage)
            assert limits.max_num_seqs > 0 and limits.max_num_batched_tokens > 0
    with pytest.raises(InvalidParameterError) as error:
        default_batch_limits("cpu", "interactive")
    assert error.value.parameter == "usage"
    with pytest.raises(InvalidParameterError) as error:
        default_batch_limits("tpu", USAGE_SERVE)
    assert error.value.parameter == "device"


@pytest.mark.parametrize("field", ["max_num_seqs", "max_num_batched_tokens"])
@pytest.mark.parametrize("value", [0, -1, True, 2.5])
def test_bad_explicit_limits_are_still_refused(field, value):
    with pytest.raises(InvalidParameterError) as error:
        EngineConfig(**{field: value})
    assert error.value.parameter == field


def test_offline_engine_resolves_the_offline_defaults(tiny_model_dir):
    from llmd.llm import LLM

    llm = LLM(str(tiny_model_dir), device="cpu", num_blocks=64, max_model_len=128)
    limits = default_batch_limits("cpu", USAGE_OFFLINE)
    assert llm.engine.usage == USAGE_OFFLINE
    assert llm.engine.config.max_num_seqs == limits.max_num_seqs
    assert llm.engine.scheduler.config.max_num_batched_tokens == limits.max_num_batched_tokens


def test_serve_help_names_both_defaults():
    from llmd.cli import main

    result = CliRunner().invoke(main, ["serve", "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    served = default_batch_limits("cpu", USAGE_SERVE).max_num_seqs
    assert f"{served} served" in result.output
