"""The daemon's one torch thread: it loads the engine, warms it up and then steps it.

libgomp keeps a pool of OpenMP workers for each thread that starts a parallel region. A
model loaded on the main thread and stepped on another leaves two pools, more OpenMP
threads than cores, and libgomp then cuts its spin-waits short: every parallel region
wakes its workers through the kernel, and on 2 cores decode steps ran 1.3-2x slower than
the same engine offline (docs/benchmarks.md). So every torch call of the daemon's engine
runs here.
"""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import ParamSpec, TypeVar

from llmd.daemon.thread_names import name_os_thread

T = TypeVar("T")
P = ParamSpec("P")


class EngineThread:
    """A thread that runs jobs handed to it in order, the last of them for good."""

    def __init__(self, name: str = "llmd-engine") -> None:
        self.name = name
        self._jobs: queue.SimpleQueue[tuple[Callable[[], object], Future[object] | None]] = (
            queue.SimpleQueue()
        )
        self._is_started = False
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()  # the OS thread inherits the creating thread's cores now

    def call(self, function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run `function(*args, **kwargs)` on the thread; return its result or raise its error.

        The wait can be interrupted by a signal handler that raises (`llmd serve` exits
        during a load that way); the job then still finishes on the thread.
        """
        if self._is_started or not self._thread.is_alive():
            raise RuntimeError(f"{self.name} no longer takes jobs")
        future: Future[T] = Future()
        # Future is invariant: the queue holds Future[object], and _serve sets only this
        # job's own result on it.
        self._jobs.put((functools.partial(function, *args, **kwargs), future))  # type: ignore[arg-type]
        return future.result()

    def start(self, target: Callable[[], object]) -> None:
        """Hand the thread its last job: it runs `target` and ends when `target` returns."""
        if self._is_started:
            raise RuntimeError(f"{self.name} was already started")
        self._is_started = True
        self._jobs.put((target, None))

    def close(self) -> None:
        """End the thread if it was never started (a failed start-up); else a no-op."""
        if not self._is_started:
            self.start(lambda: None)

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread to end."""
        self._thread.join(timeout)

    def is_alive(self) -> bool:
        """True until the last job (or close) has returned."""
        return self._thread.is_alive()

    def _serve(self) -> None:
        name_os_thread(self.name)  # torch's OpenMP workers, started from here, inherit it
        while True:
            job, future = self._jobs.get()
            if future is None:
                job()
                return
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(job())
                except BaseException as error:  # handed to the caller, raised there
                    future.set_exception(error)
