"""The HTTP process runs on uvloop with httptools' parser: both are dependencies on Linux."""

from __future__ import annotations

import asyncio
import sys

import httpx
import pytest

from llmd.http.worker import event_loop_factory, http_parser_name, run_on_loop


@pytest.mark.skipif(sys.platform == "win32", reason="uvloop is a dependency on POSIX only")
def test_the_worker_picks_uvloop_and_httptools():
    factory, name = event_loop_factory()
    assert name == "uvloop" and factory is not None
    loop = factory()
    try:
        assert type(loop).__module__.startswith("uvloop")
        assert loop.run_until_complete(asyncio.sleep(0, result=7)) == 7
    finally:
        loop.close()
    assert http_parser_name() == "httptools"


def test_without_them_the_worker_falls_back_to_the_pure_python_pair(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import now raises ImportError
    monkeypatch.setitem(sys.modules, "httptools", None)
    assert event_loop_factory() == (None, "asyncio")
    assert http_parser_name() == "h11"


def test_the_served_http_process_says_what_it_runs_on(served_http):
    assert httpx.get(f"{served_http.url}/version", timeout=10).status_code == 200
    log = served_http.log_path.read_text()
    assert "HTTP server: uvicorn, httptools parser, uvloop event loop" in log, log


@pytest.mark.parametrize("is_uvloop", [True, False])
def test_run_on_loop_runs_to_the_end_and_closes_its_loop(is_uvloop):
    factory = event_loop_factory()[0] if is_uvloop else None
    seen = []

    async def main() -> None:
        await asyncio.sleep(0)
        seen.append(type(asyncio.get_running_loop()).__module__)

    run_on_loop(main(), factory)
    assert len(seen) == 1 and seen[0].startswith("uvloop") == is_uvloop
