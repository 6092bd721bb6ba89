"""The line under each reply: time to first token, decode speed, tokens and finish reason.

Shared by the chat screen and the one-shot mode's `--stats` so both report a reply the
same way, from the daemon's own timings rather than from client-side clocks.
"""

from __future__ import annotations

from typing import Any

from llmd.tui.formatting import fmt_seconds


def tokens_per_second(timings: dict[str, Any], num_completion_tokens: int) -> float | None:
    """Decode speed: output tokens after the first, per second (None for a single token)."""
    tpot = timings.get("tpot")
    if tpot:
        return 1.0 / tpot
    decode_s = timings.get("decode")
    if decode_s and num_completion_tokens > 1:
        return (num_completion_tokens - 1) / decode_s
    return None


def format_reply_stats(
    finish_reason: str,
    usage: dict[str, Any],
    timings: dict[str, Any],
    num_preemptions: int = 0,
) -> str:
    """'TTFT 45.1ms · 38.2 tok/s · 64 tokens · length', plus cache and preemption notes."""
    num_tokens = int(usage.get("completion_tokens", 0))
    rate = tokens_per_second(timings, num_tokens)
    parts = [
        f"TTFT {fmt_seconds(timings.get('ttft'))}",
        "- tok/s" if rate is None else f"{rate:.1f} tok/s",
        f"{num_tokens} token" + ("" if num_tokens == 1 else "s"),
        finish_reason,
    ]
    num_cached = int(usage.get("cached_tokens", 0))
    if num_cached:
        parts.append(f"{num_cached} prompt tokens cached")
    if num_preemptions:
        parts.append(f"preempted {num_preemptions}×")
    return " · ".join(parts)
