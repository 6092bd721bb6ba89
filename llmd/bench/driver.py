"""What the ZeroMQ and HTTP benchmark drivers share: the run's clock and one request's frame.

A driver sends one request and fills its RequestRecord; the frame here stamps when it was
sent and turns any failure into a failed record, so no error of either transport is lost.
"""

from __future__ import annotations

import time

from llmd.bench.datasets import Turn
from llmd.bench.request_record import RequestRecord
from llmd.protocol.stats_snapshot import StatsSnapshot


class Driver:
    """Base of the benchmark drivers: subclasses stream one request in `_stream`."""

    def __init__(self) -> None:
        self.started_at = time.perf_counter()

    def now(self) -> float:
        """Seconds since the run began (the records' time base)."""
        return time.perf_counter() - self.started_at

    async def stats(self) -> StatsSnapshot | None:
        """The daemon's stats snapshot; None where the server has none (not llmd's daemon)."""
        return None

    async def send(
        self, record: RequestRecord, prompt_ids: list[int] | None, turn: Turn
    ) -> list[int]:
        """Run `turn` to completion, filling `record`; returns the generated token ids.

        `prompt_ids` is the whole prompt as ids (a session's history included), or None to
        send the turn's text.
        """
        output_ids: list[int] = []
        record.sent_s = self.now()
        try:
            await self._stream(record, prompt_ids, turn, output_ids)
        except Exception as error:  # any failure is counted, never dropped
            record.fail(f"{type(error).__name__}: {error}", self.now())
        return output_ids

    async def _stream(
        self, record: RequestRecord, prompt_ids: list[int] | None, turn: Turn, output_ids: list[int]
    ) -> None:
        """Stream one request, filling `record` and appending generated ids to `output_ids`."""
        raise NotImplementedError

    async def close(self) -> None:
        """Release the transport."""
