"""The screen of a running app as plain text, and comparison with a stored snapshot.

Plain text is stable across Textual's SVG details and readable in a diff; the block map,
sparklines and table all draw with characters, so the text shows what a user would see.
Set LLMD_UPDATE_SNAPSHOTS=1 to rewrite the stored files after an intended change.
"""

from __future__ import annotations

import os
from pathlib import Path

from textual.app import App

SNAPSHOT_DIR = Path(__file__).parent / "snapshots"
UPDATE_ENV = "LLMD_UPDATE_SNAPSHOTS"


def screen_text(app: App) -> str:
    """Every row of the app's current screen, right-stripped."""
    strips = app.screen._compositor.render_strips()
    return "\n".join(strip.text.rstrip() for strip in strips) + "\n"


def assert_matches_snapshot(text: str, name: str) -> None:
    """Compare with tests/tui/snapshots/NAME (rewritten instead when LLMD_UPDATE_SNAPSHOTS=1)."""
    path = SNAPSHOT_DIR / name
    if os.environ.get(UPDATE_ENV) == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    if not path.exists():
        raise AssertionError(f"no stored snapshot {path}; create it with {UPDATE_ENV}=1")
    expected = path.read_text(encoding="utf-8")
    if text != expected:
        raise AssertionError(
            f"screen differs from {path} (rerun with {UPDATE_ENV}=1 if intended):\n"
            f"--- expected\n{expected}\n--- actual\n{text}"
        )
