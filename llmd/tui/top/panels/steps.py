"""Prefill versus decode: tokens per step by kind over time, and where step time goes.

The grammar slice (filling structured outputs' token masks) and the grammar line appear
once the daemon has measured them, so a daemon without constrained requests looks as before.
"""

from __future__ import annotations

from rich.text import Text

from llmd.tui.formatting import bar, fmt_number, fmt_percent, fmt_seconds, tall_sparkline
from llmd.tui.top.panels.base import Panel, join_lines, wrapped
from llmd.tui.top.view import GrammarView, TopView

PHASES = (("schedule", "s", "magenta"), ("grammar", "m", "bright_yellow"),
          ("prepare", "p", "blue"), ("forward", "f", "green"), ("sample", "x", "cyan"),
          ("idle_gap", "g", "red"))  # fmt: skip
SHORT_NAMES = {"schedule": "sched", "grammar": "gram", "prepare": "prep", "forward": "fwd",
               "sample": "sample", "idle_gap": "gap"}  # fmt: skip
OPTIONAL_PHASES = ("grammar",)
"""Left out of the bar and legend while zero (no constrained row in the window)."""
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
        grammar = steps.grammar
        if grammar is not None:
            prose.append(_grammar_line(grammar, is_wide=width >= 60))
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
        phases = [p for p in PHASES if p[0] not in OPTIONAL_PHASES or phase_ms[p[0]] > 0]
        total = sum(phase_ms.values())
        if total <= 0:
            return [Text("step time: no steps in the window", style="dim")]
        fractions = [phase_ms[name] / total for name, _, _ in phases]
        drawn = bar(fractions, "".join(symbol for _, symbol, _ in phases), width)
        line = Text()
        for (_, symbol, style), _fraction in zip(phases, fractions):
            line.append("█" * drawn.count(symbol), style=style)
        legend = Text()
        for (name, _, style), fraction in zip(phases, fractions):
            short = name if width >= 60 else SHORT_NAMES[name]
            legend.append(f"{short} {fmt_percent(fraction)} ", style=style)
        return [line, legend]


def _grammar_line(grammar: GrammarView, is_wide: bool) -> Text:
    """Constrained requests, compiles (and cache hits), compile-time percentiles, failures."""
    line = Text("grammar ", style="dim")
    line.append(f"{grammar.num_requests} req", style="bold bright_yellow")
    if is_wide:
        compiles = f" · {grammar.num_compiles} compiled, {grammar.num_cache_hits} cached"
    else:
        compiles = f" · {grammar.num_compiles} compiled"
    line.append(compiles, style="dim")
    if grammar.compile_p50_s is not None:
        p90 = f" {fmt_seconds(grammar.compile_p90_s)} p90" if is_wide else ""
        line.append(
            f" · compile {fmt_seconds(grammar.compile_p50_s)} p50{p90}"
            f" {fmt_seconds(grammar.compile_p99_s)} p99",
            style="dim",
        )
    if grammar.num_failed:
        line.append(f" · {grammar.num_failed} failed", style="red")
    return line
