"""Sends one benchmark request to a daemon over ZeroMQ and records its timings.

The same AsyncClient that `llmd chat` uses, streaming, so the measured latency includes
everything a real client sees: socket, detokenization, and the daemon's queues.
"""

from __future__ import annotations

import contextlib

from llmd.bench.datasets import Turn
from llmd.bench.driver import Driver
from llmd.bench.request_record import RequestRecord
from llmd.client import AsyncClient
from llmd.protocol import Accepted, Finished, TokenDelta
from llmd.protocol.stats_snapshot import StatsSnapshot


class ZmqDriver(Driver):
    """Streams requests through one AsyncClient and fills in RequestRecords."""

    def __init__(self, address: str | None, timeout_s: float = 600.0) -> None:
        super().__init__()
        self.client = AsyncClient(address, timeout=timeout_s)

    async def stats(self) -> StatsSnapshot:
        """A stats snapshot without the per-request rows or the block map."""
        return await self.client.stats(include_requests=False, include_block_map=False)

    async def _stream(
        self, record: RequestRecord, prompt_ids: list[int] | None, turn: Turn, output_ids: list[int]
    ) -> None:
        """Stream one request; on finish `output_ids` become the daemon's full list."""
        params = {"max_tokens": turn.max_tokens, "ignore_eos": True, "temperature": 0.0}
        events = self.client.stream(
            turn.prompt if prompt_ids is None else None, prompt_token_ids=prompt_ids, params=params
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
                    if event.token_ids:
                        output_ids[:] = event.token_ids
                    return
        record.fail("the stream ended without a finished message")

    async def close(self) -> None:
        """Close the client's socket."""
        await self.client.close()
