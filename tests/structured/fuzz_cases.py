"""The validity fuzz's constraints: 24 JSON schemas, 10 regexes and 6 choice lists.

Every constraint is bounded (maxLength, maxItems, enums, bounded integers, patterns with
bounded repetition), so a sampled output always completes well within `MAX_TOKENS`: an
output cut by the token limit is a failure of the fuzz, not an expected outcome.
"""

from __future__ import annotations

import json

MAX_TOKENS = 400
"""Room for the longest output any case allows even if every string character came as a
six-character `\\uXXXX` escape, one token per character (the book schema: under 350); the
model's real outputs take at most ~90. The prompt and this fit the 512-token context."""

PROMPTS = [
    "Once upon a time",
    "Tell me about a cat.",
    "What is the capital of France?",
    "Write a story about a dog and a ball.",
    "1 + 2 =",
    "The red fox",
    "Who are you?",
]
"""Seven prompts: coprime with the number of cases, so each case meets every prompt."""


def _object(properties: dict, required: list[str] | None = None) -> dict:
    """A closed object schema: all listed (or the given) properties required."""
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
        "additionalProperties": False,
    }


NAME = {"type": "string", "minLength": 1, "maxLength": 10}
SMALL_INT = {"type": "integer", "minimum": 0, "maximum": 99}

SCHEMAS: list[dict] = [
    _object({"name": NAME}),
    _object({"age": {"type": "integer", "minimum": 0, "maximum": 120}}),
    _object({"ok": {"type": "boolean"}}),
    _object({"color": {"enum": ["red", "green", "blue"]}}),
    _object({"code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{3}$"}}),
    _object({"score": {"type": "integer", "minimum": -50, "maximum": 50}}),
    _object({"temp": {"type": "integer", "minimum": -40, "maximum": 45}, "unit": {"const": "C"}}),
    _object({"tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 4}}),
    _object(
        {"ids": {"type": "array", "items": SMALL_INT, "minItems": 1, "maxItems": 5}},
    ),
    _object({"words": {"type": "array", "items": NAME, "maxItems": 3}}),
    _object(
        {
            "user": _object({"name": NAME, "age": SMALL_INT}),
            "active": {"type": "boolean"},
        }
    ),
    _object(
        {
            "point": _object({"x": SMALL_INT, "y": SMALL_INT}),
            "label": {"type": "string", "maxLength": 6},
        }
    ),
    _object(
        {
            "items": {
                "type": "array",
                "items": _object(
                    {
                        "sku": {"type": "string", "pattern": "^[a-z]{3}-[0-9]{2}$"},
                        "qty": {"type": "integer", "minimum": 1, "maximum": 9},
                    }
                ),
                "maxItems": 3,
            }
        }
    ),
    _object(
        {
            "a": _object({"b": _object({"c": {"enum": [1, 2, 3]}})}),
        }
    ),
    _object(
        {
            "name": NAME,
            "nickname": {"type": "string", "maxLength": 8},
        },
        required=["name"],
    ),
    _object(
        {
            "kind": {"enum": ["cat", "dog", "bird"]},
            "legs": {"type": "integer", "minimum": 0, "maximum": 4},
            "can_fly": {"type": "boolean"},
        }
    ),
    _object({"value": {"anyOf": [SMALL_INT, {"type": "boolean"}, {"enum": ["none"]}]}}),
    _object({"maybe": {"anyOf": [{"type": "null"}, NAME]}}),
    _object(
        {
            "matrix": {
                "type": "array",
                "maxItems": 3,
                "items": {"type": "array", "items": {"enum": [0, 1]}, "maxItems": 3},
            }
        }
    ),
    _object(
        {
            "date": {"type": "string", "pattern": "^20[0-9]{2}-(0[1-9]|1[0-2])-[0-2][0-9]$"},
            "weekday": {"enum": ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]},
        }
    ),
    {"type": "array", "items": {"enum": ["x", "y", "z"]}, "minItems": 1, "maxItems": 6},
    {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "maxItems": 8},
    {"enum": ["alpha", "beta", "gamma", 7, True, None]},
    _object(
        {
            "title": {"type": "string", "minLength": 2, "maxLength": 16},
            "pages": {"type": "integer", "minimum": 1, "maximum": 999},
            "genre": {"enum": ["fairy tale", "fable", "poem"]},
            "authors": {"type": "array", "items": NAME, "minItems": 1, "maxItems": 2},
            "meta": _object(
                {
                    "rating": {"type": "integer", "minimum": 1, "maximum": 5},
                    "is_new": {"type": "boolean"},
                }
            ),
        }
    ),
]

REGEXES: list[str] = [
    r"[0-9]{3}-[0-9]{4}",
    r"[a-z]{1,8}",
    r"(yes|no), [a-z]{2,5}",
    r"[A-Z][a-z]{1,9} [A-Z][a-z]{1,9}",
    r"#[0-9a-f]{6}",
    r"(0|[1-9][0-9]{0,2})\.[0-9]{1,2}",
    r"[a-z]{2,6}@[a-z]{2,6}\.(com|org)",
    r"(ab|cd){1,4}x?",
    r"\d{4}-\d{2}-\d{2}",
    r"(the|a) (cat|dog|bird) (ran|sat|sang)\.",
]

CHOICES: list[list[str]] = [
    ["yes", "no"],
    ["red", "green", "blue", "yellow"],
    ["cat", "category", "catalog"],
    ["Paris", "London", "Rome", "Berlin", "Madrid"],
    ["1", "2", "3", "10", "100"],
    ["positive", "negative", "neutral"],
]

SPECS: list[dict] = (
    [{"json": schema} for schema in SCHEMAS]
    + [{"regex": regex} for regex in REGEXES]
    + [{"choice": choice} for choice in CHOICES]
)
"""Every fuzz constraint, in the request-map form (`structured_outputs=`)."""


def spec_of(index: int) -> dict:
    """The constraint of the fuzz's `index`-th request: the cases in turn."""
    return SPECS[index % len(SPECS)]


def prompt_of(index: int) -> str:
    """The prompt of the fuzz's `index`-th request."""
    return PROMPTS[index % len(PROMPTS)]


def describe(spec: dict) -> str:
    """A short name of a constraint for failure messages."""
    ((kind, value),) = spec.items()
    return f"{kind}:{json.dumps(value)[:60]}"
