"""A client's name for its request (e.g. an HTTP X-Request-Id), checked before it is used.

The daemon writes labels into its log lines and `llmd top` into its tables, so a label
is short and made of characters that can break neither: letters, digits and `-_.:/+=@`.
"""

from __future__ import annotations

import string

from llmd.errors import InvalidParameterError

MAX_LABEL_CHARS = 128
LABEL_CHARS = frozenset(string.ascii_letters + string.digits + "-_.:/+=@")
"""What a label may hold: enough for UUIDs, base64 and `service/trace:span` ids."""


def check_label(value: str, parameter: str = "label") -> None:
    """Raise InvalidParameterError naming `parameter` unless `value` is a valid label."""
    if not 0 < len(value) <= MAX_LABEL_CHARS:
        raise InvalidParameterError(
            f"must have 1 to {MAX_LABEL_CHARS} characters, got {len(value)}", parameter
        )
    bad = sorted(set(value) - LABEL_CHARS)
    if bad:
        raise InvalidParameterError(
            f"may hold only letters, digits and -_.:/+=@, not {bad[0]!r}", parameter
        )
