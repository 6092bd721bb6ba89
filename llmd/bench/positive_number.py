"""A positive number read from a flag's text, or a typed error naming the flag.

Request rates and SLO targets are both positive floats typed by hand; one reader keeps
"not a number" and "not positive" refused the same way for each.
"""

from __future__ import annotations

from llmd.errors import InvalidParameterError


def positive_number(text: str, parameter: str, not_a_number: str, not_positive: str) -> float:
    """`text` as a float above 0 (inf included); else InvalidParameterError with a message."""
    try:
        number = float(text)
    except ValueError:
        raise InvalidParameterError(not_a_number, parameter) from None
    if not number > 0:
        raise InvalidParameterError(not_positive, parameter)
    return number
