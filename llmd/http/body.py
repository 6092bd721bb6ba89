"""Reading a JSON request body: content type, size limit and syntax checked, each a 4xx.

A body over the limit is read to its end (up to a hard cap) and thrown away, so the
client sees the 413 instead of a connection reset while it is still sending.
"""

from __future__ import annotations

import json

from starlette.requests import Request

from llmd.http.errors import HttpError, bad_request

MAX_DISCARDED_BYTES = 256 * 1024 * 1024
"""Beyond this much of an oversized body the connection is simply dropped."""


async def read_json(request: Request, max_bytes: int) -> object:
    """The decoded JSON body, or an HttpError: 415 wrong type, 413 too large, 400 malformed."""
    content_type = request.headers.get("content-type", "")
    if content_type.split(";")[0].strip().lower() != "application/json":
        raise HttpError(
            415,
            f"the body must be JSON (Content-Type: application/json), got {content_type!r}",
            None,
            code="unsupported_media_type",
        )
    chunks: list[bytes] = []
    num_bytes = 0
    async for chunk in request.stream():
        num_bytes += len(chunk)
        if num_bytes <= max_bytes:
            chunks.append(chunk)
        elif num_bytes > MAX_DISCARDED_BYTES:
            break
    if num_bytes > max_bytes:
        raise HttpError(
            413,
            f"the body has {num_bytes}{'+' if num_bytes > MAX_DISCARDED_BYTES else ''} bytes; "
            f"the limit is {max_bytes}",
            None,
            code="request_too_large",
            headers={"Connection": "close"},
        )
    try:
        return json.loads(b"".join(chunks))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise bad_request(f"the body is not valid JSON: {error}", None) from None
