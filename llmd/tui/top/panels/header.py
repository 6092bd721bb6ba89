"""The top line(s): which daemon, its model, device and sizes, uptime, policy, the link state."""

from __future__ import annotations

import dataclasses
from typing import Any

from rich.console import RenderableType
from rich.text import Text

from llmd.client.status_report import kv_token_text, weight_size_text
from llmd.protocol.stats_snapshot import DaemonSection
from llmd.tui.formatting import MISSING, fmt_uptime, truncate
from llmd.tui.top.panels.base import Panel, join_lines
from llmd.tui.top.view import ConnectionView, TopView


def connection_text(connection: ConnectionView, address: str) -> Text:
    """'● live', '❚❚ paused', or why the daemon is unreachable and when the retry is."""
    if connection.is_paused:
        return Text("❚❚ paused (p resumes)", style="bold yellow")
    if connection.status == "live":
        return Text("● live", style="bold green")
    if connection.status == "connecting":
        return Text(f"○ connecting to {address}…", style="yellow")
    retry = "" if connection.retry_in_s is None else f", retrying in {connection.retry_in_s:.1f}s"
    age = connection.last_update_age_s
    last = "" if age is None else f", last snapshot {fmt_uptime(age)} ago"
    return Text(
        f"✗ daemon gone{retry} (attempt {connection.num_attempts}{last}): {connection.message}",
        style="bold red",
    )


def policy_text(header: DaemonSection, is_compact: bool = False) -> str:
    """'fcfs, budget 2048 tok/step, ≤256 seqs' ('fcfs 2048 tok/step ≤256 seqs' compact)."""
    policy = header.scheduling_policy or MISSING
    budget = header.max_num_batched_tokens
    text = f"{policy} {budget} tok/step" if is_compact else f"{policy}, budget {budget} tok/step"
    return text + f"{' ' if is_compact else ', '}≤{header.max_num_seqs} seqs"


SHORT_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "fp8"}
SEPARATOR = " │ "


def facts_of(header: DaemonSection, is_compact: bool) -> list[str]:
    """Model name, device/dtype, memory sizes, uptime and policy (dtype and policy
    abbreviated if compact)."""
    model = header.model or MISSING
    dtype = header.dtype or MISSING
    if is_compact:
        dtype = SHORT_DTYPES.get(dtype, dtype)
    if header.kv_cache_dtype and header.kv_cache_dtype != header.dtype:  # e.g. an fp8 cache
        kv_dtype = SHORT_DTYPES.get(header.kv_cache_dtype, header.kv_cache_dtype)
        dtype += f" kv {kv_dtype}"
    if header.quantization:  # the scheme, e.g. "w4a16-g128" of "awq w4a16-g128"
        dtype += f" {header.quantization.rsplit(' ', 1)[-1]}"
    return [
        model.rstrip("/").rsplit("/", 1)[-1],  # the name, not where it lives on disk
        f"{header.device or MISSING}/{dtype}",
        sizes_text(header, is_compact),
        f"up {fmt_uptime(header.uptime_s)}",
        policy_text(header, is_compact),
    ]


def sizes_text(header: DaemonSection, is_compact: bool = False) -> str:
    """'weights 96.3 MB, kv 1024 B/token' ('96.3 MB, kv 1024 B/token' compact; the weights
    left out where the daemon did not say).

    Worded by the functions `llmd status` prints with, so the two screens agree.
    """
    kv = f"kv {kv_token_text(header.kv_token_bytes)}"
    if not header.weight_bytes:
        return kv
    weights = weight_size_text(header.weight_bytes)
    return f"{weights}, {kv}" if is_compact else f"weights {weights}, {kv}"


def flow(items: list[Text], width: int) -> list[Text]:
    """`items` joined by ' │ ' into as few lines of `width` as whole items allow (an item
    wider than a line alone is cut with an ellipsis)."""
    lines: list[Text] = []
    for item in items:
        if lines and lines[-1].cell_len + len(SEPARATOR) + item.cell_len <= width:
            lines[-1].append(SEPARATOR)
            lines[-1].append_text(item)
        else:
            lines.append(item.copy())
    for line in lines:
        line.truncate(width, overflow="ellipsis")
    return lines


class HeaderPanel(Panel):
    """Model, device, dtype, sizes, address, uptime, scheduling policy, token budget, link state.

    The facts abbreviate, then wrap onto a second line, before anything is cut.
    """

    FITS_CONTENT = True

    def __init__(self, address: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.address = address

    def state_of(self, view: TopView) -> object:
        """What the header shows: uptime in whole seconds, the link's age only once lost."""
        header = view.header
        if header is not None:
            header = dataclasses.replace(header, uptime_s=int(header.uptime_s))
        connection = view.connection
        if connection.status == "live":
            connection = dataclasses.replace(connection, last_update_age_s=None)
        return header, connection

    def needed_lines(self, view: TopView, width: int) -> int:
        return len(self.lines(view, width))

    def render(self) -> RenderableType:
        size = self.content_size
        view = self.view or TopView()
        return self.draw(view, max(1, size.width), max(1, size.height))

    def draw(self, view: TopView, width: int, height: int) -> Text:
        return join_lines(self.lines(view, width), height)

    def lines(self, view: TopView, width: int) -> list[Text]:
        """The header's lines at `width`: the facts (with the link state on a short screen),
        then on a tall screen where it is served from and the link state."""
        width = max(1, width)
        is_tall = self.screen.has_class("-tall")
        status = connection_text(view.connection, self.address)
        title = Text("llmd top", style="bold")
        header = view.header
        if not view.has_snapshot or header is None:
            return flow([Text(" ").join([title, status])], width)
        lead = title if is_tall else Text(" ").join([title, status])
        engine: list[Text] = []
        state = header.state or MISSING
        if state != "ok":
            reason = f": {header.error}" if header.error else ""
            engine = [Text(f"engine {state}{reason}", style="bold red")]
        lines = []
        for is_compact in (False, True):
            facts = [Text(fact) for fact in facts_of(header, is_compact)]
            lines = flow([lead, *engine, *facts], width)
            if len(lines) == 1:
                break
        if len(lines) > 1 and not is_tall:  # one line short of room: the link state leads, no title
            lines = flow([status, *engine, *facts], width)
        if is_tall:
            lines.append(self._where_line(header, status, width))
        return lines

    def _where_line(self, header: DaemonSection, status: Text, width: int) -> Text:
        """'ipc://… · v0.1.0 · triton attention · NVIDIA H100  ● live' (the address cut first)."""
        details = [header.address or self.address, f"v{header.version or MISSING}"]
        if header.attention_backend:
            details.append(f"{header.attention_backend} attention")
        if header.device_name and header.device_name != header.device:
            details.append(header.device_name)
        where = truncate(" · ".join(details), max(width // 2, width - len(status.plain) - 2))
        line = Text(where, style="dim")
        line.append("  ")
        line.append_text(status)
        line.truncate(width, overflow="ellipsis")
        return line
