"""Requests whose grammar is still compiling: held out of the scheduler until it is ready.

A request with a constraint cannot sample before its matcher exists, but it must not
stall the step loop or anyone else either; so it waits here, in its own state, and the
engine admits it to the scheduler (or fails it with the compile's error) between steps.
"""

from __future__ import annotations

import concurrent.futures
from concurrent.futures import Future
from dataclasses import dataclass

from llmd.engine.request import Request
from llmd.errors import LLMDError
from llmd.structured.grammar_compiler import CompiledGrammar


class GrammarTimeoutError(LLMDError):
    """A grammar took longer to compile than the engine's limit."""

    def __init__(self, kind: str, timeout_s: float) -> None:
        super().__init__(f"structured_outputs.{kind}: compiling took longer than {timeout_s:g} s")
        self.parameter = f"structured_outputs.{kind}"


@dataclass
class _Waiting:
    request: Request
    future: Future[CompiledGrammar]
    deadline: float


class CompilingRequests:
    """Requests waiting for their grammar, in arrival order."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        """Longest a compile may take before its request fails (GrammarTimeoutError)."""
        self._waiting: dict[str, _Waiting] = {}

    def add(self, request: Request, future: Future[CompiledGrammar], now: float) -> None:
        """Hold `request` until `future` is done or `timeout_s` passes."""
        self._waiting[request.request_id] = _Waiting(request, future, now + self.timeout_s)

    def remove(self, request_id: str) -> Request | None:
        """Take a request out (an abort); its compile goes on and stays cached."""
        waiting = self._waiting.pop(request_id, None)
        return None if waiting is None else waiting.request

    def take_done(
        self, now: float
    ) -> tuple[list[tuple[Request, CompiledGrammar]], list[tuple[Request, Exception]]]:
        """The requests whose grammar compiled, and those whose compile failed or timed out."""
        ready: list[tuple[Request, CompiledGrammar]] = []
        failed: list[tuple[Request, Exception]] = []
        for request_id, waiting in list(self._waiting.items()):
            future, request = waiting.future, waiting.request
            if future.done():
                del self._waiting[request_id]
                error = future.exception()
                if error is None:
                    ready.append((request, future.result()))
                else:
                    failed.append((request, error))  # type: ignore[arg-type]
            elif now >= waiting.deadline:
                del self._waiting[request_id]
                kind = request.sampling_params.structured_outputs.kind  # type: ignore[union-attr]
                failed.append((request, GrammarTimeoutError(kind, self.timeout_s)))
        return ready, failed

    def wait(self, timeout_s: float) -> None:
        """Block until some compile finishes, or `timeout_s` (when the engine has nothing else)."""
        futures = [waiting.future for waiting in self._waiting.values()]
        if futures:
            concurrent.futures.wait(futures, timeout_s, concurrent.futures.FIRST_COMPLETED)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._waiting

    def __len__(self) -> int:
        return len(self._waiting)
