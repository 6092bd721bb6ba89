"""Sends one benchmark request to a daemon over ZeroMQ and records its timings.

The same AsyncClient that `llmd chat` uses, streaming, so the measured latency includes
everything a real client sees: socket, detokenization, and the daemon's queues.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from llmd.bench.request_record import RequestRecord
from llmd.client import AsyncClient
from llmd.protocol import Accepted, Finished, TokenDelta


class ZmqDriver:
    """Streams requests through one AsyncClient and fills in RequestRecords."""

    def __init__(self, address: str | None, timeout_s: float = 600.0) -> None:
        self.client = AsyncClient(address, timeout=timeout_s)
        self.started_at = time.perf_counter()

    def now(self) -> float:
        """Seconds since the run began (the records' time base)."""
        return time.perf_counter() - self.started_at

    async def stats(self) -> dict[str, Any]:
        """A stats snapshot without the per-request rows or the block map."""
        return await self.client.stats(include_requests=False, include_block_map=False)

    async def send(
        self,
        record: RequestRecord,
        prompt_token_ids: list[int] | None,
        prompt: str | None,
        max_tokens: int,
    ) -> list[int]:
        """Run one request to completion, filling `record`; returns the generated token ids."""
        params = {"max_tokens": max_tokens, "ignore_eos": True, "temperature": 0.0}
        output_ids: list[int] = []
        record.sent_s = self.now()
        try:
            events = self.client.stream(
                prompt if prompt_token_ids is None else None,
                prompt_token_ids=prompt_token_ids,
                params=params,
            )
            async with contextlib.aclosing(events) as stream:
                async for event in stream:
                    if isinstance(event, Accepted):
                        record.num_prompt_tokens = event.num_prompt_tokens
                    elif isinstance(event, TokenDelta) and event.token_ids:
                        record.note_output(self.now())
                        output_ids.extend(event.token_ids)
                    elif isinstance(event, Finished):
                        record.end(self.now(), event.finish_reason)
                        record.num_output_tokens = len(event.token_ids)
                        record.num_cached_tokens = event.usage.get("cached_tokens", 0)
                        record.server_timings = dict(event.timings)
                        record.server_waits = event.breakdown
                        return list(event.token_ids) or output_ids
        except Exception as error:  # any failure is counted, never dropped
            record.fail(f"{type(error).__name__}: {error}", self.now())
            return output_ids
        record.fail("the stream ended without a finished message")
        return output_ids

    async def close(self) -> None:
        """Close the client's socket."""
        await self.client.close()
