"""Speculative decoding's options: validated with typed errors naming the field, and flags."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from llmd.config import EngineConfig
from llmd.errors import InvalidParameterError
from llmd.sampling_params import SamplingParams


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"speculative_method": "eagle"}, "speculative_method"),
        ({"num_speculative_tokens": 0}, "num_speculative_tokens"),
        ({"num_speculative_tokens": 17}, "num_speculative_tokens"),
        ({"prompt_lookup_min": 0}, "prompt_lookup_min"),
        ({"prompt_lookup_max": 2.5}, "prompt_lookup_max"),
        ({"prompt_lookup_min": 5, "prompt_lookup_max": 3}, "prompt_lookup_min"),
        ({"speculative_max_batch_size": 0}, "speculative_max_batch_size"),
        ({"speculative_max_batch_size": True}, "speculative_max_batch_size"),
        ({"draft_model": "/models/draft"}, "draft_model"),  # a draft model with ngram
        ({"speculative_method": "draft"}, "draft_model"),  # the draft method without one
        ({"speculative_method": "draft", "draft_model": ""}, "draft_model"),
    ],
)
def test_bad_speculative_options_name_their_field(kwargs, field):
    with pytest.raises(InvalidParameterError) as error:
        EngineConfig(**{"speculative_method": "ngram", **kwargs})
    assert error.value.parameter == field


def test_speculation_is_off_by_default_and_requests_opt_in_by_default():
    assert EngineConfig().speculative_method is None
    assert EngineConfig().draft_model is None
    config = EngineConfig(speculative_method="draft", draft_model="/models/draft")
    assert config.draft_model == "/models/draft"
    with pytest.raises(InvalidParameterError) as error:
        EngineConfig(draft_model="/models/draft")  # speculation off: the model is unused
    assert error.value.parameter == "draft_model"
    assert SamplingParams().can_speculate is True
    with pytest.raises(InvalidParameterError) as error:
        SamplingParams(can_speculate="no")
    assert error.value.parameter == "can_speculate"
    assert SamplingParams.from_dict({"can_speculate": False}).can_speculate is False


def test_the_serve_command_takes_the_speculative_flags():
    from llmd.cli import main

    result = CliRunner().invoke(main, ["serve", "--help"])
    assert result.exit_code == 0
    for flag in ("--speculative-method", "--num-speculative-tokens", "--prompt-lookup-min",
                 "--prompt-lookup-max", "--draft-model"):  # fmt: skip
        assert flag in result.output
