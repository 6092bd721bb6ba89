"""Per-request sampling and stopping parameters.

Pure standard library so that the protocol, the client and the scheduler can build and
validate them without importing torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from llmd.errors import InvalidParameterError, require

MAX_LOGPROBS = 20


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
    skip_special_tokens: bool = True
    """Leave special tokens out of the detokenized text."""

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        elif not isinstance(self.stop, tuple):
            object.__setattr__(self, "stop", tuple(self.stop))
        if not isinstance(self.stop_token_ids, tuple):
            object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        self._validate()

    def _validate(self) -> None:
        _check_number("temperature", self.temperature)
        require(self.temperature >= 0, "temperature", f"must be >= 0, got {self.temperature}")
        _check_int("top_k", self.top_k)
        require(self.top_k >= 0 or self.top_k == -1, "top_k", f"must be >= 0, got {self.top_k}")
        _check_number("top_p", self.top_p)
        require(0 < self.top_p <= 1, "top_p", f"must be in (0, 1], got {self.top_p}")
        _check_number("min_p", self.min_p)
        require(0 <= self.min_p <= 1, "min_p", f"must be in [0, 1], got {self.min_p}")
        if self.seed is not None:
            _check_int("seed", self.seed)
            require(0 <= self.seed < 2**63, "seed", "must be in [0, 2**63)")
        _check_number("repetition_penalty", self.repetition_penalty)
        require(self.repetition_penalty > 0, "repetition_penalty", "must be > 0")
        _check_number("presence_penalty", self.presence_penalty)
        require(-2 <= self.presence_penalty <= 2, "presence_penalty", "must be in [-2, 2]")
        _check_number("frequency_penalty", self.frequency_penalty)
        require(-2 <= self.frequency_penalty <= 2, "frequency_penalty", "must be in [-2, 2]")
        _check_int("max_tokens", self.max_tokens)
        require(self.max_tokens >= 1, "max_tokens", f"must be >= 1, got {self.max_tokens}")
        _check_int("min_tokens", self.min_tokens)
        require(
            0 <= self.min_tokens <= self.max_tokens,
            "min_tokens",
            f"must be in [0, max_tokens={self.max_tokens}], got {self.min_tokens}",
        )
        for text in self.stop:
            require(isinstance(text, str) and text != "", "stop", "stop strings must be non-empty")
        for token_id in self.stop_token_ids:
            _check_int("stop_token_ids", token_id)
            require(token_id >= 0, "stop_token_ids", "token ids must be >= 0")
        require(isinstance(self.ignore_eos, bool), "ignore_eos", "must be a boolean")
        if self.logprobs is not None:
            _check_int("logprobs", self.logprobs)
            require(
                0 <= self.logprobs <= MAX_LOGPROBS,
                "logprobs",
                f"must be in [0, {MAX_LOGPROBS}], got {self.logprobs}",
            )
        require(
            isinstance(self.skip_special_tokens, bool), "skip_special_tokens", "must be a boolean"
        )

    @property
    def is_greedy(self) -> bool:
        """True when the next token is the argmax (temperature 0)."""
        return self.temperature == 0.0

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
        data = dataclasses.asdict(self)
        data["stop"] = list(self.stop)
        data["stop_token_ids"] = list(self.stop_token_ids)
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


def _check_number(name: str, value: Any) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    require(ok and value == value, name, f"must be a number, got {value!r}")


def _check_int(name: str, value: Any) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool)
    require(ok, name, f"must be an integer, got {value!r}")
