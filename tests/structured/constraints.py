"""Constraints the structured-output tests share, each with the check its outputs must pass."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import jsonschema

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}
PHONE = r"[0-9]{3}-[a-z]{2,4}"
ANSWERS = ["yes", "no", "maybe"]


def check_output(spec: dict, text: str) -> None:
    """Raise AssertionError unless `text` satisfies the constraint `spec`."""
    ((kind, value),) = spec.items()
    if kind == "json":
        try:
            jsonschema.validate(json.loads(text), value)
        except (ValueError, jsonschema.ValidationError) as error:
            raise AssertionError(f"{text!r} does not validate: {error}") from None
    elif kind == "regex":
        assert re.fullmatch(value, text), f"{text!r} does not match {value!r}"
    elif kind == "choice":
        assert text in value, f"{text!r} is not one of {value}"
    elif kind == "json_object":
        assert isinstance(json.loads(text), dict), f"{text!r} is not a JSON object"
    else:
        raise AssertionError(f"no check for {kind}")


BASIC: list[dict] = [{"json": PERSON}, {"regex": PHONE}, {"choice": ANSWERS}]
Checker = Callable[[dict, str], None]
