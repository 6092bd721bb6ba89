"""In-memory stand-ins for AsyncClient (chat and top) and Client (one-shot chat).

They implement just the client methods the apps call, with scripted replies and snapshots
pushed by the test, so Pilot tests run without a daemon, fast and deterministically.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

from llmd.client import Accepted, Finished, TokenDelta
from llmd.errors import LLMDError
from llmd.protocol import StatsSnapshot

HEALTH = {
    "status": "ok",
    "is_healthy": True,
    "pid": 4242,
    "model": "tiny-llama",
    "address": "ipc:///tmp/fake.sock",
    "uptime_s": 12.0,
    "num_in_flight": 0,
    "version": "0.1.0",
    "protocol_version": 1,
    "message": None,
}


@dataclass
class ScriptedReply:
    """What the fake daemon answers to one generate: text chunks, then finish or an error."""

    chunks: list[str] = field(default_factory=lambda: ["Hello", " **world**", "!"])
    finish_reason: str = "stop"
    error: LLMDError | None = None
    """Raised instead of streaming (after `accepted`, like a failing engine)."""
    hold: bool = False
    """After the chunks, wait until aborted (then finish with 'abort')."""
    chunk_delay_s: float | None = 0.005
    """Pause before each chunk; None sends the chunks and the finish in one burst."""
    before_last_chunk: asyncio.Event | None = None
    """Set by the test to let the last chunk, and the finish right after it, go out."""


def finished_message(client_id: str, reason: str, num_tokens: int) -> Finished:
    """A finished message with fixed timings."""
    return Finished(
        id=client_id,
        finish_reason=reason,
        stop_reason=None,
        token_ids=list(range(num_tokens)),
        usage={"prompt_tokens": 12, "completion_tokens": num_tokens, "cached_tokens": 0},
        timings={
            "queue": 0.001,
            "prefill": 0.02,
            "ttft": 0.021,
            "decode": 0.05,
            "tpot": 0.025,
            "e2e": 0.071,
        },
    )


class FakeAsyncClient:
    """Scripted daemon for the Textual apps."""

    def __init__(self, replies: list[ScriptedReply] | None = None) -> None:
        self.replies = list(replies or [])
        self.requests: list[dict[str, Any]] = []
        """The messages and params of every generate."""
        self.aborted: list[str] = []
        """Client ids of explicit aborts."""
        self.closed_early: list[str] = []
        """Client ids of streams closed before they finished (the client aborts those)."""
        self.num_subscribes = 0
        self.subscribed_timelines: list[str | None] = []
        self.snapshot_queue: asyncio.Queue | None = None
        self.is_closed = False
        self._abort_events: dict[str, asyncio.Event] = {}
        self.health_error: LLMDError | None = None
        self.health_delay_s = 0.0
        """How long health() takes to answer or fail (a real client waits its timeout)."""

    async def stream(
        self, *, messages: Any = None, params: Any = None, prompt: Any = None, **_: Any
    ) -> AsyncIterator[Any]:
        client_id = f"fake-{len(self.requests) + 1}"
        self.requests.append({"messages": messages, "params": params, "prompt": prompt})
        reply = self.replies.pop(0) if self.replies else ScriptedReply()
        aborted = self._abort_events.setdefault(client_id, asyncio.Event())
        is_done = False
        try:
            yield Accepted(
                id=client_id, request_id=f"req-{len(self.requests)}", num_prompt_tokens=12
            )
            if reply.error is not None:
                is_done = True
                raise reply.error
            for index, chunk in enumerate(reply.chunks):
                if reply.before_last_chunk is not None and index == len(reply.chunks) - 1:
                    await reply.before_last_chunk.wait()
                if reply.chunk_delay_s is not None:
                    await asyncio.sleep(reply.chunk_delay_s)
                if aborted.is_set():
                    break
                yield TokenDelta(id=client_id, text=chunk, token_ids=[1])
            if reply.hold and not aborted.is_set():
                await aborted.wait()
            reason = "abort" if aborted.is_set() else reply.finish_reason
            is_done = True
            yield finished_message(client_id, reason, len(reply.chunks))
        finally:
            if not is_done:  # like AsyncClient: a stream closed early aborts its request
                self.closed_early.append(client_id)

    async def abort(self, client_id: str) -> None:
        self.aborted.append(client_id)
        self._abort_events.setdefault(client_id, asyncio.Event()).set()

    async def health(self) -> dict[str, Any]:
        await asyncio.sleep(self.health_delay_s)
        if self.health_error is not None:
            raise self.health_error
        return dict(HEALTH)

    async def stats(self, **_: Any) -> StatsSnapshot:
        from tests.tui.sample_snapshots import busy_snapshot

        return busy_snapshot(3)

    async def subscribe(
        self, interval_ms: int = 1000, *, timeline_request_id: str | None = None, **_: Any
    ) -> AsyncIterator[StatsSnapshot]:
        """Yield what the test pushes; a pushed exception ends the subscription with it."""
        self.num_subscribes += 1
        self.subscribed_timelines.append(timeline_request_id)
        if self.snapshot_queue is None:
            self.snapshot_queue = asyncio.Queue()
        while True:
            item = await self.snapshot_queue.get()
            if isinstance(item, BaseException):
                raise item
            yield item

    async def push(self, item: StatsSnapshot | BaseException) -> None:
        """Deliver a snapshot (or a failure) to the current or next subscription."""
        if self.snapshot_queue is None:
            self.snapshot_queue = asyncio.Queue()
        await self.snapshot_queue.put(item)

    async def close(self) -> None:
        self.is_closed = True


class FakeClient:
    """Scripted blocking client for the one-shot chat."""

    def __init__(self, reply: ScriptedReply, *later_replies: ScriptedReply) -> None:
        self.reply = reply
        self.later_replies = list(later_replies)
        """Answers to the second, third... request (the first reply again when none left)."""
        self.requests: list[dict[str, Any]] = []
        self.was_closed_early = False

    def stream(self, *, messages: Any = None, params: Any = None, **_: Any) -> Iterator[Any]:
        self.requests.append({"messages": messages, "params": params})
        if len(self.requests) > 1 and self.later_replies:
            self.reply = self.later_replies.pop(0)
        return self._events()

    def _events(self) -> Iterator[Any]:
        is_done = False
        try:
            yield Accepted(id="fake-1", request_id="req-1", num_prompt_tokens=12)
            if self.reply.error is not None:
                raise self.reply.error
            for chunk in self.reply.chunks:
                yield TokenDelta(id="fake-1", text=chunk, token_ids=[1])
            is_done = True
            yield finished_message("fake-1", self.reply.finish_reason, len(self.reply.chunks))
        finally:
            self.was_closed_early = not is_done and self.reply.error is None
