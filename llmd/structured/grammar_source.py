"""A `StructuredOutputs` constraint as an llguidance grammar, and its check without a model.

llguidance (Rust, no Python dependencies) is the one grammar backend: it builds JSON
schemas, regexes and Lark grammars alike, computes a token mask in microseconds and needs
no torch, so the HTTP process can refuse a bad schema with a 400 before the engine sees it.
"""

from __future__ import annotations

import json

from llmd.errors import InvalidParameterError
from llmd.structured_outputs import FIELD, StructuredOutputs

JSON_OPTIONS = {"whitespace_flexible": False}
"""Compact JSON (`,` and `:` with no whitespace): what models write and what parses; free
whitespace lets a sampled output wander in blanks until max_tokens cuts it off."""

ANY_JSON_OBJECT = {"type": "object"}


def grammar_source(spec: StructuredOutputs) -> str:
    """The llguidance grammar (its serialized form) that accepts exactly `spec`'s outputs."""
    import llguidance

    kind = spec.kind
    try:
        if kind == "json":
            return llguidance.LLMatcher.grammar_from_json_schema(spec.json, defaults=JSON_OPTIONS)
        if kind == "json_object":
            return llguidance.LLMatcher.grammar_from_json_schema(
                ANY_JSON_OBJECT, defaults=JSON_OPTIONS
            )
    except ValueError as error:
        raise InvalidParameterError(
            f"is not a usable JSON schema: {error}", f"{FIELD}.{kind}"
        ) from None
    if kind == "regex":
        return llguidance.LLMatcher.grammar_from_regex(spec.regex or "")
    if kind == "choice":
        alternatives = " | ".join(json.dumps(option) for option in spec.choice or ())
        return llguidance.LLMatcher.grammar_from_lark(f"start: {alternatives}")
    return llguidance.LLMatcher.grammar_from_lark(spec.grammar or "")


def check_grammar(spec: StructuredOutputs) -> str:
    """`spec`'s grammar source, or an InvalidParameterError naming the field and the reason.

    Checks the grammar itself (regex syntax, schema features, unsatisfiable bounds), not
    its use with a tokenizer, so it runs anywhere llguidance is installed.
    """
    import llguidance

    source = grammar_source(spec)
    message = llguidance.LLMatcher.validate_grammar(source)
    if message:
        kind = spec.kind
        raise InvalidParameterError(
            f"is invalid or not supported: {message.strip()}", f"{FIELD}.{kind}"
        )
    return source
