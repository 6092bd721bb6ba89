"""The daemon's threads carry OS-level names, so per-thread CPU time can be attributed."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from llmd.daemon.thread_names import name_os_thread

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux /proc")


def _os_name(native_id: int) -> str:
    return Path(f"/proc/self/task/{native_id}/comm").read_text().strip()


def test_a_thread_gets_its_os_name_cut_to_15_bytes():
    seen = {}

    def run() -> None:
        seen["ok"] = name_os_thread("llmd-a-very-long-thread-name")
        seen["name"] = _os_name(threading.get_native_id())

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == {"ok": True, "name": "llmd-a-very-lon"}
    assert _os_name(threading.get_native_id()) != "llmd-a-very-lon"  # only that thread


def test_threads_started_by_a_named_thread_inherit_its_name():
    seen = {}

    def child() -> None:
        seen["child"] = _os_name(threading.get_native_id())

    def parent() -> None:
        name_os_thread("llmd-engine")
        inner = threading.Thread(target=child)
        inner.start()
        inner.join()

    thread = threading.Thread(target=parent)
    thread.start()
    thread.join()
    assert seen["child"] == "llmd-engine"
