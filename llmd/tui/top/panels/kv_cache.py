"""KV cache: used, cached and free blocks as a bar, the prefix hit rate, and the block map."""

from __future__ import annotations

from rich.text import Text

from llmd.metrics import CACHED, FREE, SHARED
from llmd.tui.formatting import bar, fmt_percent
from llmd.tui.top.block_grid import glyph, grid_rows, owner_glyph
from llmd.tui.top.panels.base import Panel, join_lines, wrapped
from llmd.tui.top.view import TopView

OWNER_COLORS = (
    "cyan", "magenta", "green", "yellow", "blue", "bright_red",
    "bright_cyan", "bright_magenta", "bright_green", "bright_yellow", "bright_blue", "red",
)  # fmt: skip
USED_STYLE, CACHED_STYLE, FREE_STYLE, SHARED_STYLE = "bold cyan", "blue", "dim", "bold white"
STATE_STYLES = {FREE: FREE_STYLE, CACHED: CACHED_STYLE, SHARED: SHARED_STYLE}
"""The colour of each block-map code that is not an owner index."""


def cell_style(code: int) -> str:
    """Colour of a block-map cell: owners cycle through a palette."""
    return STATE_STYLES.get(code) or OWNER_COLORS[code % len(OWNER_COLORS)]


class KVCachePanel(Panel):
    """Occupancy bar, counts, prefix-cache hit rate and who owns which block."""

    TITLE = "KV cache"
    SECTION = "kv"
    IS_SLOW = True

    def draw(self, view: TopView, width: int, height: int) -> Text:
        kv = view.kv
        total = max(1, kv.num_total)
        bar_width = max(4, width - 11)
        occupancy = Text()
        fractions = (kv.num_used / total, kv.num_cached / total)
        drawn = bar(fractions, "█▒", bar_width, fill="·")
        for symbol, style in (("█", USED_STYLE), ("▒", CACHED_STYLE), ("·", FREE_STYLE)):
            occupancy.append(symbol * drawn.count(symbol), style=style)
        occupancy.append(f" {fmt_percent(kv.usage):>4} used")
        block_size = "" if kv.block_size is None else f" ×{kv.block_size} tok"
        counts = Text()
        counts.append(f"used {kv.num_used}", style=USED_STYLE)
        counts.append(f" · cached {kv.num_cached}", style=CACHED_STYLE)
        counts.append(f" · free {kv.num_free} / {kv.num_total} blocks{block_size}")
        hit = Text(f"prefix-cache hit rate {fmt_percent(kv.prefix_hit_rate)}", style="dim")
        lines = [occupancy, *wrapped([counts], width, self.app.console), hit]
        for line in lines:
            line.truncate(width, overflow="ellipsis")
        if kv.cells:
            legend_rows = len(wrapped([self._legend(view, 1)], width, self.app.console))
            map_rows = height - len(lines) - legend_rows
            if map_rows > 0:
                grid, group = self._block_map(view, width, map_rows)
                legend = self._legend(view, group)
                lines += grid + wrapped([legend], width, self.app.console)
        return join_lines(lines, height)

    def _block_map(self, view: TopView, width: int, max_rows: int) -> tuple[list[Text], int]:
        """The grid's rows and how many map cells each grid cell stands for."""
        rows, group = grid_rows(view.kv.cells, width, max_rows)
        lines = []
        for row in rows:
            line = Text()
            start = 0
            for index in range(1, len(row) + 1):  # one span per run of equal cells
                if index == len(row) or row[index] != row[start]:
                    line.append(glyph(row[start]) * (index - start), style=cell_style(row[start]))
                    start = index
            lines.append(line)
        return lines, group

    @staticmethod
    def _legend(view: TopView, group: int) -> Text:
        """Which glyph is whose, and how many blocks one cell stands for."""
        kv = view.kv
        blocks = kv.blocks_per_cell * group
        legend = Text(f"1 cell = {blocks} block{'s' if blocks > 1 else ''}: ", style="dim")
        for index, owner in enumerate(kv.owners):
            legend.append(f"{owner_glyph(index)} {owner} ", style=cell_style(index))
        legend.append(f"{glyph(SHARED)} shared {glyph(CACHED)} cached {glyph(FREE)} free", "dim")
        return legend
