"""The terminal apps never load torch or transformers, so they start in well under a second."""

from __future__ import annotations

import subprocess
import sys

from tests.tui.daemon_process import REPO_ROOT, subprocess_env

HEAVY_MODULES = ("torch", "transformers", "numpy", "safetensors", "tokenizers")

CHECK = """
import sys
import llmd.tui.chat.app, llmd.tui.top.app, llmd.tui.chat.oneshot
from llmd.cli import main
for command in (["chat", "--help"], ["top", "--help"]):
    try:
        main(command, standalone_mode=False)
    except SystemExit:
        pass
heavy = [name for name in {heavy!r} if name in sys.modules]
assert not heavy, heavy
print("ok")
"""


def test_apps_and_their_help_import_no_heavy_module():
    result = subprocess.run(
        [sys.executable, "-c", CHECK.format(heavy=HEAVY_MODULES)],
        env=subprocess_env(),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "Chat with the daemon's model" in result.stdout
    assert "Watch the daemon live" in result.stdout
    assert result.stdout.rstrip().endswith("ok")
