"""The attribute docstrings of a dataclass's fields, read from its source.

The config dataclasses document each field with the string under it, and the command-line
help is generated from those strings, so a flag's help is written once, next to its field.
"""

from __future__ import annotations

import ast
import functools
import inspect
import itertools
import textwrap


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Each documented field's docstring, whitespace collapsed to single spaces."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for field, after in itertools.pairwise(body):
        is_doc = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
        if isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name) and is_doc:
            docs[field.target.id] = " ".join(str(after.value.value).split())  # type: ignore[attr-defined]
    return docs
