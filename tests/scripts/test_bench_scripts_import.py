"""Every script with a main() imports: a broken import is found here, not in a sweep."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
SCRIPT_NAMES = sorted(
    path.stem for path in SCRIPTS.glob("*.py") if "\ndef main(" in path.read_text()
)


def test_the_scripts_are_found():
    assert {"make_bench_checkpoint", "bench_daemon_threads", "soak"} <= set(SCRIPT_NAMES)


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_script_imports(name, monkeypatch):
    module_name = f"_llmd_script_{name}"
    spec = importlib.util.spec_from_file_location(module_name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, module_name, module)  # dataclasses look themselves up
    monkeypatch.setattr(sys, "path", list(sys.path))  # scripts put their folders first
    spec.loader.exec_module(module)  # runs the imports, not main()
    assert callable(module.main)
