"""Prefill versus decode: tokens per step by kind over time, and where step time goes."""

from __future__ import annotations

from rich.text import Text

from llmd.tui.formatting import bar, fmt_number, fmt_percent, fmt_seconds, tall_sparkline
from llmd.tui.top.panels.base import Panel, join_lines, wrapped
from llmd.tui.top.view import TopView

PHASES = (("schedule", "s", "magenta"), ("prepare", "p", "blue"), ("forward", "f", "green"),
          ("sample", "x", "cyan"), ("idle_gap", "g", "red"))  # fmt: skip
SHORT_NAMES = {"schedule": "sched", "prepare": "prep", "forward": "fwd", "sample": "sample",
               "idle_gap": "gap"}  # fmt: skip
PREFILL_STYLE, DECODE_STYLE = "yellow", "green"


class StepsPanel(Panel):
    """Per-step token mix (prefill vs decode) and the split of step time by phase."""

    TITLE = "Prefill/decode"
    SECTION = "steps"
    IS_SLOW = True

    def draw(self, view: TopView, width: int, height: int) -> Text:
        steps = view.steps
        history = (*steps.prompt_per_step_history, *steps.generation_per_step_history)
        ceiling = max([1.0, *history])
        spark_width = max(0, width - 19)  # label 8, value 5, "/step " 6
        prose = [
            Text(
                f"step {fmt_seconds(steps.step_mean_s)} mean, {fmt_seconds(steps.step_p99_s)} p99"
                f" · {fmt_number(steps.steps_per_s)} steps/s",
                style="dim",
            )
        ]
        phase_bar, *phase_legend = self._phase_lines(view, width)
        prose += phase_legend
        if steps.prefill_time_share is not None:
            share = steps.prefill_time_share
            line = Text("forward ", style="dim")
            line.append(f"prefill {fmt_percent(share)}", style=PREFILL_STYLE)
            line.append(f" · decode {fmt_percent(1 - share)}", style=DECODE_STYLE)
            prose.append(line)
        console = self.app.console
        below = [
            *wrapped(prose[:1], width, console),
            phase_bar,
            *wrapped(prose[1:], width, console),
        ]
        rows = max(1, (height - len(below)) // 2)  # a tall panel: taller sparklines
        lines = []
        for label, value, series, style in (
            ("prefill", steps.prompt_tokens_per_step, steps.prompt_per_step_history, PREFILL_STYLE),
            ("decode", steps.generation_tokens_per_step, steps.generation_per_step_history,
             DECODE_STYLE),
        ):  # fmt: skip
            chart = tall_sparkline(series, spark_width, rows, ceiling)
            lines += [Text(" " * 19 + row, style=style) for row in chart[:-1]]
            line = Text(f"{label:<8}", style="dim")
            line.append(f"{fmt_number(value):>5}/step ", style=f"bold {style}")
            line.append(chart[-1], style=style)
            lines.append(line)
        for line in lines:
            line.truncate(width, overflow="ellipsis")
        lines += below
        return join_lines(lines, height)

    def _phase_lines(self, view: TopView, width: int) -> list[Text]:
        """A stacked bar of mean ms per phase and its legend."""
        phase_ms = {name: view.steps.phase_ms.get(name) or 0.0 for name, _, _ in PHASES}
        total = sum(phase_ms.values())
        if total <= 0:
            return [Text("step time: no steps in the window", style="dim")]
        fractions = [phase_ms[name] / total for name, _, _ in PHASES]
        drawn = bar(fractions, "".join(symbol for _, symbol, _ in PHASES), width)
        line = Text()
        for (_, symbol, style), _fraction in zip(PHASES, fractions):
            line.append("█" * drawn.count(symbol), style=style)
        legend = Text()
        for (name, _, style), fraction in zip(PHASES, fractions):
            short = name if width >= 60 else SHORT_NAMES[name]
            legend.append(f"{short} {fmt_percent(fraction)} ", style=style)
        return [line, legend]
