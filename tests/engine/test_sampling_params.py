"""SamplingParams validation: every bad value is an InvalidParameterError naming its field."""

from __future__ import annotations

import dataclasses
import math

import pytest

from llmd.errors import InvalidParameterError
from llmd.sampling_params import SamplingParams

INF, NAN = math.inf, math.nan
FLOAT_FIELDS = [f.name for f in dataclasses.fields(SamplingParams) if f.type == "float"]


def test_float_fields_are_known():
    assert set(FLOAT_FIELDS) == {
        "temperature", "top_p", "min_p", "repetition_penalty", "presence_penalty",
        "frequency_penalty",
    }  # fmt: skip


@pytest.mark.parametrize("name", FLOAT_FIELDS)
@pytest.mark.parametrize(
    "value", [INF, -INF, NAN, 10**400, "1.0", True, None], ids=lambda value: repr(value)[:12]
)
def test_every_float_field_rejects_non_finite_and_non_numbers(name, value):
    with pytest.raises(InvalidParameterError) as error:
        SamplingParams(**{name: value})
    assert error.value.parameter == name and name in str(error.value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("temperature", -0.5),
        ("temperature", 1e300),  # overflows the sampler's float32 to inf
        ("temperature", 101.0),
        ("repetition_penalty", 1e-45),  # dividing logits by it overflows to inf
        ("repetition_penalty", 0.0),
        ("repetition_penalty", 1e9),
        ("presence_penalty", 2.5),
        ("frequency_penalty", -3),
        ("top_p", 0.0),
        ("min_p", 1.5),
        ("top_k", -2),
        ("top_k", 2**63),
        ("top_k", 2**31),
        ("max_tokens", 0),
        ("max_tokens", -1),
        ("max_tokens", 2**63),
        ("max_tokens", 2.0),
        ("seed", -1),
        ("seed", 2**63),
        ("logprobs", 2**63),
        ("logprobs", -1),
        ("stop_token_ids", [2**63]),
        ("stop_token_ids", [-1]),
        ("stop", [""]),
        ("stop", 5),
        ("stop", [3]),
        ("stop_token_ids", 7),
        ("ignore_eos", 1),
    ],
)
def test_absurd_values_are_rejected_naming_the_field(name, value):
    with pytest.raises(InvalidParameterError) as error:
        SamplingParams(**{name: value})
    assert error.value.parameter == name
    with pytest.raises(InvalidParameterError) as from_wire:
        SamplingParams.from_dict({name: value})
    assert from_wire.value.parameter == name


def test_min_tokens_bounds():
    with pytest.raises(InvalidParameterError) as error:
        SamplingParams(min_tokens=-1)
    assert error.value.parameter == "min_tokens"
    with pytest.raises(InvalidParameterError):
        SamplingParams(max_tokens=4, min_tokens=5)


@pytest.mark.parametrize(
    "params",
    [
        {"temperature": 0},
        {"temperature": 1e-9},  # below the sampler's greedy threshold: greedy, not overflow
        {"temperature": 100.0},
        {"repetition_penalty": 0.01},
        {"repetition_penalty": 100},
        {"presence_penalty": -2, "frequency_penalty": 2},
        {"top_k": -1, "top_p": 1e-6, "min_p": 1.0},
        {"max_tokens": 2**31 - 1, "min_tokens": 2**31 - 1},
        {"seed": 2**63 - 1, "stop_token_ids": [2**31 - 1], "logprobs": 20},
    ],
)
def test_edge_values_in_range_are_accepted(params):
    assert SamplingParams.from_dict(params).to_dict()["temperature"] == params.get(
        "temperature", 1.0
    )
