"""`llmd serve` in the foreground: lock the address, load the engine, serve, clean up.

The lock is taken before the (slow) model load so a second daemon fails at once, and it
is released, with the socket and pid files, however the daemon ends short of kill -9.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

from llmd.config import EngineConfig
from llmd.daemon.cpu_placement import (
    CpuPlacement,
    allowed_cpu_ids,
    pin_current_thread,
    plan_placement,
)
from llmd.daemon.engine_thread import EngineThread
from llmd.daemon.instance_lock import InstanceLock
from llmd.daemon.kv_event_publisher import check_kv_events_address
from llmd.daemon.listen_check import check_can_listen
from llmd.daemon.serve_options import ServeOptions
from llmd.daemon.thread_names import MAIN_THREAD_NAME, name_os_thread
from llmd.errors import InvalidParameterError
from llmd.protocol.address import Address, default_address, parse_address

if TYPE_CHECKING:
    from llmd.daemon.server import Daemon
    from llmd.http.server import HttpServer

SignalHandler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None
"""What `signal.signal` returns and takes back: a function, SIG_DFL or SIG_IGN, or None."""

logger = logging.getLogger("llmd.daemon")


def resolve_address(text: str | None, allow_remote: bool) -> Address:
    """Parse the address (default: the per-user ipc socket); refuse remote binds unless allowed."""
    address = parse_address(text or default_address())
    if not address.is_loopback and not allow_remote:
        raise InvalidParameterError(
            f"{address} is reachable from other machines and the protocol has no "
            "authentication; bind to 127.0.0.1 or an ipc:// socket, or pass --allow-remote",
            "address",
        )
    return address


def configure_logging(level: str) -> None:
    """Timestamped log lines on stderr (a detached daemon's stderr is its log file)."""
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def run_serve(options: ServeOptions) -> None:
    """Serve until SIGTERM/SIGINT or a shutdown request; with `detach`, start in the background."""
    address = resolve_address(options.address, options.allow_remote)
    if options.kv_events is not None:  # a bad address fails before the model loads
        check_kv_events_address(options.kv_events, options.allow_remote)
    engine_config = EngineConfig.from_kwargs(**options.engine_kwargs)  # bad flags fail here
    if options.detach:
        from llmd.daemon.detach import start_detached

        pid, log_path = start_detached(options, address)
        print(f"llmd daemon serving at {address} (pid {pid}); log: {log_path}", flush=True)
        return
    configure_logging(options.log_level)
    lock = InstanceLock(address)
    lock.acquire()
    previous_handlers = _exit_on_signals()  # while loading, a signal just exits (cleanly)
    http_server = None
    engine_thread: EngineThread | None = None
    try:
        check_can_listen(address)
        http_server = make_http_server(options, address)  # binds now: a busy port fails fast
        placement = cpu_placement(options, engine_config)
        if placement is not None:
            pin_current_thread(placement.serving_cpu_ids)  # the HTTP process inherits it
        if http_server is not None:
            http_server.start()  # its own process, so it never competes for the engine's GIL
        if placement is not None:
            pin_current_thread(placement.forward_cpu_ids)  # load and warm up where it runs
            if engine_config.num_threads is None and not os.environ.get("OMP_NUM_THREADS"):
                num_threads = len(placement.forward_cpu_ids)
                engine_config = dataclasses.replace(engine_config, num_threads=num_threads)
        from llmd.batch_limits import USAGE_SERVE
        from llmd.daemon.server import Daemon
        from llmd.llm_engine import LLMEngine

        # Named after the imports (numpy's BLAS thread keeps its own name), so that an OpenMP
        # pool this thread started would show in /proc under its name.
        name_os_thread(MAIN_THREAD_NAME)
        engine_thread = EngineThread()  # loads, warms up and steps: one OpenMP pool
        engine = engine_thread.call(LLMEngine, engine_config, USAGE_SERVE)
        daemon = Daemon(engine, options, address, placement, engine_thread)
        daemon.bind()
        _drain_on_signals(daemon)
        if http_server is not None:
            http_server.wait_ready()
        print(f"llmd daemon serving at {address}", file=sys.stderr, flush=True)
        if http_server is not None:
            print(f"OpenAI-compatible API at {http_server.url}/v1", file=sys.stderr, flush=True)
        daemon.serve_forever()
    finally:
        if engine_thread is not None:
            engine_thread.close()  # ends it if the engine never started stepping
        if http_server is not None:
            http_server.stop()
        _restore(previous_handlers)
        lock.release()


def cpu_placement(options: ServeOptions, engine_config: EngineConfig) -> CpuPlacement | None:
    """The forward pass's and the serving threads' cores on the CPU device, else None."""
    if options.reserved_cpus == 0:
        return None
    from llmd.runner.device import resolve_device

    if resolve_device(engine_config.device).type != "cpu":
        return None
    placement = plan_placement(allowed_cpu_ids(), options.reserved_cpus)
    if not placement.is_split:
        return None
    logger.info(
        "forward pass pinned to cores %s; I/O, text and HTTP to cores %s (--reserved-cpus)",
        list(placement.forward_cpu_ids),
        list(placement.serving_cpu_ids),
    )
    return placement


def make_http_server(options: ServeOptions, address: Address) -> HttpServer | None:
    """The bound (not yet serving) HTTP front end, or None with --no-http."""
    if not options.is_http_enabled:
        return None
    from llmd.http.http_settings import HttpSettings
    from llmd.http.server import HttpServer

    return HttpServer(HttpSettings(
        options.http_host,
        options.http_port,
        str(address),
        allow_remote=options.allow_remote,
        api_key=options.api_key or os.environ.get("LLMD_API_KEY") or None,
        max_body_bytes=options.max_message_bytes,
        graceful_shutdown_s=options.drain_timeout_s + 5,  # in-flight streams outlive a drain
        log_level=options.log_level,
    ))  # fmt: skip


def _exit_on_signals() -> dict[int, SignalHandler]:
    if threading.current_thread() is not threading.main_thread():
        return {}

    def exit_now(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    return {sig: signal.signal(sig, exit_now) for sig in (signal.SIGTERM, signal.SIGINT)}


def _drain_on_signals(daemon: Daemon) -> None:
    """First SIGTERM/SIGINT drains gracefully; a second one aborts what is left."""
    if threading.current_thread() is not threading.main_thread():
        return
    num_signals = 0

    def drain(signum: int, frame: FrameType | None) -> None:
        nonlocal num_signals
        num_signals += 1
        if num_signals == 1:
            print("llmd: draining in-flight requests; press Ctrl-C again to abort them",
                  file=sys.stderr, flush=True)  # fmt: skip
        daemon.request_drain(now=num_signals > 1)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, drain)


def _restore(handlers: dict[int, SignalHandler]) -> None:
    for sig, handler in handlers.items():
        signal.signal(sig, handler)
