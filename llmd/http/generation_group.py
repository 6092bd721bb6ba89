"""One daemon request per prompt of an HTTP request, each pumped by its own asyncio task.

The tasks live outside the HTTP framework's cancel scopes, so when a client disconnects
and the response is cancelled, cancelling a task lets its stream send the daemon an abort
(which frees the request's KV at once) instead of being cancelled again mid-send.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any, TypedDict

from llmd.client import AsyncClient, Completion, StreamEvent
from llmd.protocol import Accepted


class PromptInput(TypedDict, total=False):
    """One daemon request of a group: its prompt in one of three forms, and its own params."""

    prompt: str
    messages: list[dict[str, object]]
    prompt_token_ids: list[int]
    tools: list[dict[str, object]]
    """Function tools for the chat template (with `messages`)."""
    params: dict[str, object]
    """Replaces the group's params (the n choices of one prompt differ by seed)."""
    echo: bool
    """Get the prompt's text and its tokens' texts back (completions' `echo`)."""


class _Done:
    """The class of `_DONE`, so that the queue's item type names it."""


_DONE = _Done()
"""Marks the end of one prompt's stream in the queue."""

GroupItem = StreamEvent | Completion
"""What `next` returns for one prompt: a stream's event, or a whole completion."""


@dataclass(eq=False)
class GenerationGroup:
    """Runs `inputs` (client keyword arguments, one per request) with shared `params`.

    An input may carry its own "params" (the n choices of one prompt differ by seed).
    """

    client: AsyncClient
    inputs: list[PromptInput]
    params: dict[str, object]
    stream: bool
    label: str | None = None
    """Every daemon request's label (the HTTP request's X-Request-Id)."""
    num_open: int = field(init=False)
    """Prompts whose stream has not ended yet."""
    _queue: asyncio.Queue[tuple[int, GroupItem | Exception | _Done]] = field(
        default_factory=asyncio.Queue, init=False
    )
    _buffer: deque[tuple[int, GroupItem | Exception | _Done]] = field(
        default_factory=deque, init=False
    )
    _tasks: list[asyncio.Task[None]] = field(default_factory=list, init=False)
    _is_cancelled: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.num_open = len(self.inputs)

    def start(self) -> None:
        """Send every prompt to the daemon."""
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._pump(i, kw)) for i, kw in enumerate(self.inputs)]

    def cancel(self) -> None:
        """Abort every prompt still running (safe to call from a cancelled context).

        The flag backs up the task cancel (the client no longer uses `wait_for`, which
        swallowed a cancel racing a message on Python 3.11): a stream ends at its next message.
        """
        self._is_cancelled = True
        for task in self._tasks:
            task.cancel()

    async def next(self) -> tuple[int, GroupItem] | None:
        """The next (prompt index, event or Completion); None once every stream ended.

        An error reply is raised here as the typed exception the daemon reported.
        """
        while self.num_open:
            index, item = self._buffer.popleft() if self._buffer else await self._queue.get()
            if isinstance(item, _Done):
                self.num_open -= 1
                continue
            if isinstance(item, BaseException):
                raise item
            return index, item
        return None

    async def wait_accepted(self) -> None:
        """Streaming: wait until the daemon accepted every prompt (or raise its refusal).

        Events that arrive meanwhile are kept and come out of next() in order, so a
        refusal (too long, overloaded) is still answered with an HTTP status, not a stream.
        """
        pending = set(range(len(self.inputs)))
        held: list[tuple[int, GroupItem | _Done]] = []
        while pending:
            index, item = await self._queue.get()
            if isinstance(item, BaseException):
                raise item
            held.append((index, item))
            if isinstance(item, (Accepted, _Done)):
                pending.discard(index)
        self._buffer.extend(held)

    async def completions(self) -> list[Completion]:
        """Non-streaming: every prompt's Completion, in prompt order."""
        results: list[Completion | None] = [None] * len(self.inputs)
        while (item := await self.next()) is not None:
            index, result = item
            if isinstance(result, Completion):  # without streaming, nothing else is queued
                results[index] = result
        return [result for result in results if result is not None]

    def _request(self, prompt: PromptInput) -> dict[str, Any]:
        """The client keyword arguments of one prompt, streamed or not."""
        return {
            "messages": prompt.get("messages"),
            "prompt_token_ids": prompt.get("prompt_token_ids"),
            "tools": prompt.get("tools"),
            "params": prompt.get("params", self.params),
            "label": self.label,
            "echo": prompt.get("echo", False),
        }

    async def _pump(self, index: int, prompt: PromptInput) -> None:
        try:
            request = self._request(prompt)
            if self.stream:
                stream = self.client.stream(prompt.get("prompt"), **request)
                async with contextlib.aclosing(stream) as events:
                    async for event in events:
                        if self._is_cancelled:
                            break  # closing the stream sends the abort
                        self._queue.put_nowait((index, event))
            else:
                completion = await self.client.generate(prompt.get("prompt"), **request)
                self._queue.put_nowait((index, completion))
        except asyncio.CancelledError:
            raise
        except Exception as error:  # an error reply ends this prompt; the route answers it
            self._queue.put_nowait((index, error))
        self._queue.put_nowait((index, _DONE))
