"""Per-request sampling and stopping parameters.

Pure standard library so that the protocol, the client and the scheduler can build and
validate them without importing torch.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from llmd.errors import InvalidParameterError, require
from llmd.structured_outputs import StructuredOutputs

MAX_LOGPROBS = 20
MAX_TEMPERATURE = 100.0
"""Beyond this sampling is uniform anyway; far beyond, float32 logits / temperature break."""
MIN_REPETITION_PENALTY = 0.01
MAX_REPETITION_PENALTY = 100.0
"""Penalties outside these scale logits into float32 overflow (inf, then NaN probabilities)."""
MAX_INT32 = 2**31 - 1
"""Bound of counts and token ids: larger values are nonsense and overflow device tensors."""


@dataclass(frozen=True)
class SamplingParams:
    """How to pick each next token and when to stop; validated on construction."""

    temperature: float = 1.0
    """Softmax temperature; 0 means greedy (argmax)."""
    top_k: int = 0
    """Keep only the k most likely tokens; 0 disables."""
    top_p: float = 1.0
    """Keep the smallest set of tokens whose probability mass reaches p; 1 disables."""
    min_p: float = 0.0
    """Drop tokens less likely than min_p times the most likely one; 0 disables."""
    seed: int | None = None
    """Per-request seed: the same seed gives the same tokens whatever else is batched."""
    repetition_penalty: float = 1.0
    """Divide positive (multiply negative) logits of tokens already seen; 1 disables."""
    presence_penalty: float = 0.0
    """Subtract from logits of tokens that occur in the output so far."""
    frequency_penalty: float = 0.0
    """Subtract, times their count, from logits of tokens in the output so far."""
    max_tokens: int = 16
    """Maximum number of tokens to generate."""
    min_tokens: int = 0
    """EOS and stop token ids are suppressed until this many tokens are generated."""
    stop: tuple[str, ...] = ()
    """Stop strings; generation ends when the text contains one (it is not returned)."""
    stop_token_ids: tuple[int, ...] = ()
    """Extra token ids that end generation (the token is kept in token_ids, not in text)."""
    ignore_eos: bool = False
    """Keep generating past the model's EOS token (for benchmarks)."""
    logprobs: int | None = None
    """Return the log-probability of each sampled token and the top-N alternatives."""
    prompt_logprobs: int | None = None
    """Return, for each prompt token after the first, its log-probability and the top-N
    alternatives (computed in the prefill pass; such a request skips prefix-cache hits)."""
    skip_special_tokens: bool = True
    """Leave special tokens out of the detokenized text."""
    can_speculate: bool = True
    """Whether the engine may draft and verify several tokens a step for this request when
    it runs speculative decoding (the output is the same either way); false opts it out."""
    structured_outputs: StructuredOutputs | None = None
    """Constrain the output to a JSON schema, a regex, choices or a grammar (a map is
    accepted and converted); None for free text."""

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        else:
            object.__setattr__(self, "stop", _as_tuple("stop", self.stop))
        object.__setattr__(self, "stop_token_ids", _as_tuple("stop_token_ids", self.stop_token_ids))
        if self.structured_outputs is not None:
            structured = StructuredOutputs.from_dict(self.structured_outputs)
            object.__setattr__(self, "structured_outputs", structured)
        self._validate()

    def _validate(self) -> None:
        _check_number("temperature", self.temperature)
        require(self.temperature >= 0, "temperature", f"must be >= 0, got {self.temperature}")
        require(
            self.temperature <= MAX_TEMPERATURE,
            "temperature",
            f"must be <= {MAX_TEMPERATURE:g}, got {self.temperature}",
        )
        _check_int("top_k", self.top_k, -1, MAX_INT32)
        _check_number("top_p", self.top_p, 0.0, 1.0, is_low_open=True)
        _check_number("min_p", self.min_p, 0.0, 1.0)
        if self.seed is not None:
            _check_int("seed", self.seed, 0, 2**63 - 1)
        _check_number(
            "repetition_penalty",
            self.repetition_penalty,
            MIN_REPETITION_PENALTY,
            MAX_REPETITION_PENALTY,
        )
        _check_number("presence_penalty", self.presence_penalty, -2.0, 2.0)
        _check_number("frequency_penalty", self.frequency_penalty, -2.0, 2.0)
        _check_int("max_tokens", self.max_tokens, 1, MAX_INT32)
        _check_int("min_tokens", self.min_tokens, 0, MAX_INT32)
        require(
            self.min_tokens <= self.max_tokens,
            "min_tokens",
            f"must be in [0, max_tokens={self.max_tokens}], got {self.min_tokens}",
        )
        for text in self.stop:
            require(isinstance(text, str) and text != "", "stop", "stop strings must be non-empty")
        for token_id in self.stop_token_ids:
            _check_int("stop_token_ids", token_id, 0, MAX_INT32)
        require(isinstance(self.ignore_eos, bool), "ignore_eos", "must be a boolean")
        require(isinstance(self.can_speculate, bool), "can_speculate", "must be a boolean")
        if self.logprobs is not None:
            _check_int("logprobs", self.logprobs, 0, MAX_LOGPROBS)
        if self.prompt_logprobs is not None:
            _check_int("prompt_logprobs", self.prompt_logprobs, 0, MAX_LOGPROBS)
        require(
            isinstance(self.skip_special_tokens, bool), "skip_special_tokens", "must be a boolean"
        )
        require(
            not (self.ignore_eos and self.structured_outputs is not None),
            "ignore_eos",
            "cannot be combined with structured_outputs: the grammar decides where output ends",
        )

    @property
    def has_penalties(self) -> bool:
        """True when any repetition, presence or frequency penalty is active."""
        return (
            self.repetition_penalty != 1.0
            or self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the user fields, for the wire protocol."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["stop"] = list(self.stop)
        data["stop_token_ids"] = list(self.stop_token_ids)
        if self.prompt_logprobs is None:
            del data["prompt_logprobs"]  # older daemons refuse fields they do not know
        if self.structured_outputs is None:
            del data["structured_outputs"]  # the wire stays as it was for free text
        else:
            data["structured_outputs"] = self.structured_outputs.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SamplingParams:
        """Build from a wire dict; unknown keys raise a typed error naming them."""
        if not isinstance(data, dict):
            raise InvalidParameterError("must be a map", "sampling_params")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidParameterError(f"unknown field(s): {', '.join(unknown)}", unknown[0])
        return cls(**data)


def _as_tuple(name: str, value: Any) -> tuple:
    """A list or tuple field as a tuple; anything else names the field."""
    require(isinstance(value, (list, tuple)), name, f"must be a list, got {value!r}")
    return tuple(value)


def _check_number(
    name: str,
    value: Any,
    low: float = -math.inf,
    high: float = math.inf,
    is_low_open: bool = False,
) -> None:
    """Require a finite real number (an int is accepted) in [low, high], or (low, high]."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    require(ok, name, f"must be a number, got {value!r}")
    try:
        is_finite = math.isfinite(value)
    except OverflowError:  # an int too large for a float
        is_finite = False
    require(is_finite, name, f"must be a finite number, got {value!r}")
    is_in_range = (low < value if is_low_open else low <= value) and value <= high
    bracket = "(" if is_low_open else "["
    require(is_in_range, name, f"must be in {bracket}{low:g}, {high:g}], got {value!r}")


def _check_int(name: str, value: Any, low: int, high: int) -> None:
    """Require an integer (not a bool) in [low, high]."""
    ok = isinstance(value, int) and not isinstance(value, bool)
    require(ok, name, f"must be an integer, got {value!r}")
    require(value >= low, name, f"must be >= {low}, got {value}")
    require(value <= high, name, f"must be <= {high}, got {value}")
