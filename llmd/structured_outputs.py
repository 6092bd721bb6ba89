"""A request's output constraint: a JSON schema, any JSON object, a regex, choices or a grammar.

Pure standard library, like `SamplingParams` that carries it, so the HTTP process, the
client and the protocol can build and check it without importing torch or a grammar
library; the engine compiles it (`llmd/structured/`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from llmd.errors import InvalidParameterError, require

MAX_SPEC_CHARS = 1_000_000
"""Longest schema, regex or grammar text accepted: a bound on compile time and memory."""
MAX_CHOICES = 4096
"""Most choices in one list."""

FIELD = "structured_outputs"
"""The request field errors name (as `structured_outputs.<kind>`)."""

KINDS = ("json", "json_object", "regex", "choice", "grammar")
"""The constraint kinds, in the order the fields are declared."""


@dataclass(frozen=True)
class StructuredOutputs:
    """Exactly one constraint on the generated text; validated on construction.

    The output is the constrained text and nothing else: EOS (and the end of generation)
    is allowed exactly when the text is complete, and generation stops once nothing more
    can follow.
    """

    json: str | None = None
    """A JSON schema the output must validate against (a dict or JSON text on input; kept as
    canonical JSON text, the cache key of its compiled grammar)."""
    json_object: bool = False
    """The output is any JSON object (OpenAI's `response_format: json_object`)."""
    regex: str | None = None
    """A regular expression the whole output must match."""
    choice: tuple[str, ...] | None = None
    """The output is exactly one of these strings."""
    grammar: str | None = None
    """A Lark grammar (llguidance's dialect: `start: ...` rules, /regex/ terminals)."""

    def __post_init__(self) -> None:
        if self.json is not None and not isinstance(self.json, str):
            object.__setattr__(self, "json", canonical_schema(self.json))
        elif isinstance(self.json, str):
            object.__setattr__(self, "json", canonical_schema(_parse_schema_text(self.json)))
        if self.choice is not None:
            require(
                isinstance(self.choice, (list, tuple)),
                f"{FIELD}.choice",
                "must be a list of strings",
            )
            object.__setattr__(self, "choice", tuple(self.choice))
        self._validate()

    def _validate(self) -> None:
        require(isinstance(self.json_object, bool), f"{FIELD}.json_object", "must be a boolean")
        num_set = sum(1 for kind in KINDS if _is_set(getattr(self, kind)))
        require(
            num_set == 1,
            FIELD,
            f"set exactly one of {', '.join(KINDS)} (got {num_set})",
        )
        for kind in ("json", "regex", "grammar"):
            text = getattr(self, kind)
            if text is None:
                continue
            require(isinstance(text, str), f"{FIELD}.{kind}", "must be a string")
            require(text.strip() != "", f"{FIELD}.{kind}", "must not be empty")
            require(
                len(text) <= MAX_SPEC_CHARS,
                f"{FIELD}.{kind}",
                f"is {len(text)} characters; at most {MAX_SPEC_CHARS} are accepted",
            )
        if self.choice is not None:
            require(len(self.choice) > 0, f"{FIELD}.choice", "must list at least one string")
            require(
                len(self.choice) <= MAX_CHOICES,
                f"{FIELD}.choice",
                f"has {len(self.choice)} entries; at most {MAX_CHOICES} are accepted",
            )
            for option in self.choice:
                require(
                    isinstance(option, str) and option != "",
                    f"{FIELD}.choice",
                    f"entries must be non-empty strings, got {option!r}",
                )
            total = sum(len(option) for option in self.choice)
            require(
                total <= MAX_SPEC_CHARS, f"{FIELD}.choice", f"totals {total} characters; too long"
            )

    @property
    def kind(self) -> str:
        """Which constraint this is: one of KINDS."""
        return next(kind for kind in KINDS if _is_set(getattr(self, kind)))

    @property
    def cache_key(self) -> tuple[str, str]:
        """(kind, canonical text): equal constraints share one compiled grammar."""
        kind = self.kind
        if kind == "json_object":
            return kind, ""
        if kind == "choice":
            return kind, json.dumps(list(self.choice or ()))
        return kind, getattr(self, kind)

    def to_dict(self) -> dict[str, Any]:
        """The one field that is set, for the wire protocol."""
        kind = self.kind
        value = getattr(self, kind)
        return {kind: list(value) if kind == "choice" else value}

    @classmethod
    def from_dict(cls, data: Any) -> StructuredOutputs:
        """Build from a wire or API map; unknown keys raise a typed error naming them."""
        if isinstance(data, StructuredOutputs):
            return data
        if not isinstance(data, dict):
            raise InvalidParameterError("must be a map", FIELD)
        unknown = sorted(set(data) - set(KINDS))
        if unknown:
            raise InvalidParameterError(
                f"unknown field(s): {', '.join(unknown)} (known: {', '.join(KINDS)})",
                FIELD,
            )
        return cls(**data)


def canonical_schema(schema: Any) -> str:
    """A JSON schema (dict, or a bool schema) as compact JSON text with sorted keys."""
    require(
        isinstance(schema, (dict, bool)),
        f"{FIELD}.json",
        f"a JSON schema must be an object, got {type(schema).__name__}",
    )
    try:
        return json.dumps(schema, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as error:
        raise InvalidParameterError(f"is not JSON-serializable: {error}", f"{FIELD}.json") from None


def _parse_schema_text(text: str) -> Any:
    require(len(text) <= MAX_SPEC_CHARS, f"{FIELD}.json", f"is {len(text)} characters; too long")
    try:
        return json.loads(text)
    except ValueError as error:
        raise InvalidParameterError(f"is not valid JSON: {error}", f"{FIELD}.json") from None


def _is_set(value: Any) -> bool:
    return value is not None and value is not False
