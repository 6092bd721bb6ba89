"""The top line(s): which daemon, its model and device, uptime, policy and the link state."""

from __future__ import annotations

import dataclasses

from rich.console import RenderableType
from rich.text import Text

from llmd.tui.formatting import MISSING, fmt_uptime, truncate
from llmd.tui.top.panels.base import Panel
from llmd.tui.top.view import ConnectionView, HeaderView, TopView


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


def policy_text(header: HeaderView) -> str:
    """'fcfs, budget 2048 tok/step, 256 seqs' with '-' for what the daemon did not send."""
    policy = header.scheduling_policy or MISSING
    budget = MISSING if header.max_num_batched_tokens is None else header.max_num_batched_tokens
    text = f"{policy}, budget {budget} tok/step"
    if header.max_num_seqs is not None:
        text += f", ≤{header.max_num_seqs} seqs"
    return text


class HeaderPanel(Panel):
    """Model, device, dtype, address, uptime, scheduling policy, token budget, link state."""

    def __init__(self, address: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.address = address

    def state_of(self, view: TopView) -> object:
        """What the header shows: uptime in whole seconds, the link's age only once lost."""
        uptime = view.header.uptime_s
        header = dataclasses.replace(view.header, uptime_s=None if uptime is None else int(uptime))
        connection = view.connection
        if connection.status == "live":
            connection = dataclasses.replace(connection, last_update_age_s=None)
        return header, connection

    def render(self) -> RenderableType:
        size = self.content_size
        view = self.view or TopView()
        return self.draw(view, max(1, size.width), max(1, size.height))

    def draw(self, view: TopView, width: int, height: int) -> RenderableType:
        header = view.header
        status = connection_text(view.connection, self.address)
        title = Text("llmd top", style="bold")
        if not view.has_snapshot:
            return Text(" ").join([title, status])
        model = header.model or MISSING
        device = f"{header.device or MISSING}/{header.dtype or MISSING}"
        state = header.state or MISSING
        facts = [
            model.rstrip("/").rsplit("/", 1)[-1],  # the name, not where it lives on disk
            device,
            f"up {fmt_uptime(header.uptime_s)}",
            policy_text(header),
        ]
        engine = Text()
        if state != "ok":
            reason = f": {header.error}" if header.error else ""
            engine = Text(f"engine {state}{reason} │ ", style="bold red")
        address = header.address or self.address
        if height == 1:
            line = Text(" ").join([title, status, Text("│"), engine + Text(" │ ".join(facts))])
            line.truncate(width, overflow="ellipsis")
            return line
        line = Text(" ").join([title, engine + Text(" │ ".join(facts))])
        line.truncate(width, overflow="ellipsis")
        details = [address, f"v{header.version or MISSING}"]
        if header.attention_backend:
            details.append(f"{header.attention_backend} attention")
        if header.device_name and header.device_name != header.device:
            details.append(header.device_name)
        where = truncate(" · ".join(details), max(width // 2, width - len(status.plain) - 2))
        second = Text(where, style="dim")
        second.append("  ")
        second.append_text(status)
        second.truncate(width, overflow="ellipsis")
        return Text("\n").join([line, second])
