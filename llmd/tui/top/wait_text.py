"""The words `llmd top` uses for why a request waited: reasons, seconds, chunks, hits.

Pure functions of a WaitBreakdown, shared by the timeline panel and the tests; reasons
keep their wire names (llmd.wait_breakdown), the same ones the hints use.
"""

from __future__ import annotations

from itertools import groupby

from rich.text import Text

from llmd.tui.formatting import fmt_seconds
from llmd.wait_breakdown import KV_BLOCKS, MAX_NUM_SEQS, PREEMPTED, TOKEN_BUDGET, WaitBreakdown

REASON_STYLES = {
    KV_BLOCKS: "bold red",
    PREEMPTED: "red",
    MAX_NUM_SEQS: "bold magenta",
    TOKEN_BUDGET: "bold yellow",
}
"""How each reason is drawn (queue stays plain: it is the others' consequence)."""


def plural(count: int, noun: str) -> str:
    """'1 chunk', '3 chunks'."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def waits_text(waits: WaitBreakdown, waiting_on: str | None) -> Text:
    """'waited 1.2s: kv_blocks 900ms, queue 300ms · budget taken by req-3 · now kv_blocks'."""
    text = Text(f"waited {fmt_seconds(waits.total_wait_s)}")
    reasons = sorted(
        (name for name, seconds in waits.wait_s.items() if seconds > 0),
        key=lambda name: -waits.wait_s[name],
    )
    for index, name in enumerate(reasons):
        text.append(": " if index == 0 else ", ")
        text.append(name, style=REASON_STYLES.get(name, ""))
        text.append(f" {fmt_seconds(waits.wait_s[name])}")
    if waits.token_budget_taken_by is not None and waits.wait_s.get(TOKEN_BUDGET, 0) > 0:
        text.append(f" · budget taken by {waits.token_budget_taken_by}", style="dim")
    if waiting_on is not None:
        text.append(" · now ")
        text.append(waiting_on, style=REASON_STYLES.get(waiting_on, "bold"))
    return text


def chunk_sizes_text(waits: WaitBreakdown) -> str:
    """The chunk sizes, repeats folded: '30×8', '5×7+5', '32+20+72'; '+…' when cut short."""
    parts = []
    for size, run in groupby(waits.prefill_chunk_sizes):
        count = len(list(run))
        parts.append(f"{count}×{size}" if count > 1 else str(size))
    if waits.num_prefill_chunks > len(waits.prefill_chunk_sizes):
        parts.append("…")
    return "+".join(parts)


def prefill_text(waits: WaitBreakdown) -> str:
    """'3 prefill chunks (32+20+72) · 16 cached · 1 preemption'."""
    sizes = chunk_sizes_text(waits)
    chunks = plural(waits.num_prefill_chunks, "prefill chunk") + (f" ({sizes})" if sizes else "")
    return (
        f"{chunks} · {waits.num_cached_tokens} cached · "
        f"{plural(waits.num_preemptions, 'preemption')}"
    )
