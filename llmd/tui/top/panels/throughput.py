"""Throughput: prompt and generated tokens per second, with their recent history.

On a narrow screen the efficiency panel is hidden and its two key numbers fold in here.
"""

from __future__ import annotations

from rich.text import Text

from llmd.tui.formatting import MISSING, fmt_number, fmt_percent, sparkline
from llmd.tui.top.panels.base import Panel, join_lines
from llmd.tui.top.view import ThroughputView, TopView


class ThroughputPanel(Panel):
    """Prompt and generation tokens/s over the window, sparklines per snapshot interval."""

    TITLE = "Throughput"

    def state_of(self, view: TopView) -> object:
        return view.throughput, view.efficiency

    def draw(self, view: TopView, width: int, height: int) -> Text:
        throughput = view.throughput
        label_width = 10 if width >= 34 else 7
        spark_width = max(0, width - label_width - 12)
        lines = []
        for label, value, history, style in (
            ("prompt", throughput.prompt_tokens_per_s, throughput.prompt_history, "yellow"),
            ("generated", throughput.generation_tokens_per_s, throughput.generation_history,
             "green"),
        ):  # fmt: skip
            line = Text(label[: label_width - 1].ljust(label_width), style="dim")
            line.append(f"{fmt_number(value):>5} tok/s ", style=f"bold {style}")
            line.append(sparkline(history, spark_width), style=style)
            lines.append(line)
        lines.append(
            Text(f"{'requests'.ljust(label_width)}{fmt_number(throughput.requests_per_s):>5} /s",
                 style="dim")
        )  # fmt: skip
        if throughput.is_speculating:
            lines.append(speculation_line(throughput, width, label_width))
        if self.screen.has_class("-narrow"):
            lines += self._efficiency_lines(view)
        lines.append(
            Text(
                f"total {fmt_number(throughput.total_prompt_tokens)} prompt, "
                f"{fmt_number(throughput.total_generation_tokens)} generated",
                style="dim",
            )
        )
        for line in lines:
            line.truncate(width, overflow="ellipsis")
        return join_lines(lines, height)

    @staticmethod
    def _efficiency_lines(view: TopView) -> list[Text]:
        """Busy share and achieved decode bandwidth / prefill FLOP/s in two short lines."""
        efficiency = view.efficiency
        busy = Text(f"busy {fmt_percent(efficiency.busy_fraction)}", style="bold")
        busy.append(f" · decode {fmt_number(efficiency.decode_gb_per_s)} GB/s")
        busy.append(
            peak_note(
                efficiency.decode_gb_per_s,
                efficiency.peak_gb_per_s,
                efficiency.best_decode_gb_per_s,
            ),
            style="dim",
        )
        prefill = Text(f"prefill {fmt_number(efficiency.prefill_tflop_per_s)} TFLOP/s")
        prefill.append(
            peak_note(
                efficiency.prefill_tflop_per_s,
                efficiency.peak_tflop_per_s,
                efficiency.best_prefill_tflop_per_s,
            ),
            style="dim",
        )
        return [busy, prefill]


def speculation_line(throughput: ThroughputView, width: int, label_width: int) -> Text:
    """Acceptance, tokens per verify step and per decode step over the window, spelled out
    where the panel is wide enough (the figures stay, the words shorten, where it is not)."""
    rate = fmt_percent(throughput.spec_acceptance_rate)
    per_verify = _two_places(throughput.spec_mean_acceptance_length)
    per_step = _two_places(throughput.spec_tokens_per_step)
    window = throughput.spec_window_s
    words = (f"{rate} accepted · {per_verify} tok/verify · ", f"{per_step} tok/step")
    if label_width + sum(map(len, words)) > width:
        words = (f"{rate} acc · {per_verify}/verify · ", f"{per_step}/step")
    line = Text("spec".ljust(label_width), style="dim")
    line.append(words[0], style="dim")
    line.append(words[1], style="bold")
    if window and label_width + sum(map(len, words)) + 6 <= width:
        line.append(f" ({window:.0f}s)", style="dim")
    return line


def _two_places(value: float | None) -> str:
    """A tokens-per-step figure to two decimals, or "-" while the window has none."""
    return MISSING if value is None else f"{value:.2f}"


def peak_note(achieved: float | None, peak: float | None, best: float | None = None) -> str:
    """' (12% of peak)', or ' (80% of best)' against the best seen when no peak is known."""
    if achieved is None:
        return ""
    if peak:
        return f" ({fmt_percent(achieved / peak)} of peak)"
    if best:
        return f" ({fmt_percent(achieved / best)} of best)"
    return ""
