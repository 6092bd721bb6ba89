"""Server-sent events framing for streamed completions: `data: JSON` blocks, then [DONE].

OpenAI's SDKs read exactly this framing, and an error after the stream started goes out
as a `data: {"error": ...}` event, which they raise as an APIError.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

DONE = b"data: [DONE]\n\n"
MEDIA_TYPE = "text/event-stream"
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def event(data: Mapping[str, object]) -> bytes:
    """One SSE event carrying `data` as compact JSON."""
    return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"
