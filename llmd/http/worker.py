"""The HTTP server process: uvicorn on a socket inherited from `llmd serve`.

It is a separate process, not a thread of the daemon, because a thread would share the
daemon's GIL with the busy engine thread: every wake-up of the event loop then waits for
a GIL hand-over (up to 5 ms each), which measured as +20-30 ms per streamed token. It
runs on uvloop with httptools' parser where they are installed (they are dependencies on
Linux): the pure-Python pair costs the cores the forward pass runs on, per streamed token.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import socket
import sys
from collections.abc import Callable, Coroutine

import uvicorn

from llmd.daemon.serve_options import API_KEY_ENV
from llmd.http.app import create_app
from llmd.http.context import HttpContext

PARENT_CHECK_S = 0.5

logger = logging.getLogger("llmd.http")


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The worker's command line (built by llmd.http.server.HttpServer)."""
    parser = argparse.ArgumentParser(prog="python -m llmd.http")
    parser.add_argument("--fd", type=int, required=True, help="Inherited listening socket.")
    parser.add_argument("--ready-fd", type=int, required=True, help="Pipe to report readiness.")
    parser.add_argument(
        "--lifeline-fd", type=int, default=None, help="Pipe: end of file = daemon died."
    )
    parser.add_argument("--daemon-address", required=True)
    parser.add_argument("--max-body-bytes", type=int, required=True)
    parser.add_argument("--graceful-shutdown-s", type=float, required=True)
    parser.add_argument("--log-level", default="info")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    """Serve until SIGTERM or until the parent daemon is gone."""
    args = parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    listener = socket.socket(fileno=args.fd)
    context = HttpContext(args.daemon_address, os.environ.get(API_KEY_ENV), args.max_body_bytes)
    loop_factory, loop_name = event_loop_factory()
    config = uvicorn.Config(
        create_app(context),
        http=http_parser_name(),
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=args.graceful_shutdown_s,
        lifespan="on",
    )
    server = uvicorn.Server(config)
    logger.info("HTTP server: uvicorn, %s parser, %s event loop", config.http, loop_name)
    run_on_loop(_serve(server, listener, args.ready_fd, args.lifeline_fd), loop_factory)
    return 0


def run_on_loop(
    main: Coroutine[object, object, None],
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None,
) -> None:
    """Run `main` to completion on a loop from `loop_factory` (None: asyncio's default).

    asyncio.Runner takes a factory only from Python 3.11; llmd supports 3.10, so the loop
    is set up and torn down here as asyncio.run would.
    """
    if loop_factory is None:
        asyncio.run(main)
        return
    loop = loop_factory()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(main)
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def event_loop_factory() -> tuple[Callable[[], asyncio.AbstractEventLoop] | None, str]:
    """uvloop's loop factory where uvloop is installed, else asyncio's default; and its name."""
    try:
        import uvloop
    except ImportError:
        return None, "asyncio"
    return uvloop.new_event_loop, "uvloop"


def http_parser_name() -> str:
    """httptools (C, what uvicorn calls "httptools") where installed, else h11 (pure Python)."""
    try:
        import httptools  # noqa: F401
    except ImportError:
        return "h11"
    return "httptools"


async def _serve(
    server: uvicorn.Server, listener: socket.socket, ready_fd: int, lifeline_fd: int | None
) -> None:
    loop = asyncio.get_running_loop()
    parent_pid = os.getppid()
    daemon_gone = asyncio.Event()
    if lifeline_fd is not None:  # end-of-file (readable) the moment the daemon dies
        loop.add_reader(lifeline_fd, daemon_gone.set)

    async def watch_parent() -> None:  # a fallback when a forked child keeps the lifeline open
        while os.getppid() == parent_pid:
            await asyncio.sleep(PARENT_CHECK_S)
        daemon_gone.set()

    async def watch() -> None:
        while not server.started:
            await asyncio.sleep(0.01)
        with contextlib.suppress(OSError):
            os.write(ready_fd, b"1")
            os.close(ready_fd)
        await daemon_gone.wait()
        logger.warning("the daemon process is gone; stopping the HTTP server")
        _stop_at_once(server)

    tasks = [loop.create_task(watch()), loop.create_task(watch_parent())]
    try:
        await server.serve(sockets=[listener])
    finally:
        for task in tasks:
            task.cancel()
        if lifeline_fd is not None:
            loop.remove_reader(lifeline_fd)


def _stop_at_once(server: uvicorn.Server) -> None:
    """Free the port now, so a restarted daemon can bind it; do not wait for open streams.

    Their daemon is gone, and a restarted one on the same address does not know them.
    """
    for listening in getattr(server, "servers", []):
        listening.close()  # uvicorn would close them only at its next 0.1 s tick
    server.config.timeout_graceful_shutdown = 0  # cancel open responses, then end the lifespan
    server.should_exit = True


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
