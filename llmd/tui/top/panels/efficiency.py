"""Busy versus efficient: time in steps, and achieved bandwidth and FLOP/s against peak."""

from __future__ import annotations

from rich.text import Text

from llmd.tui.formatting import bar, fmt_number, fmt_percent
from llmd.tui.top.panels.base import Panel, join_lines, wrapped
from llmd.tui.top.view import EfficiencyView, TopView


def against_peak(
    achieved: float | None,
    peak: float | None,
    unit: str,
    width: int,
    best: float | None = None,
    source: str | None = None,
) -> Text:
    """'0.19 GB/s, 4% of 4.8k GB/s ██░░', or against the best seen when there is no peak."""
    text = Text(f"{fmt_number(achieved)} {unit}", style="bold")
    if achieved is None:
        return text
    if not peak:
        if best:
            text.append(f", {fmt_percent(achieved / best)} of the best seen ({fmt_number(best)})")
        text.append(" · no device peak", style="dim")
        return text
    share = achieved / peak
    kind = f"{source} peak " if source else ""
    text.append(f", {fmt_percent(share)} of {kind}{fmt_number(peak)} ")
    style = "green" if share >= 0.5 else "yellow" if share >= 0.2 else "red"
    text.append(bar((min(1.0, share),), "█", max(0, width - len(text.plain)), "░"), style=style)
    return text


def experts_line(efficiency: EfficiencyView, label_width: int) -> Text:
    """'experts  12.5 of 64 (20%) touched per step' for an MoE model."""
    text = Text("experts".ljust(label_width), style="dim")
    touched = efficiency.experts_touched_per_step
    text.append(f"{fmt_number(touched)} of {efficiency.num_expert_slots}", style="bold")
    if touched is not None:
        text.append(f" ({fmt_percent(touched / efficiency.num_expert_slots)})")
    text.append(" (layer, expert) pairs touched per step", style="dim")
    return text


class EfficiencyPanel(Panel):
    """Share of wall time spent stepping, decode GB/s and prefill TFLOP/s vs the device."""

    TITLE = "Efficiency"
    SECTION = "efficiency"
    IS_SLOW = True

    def draw(self, view: TopView, width: int, height: int) -> Text:
        efficiency = view.efficiency
        label_width = 9
        rest = max(0, width - label_width)
        busy = Text("busy".ljust(label_width), style="dim")
        busy.append(fmt_percent(efficiency.busy_fraction), style="bold")
        busy.append(" of wall time in steps", style="dim")
        decode = Text("decode".ljust(label_width), style="dim")
        decode.append_text(
            against_peak(
                efficiency.decode_gb_per_s,
                efficiency.peak_gb_per_s,
                "GB/s",
                rest,
                efficiency.best_decode_gb_per_s,
                efficiency.peak_source,
            )
        )
        prefill = Text("prefill".ljust(label_width), style="dim")
        prefill.append_text(
            against_peak(
                efficiency.prefill_tflop_per_s,
                efficiency.peak_tflop_per_s,
                "TFLOP/s",
                rest,
                efficiency.best_prefill_tflop_per_s,
                efficiency.peak_source,
            )
        )
        note = Text("decode: weight+KV bytes/s · prefill: 2·params·tok/s", style="dim")
        parts = [busy, decode, prefill]
        if efficiency.num_expert_slots:
            parts.append(experts_line(efficiency, label_width))
            note = Text(
                "decode: dense+touched experts'+KV bytes/s · prefill: 2·active params·tok/s",
                style="dim",
            )
        lines = wrapped([*parts, note], width, self.app.console)
        return join_lines(lines, height)
