"""Sort orders of the request table; live requests always come before finished ones."""

from __future__ import annotations

from collections.abc import Callable

from llmd.protocol.engine_sections import RequestRow

STATE_ORDER = {"running": 0, "preempted": 1, "waiting": 2, "finished": 3}


def _progress(row: RequestRow) -> float:
    """Prefill counts as the first half of a request's progress, decode as the second."""
    return (row.prefill_progress + row.decode_progress) / 2


SORT_FUNCTIONS: dict[str, Callable[[RequestRow], float]] = {
    "age": lambda row: -row.age_s,
    "state": lambda row: STATE_ORDER.get(row.state, len(STATE_ORDER)),
    "prompt": lambda row: -row.num_prompt_tokens,
    "generated": lambda row: -row.num_generated_tokens,
    "progress": lambda row: -_progress(row),
    "ttft": lambda row: -(row.ttft_s if row.ttft_s is not None else -1.0),
}
"""Sort key name -> the value rows are ordered by (ascending): oldest, largest, slowest first."""
SORT_KEYS = tuple(SORT_FUNCTIONS)


def sort_rows(rows: list[RequestRow], sort_key: str) -> list[RequestRow]:
    """Rows ordered by `sort_key`, live before finished; ties keep the daemon's order."""
    function = SORT_FUNCTIONS[sort_key]
    return sorted(rows, key=lambda row: (row.is_finished, function(row)))
