"""Plays a dataset against a driver: sessions start on the arrival schedule, turns chain.

Open loop (arrival times) and closed loop (a concurrency cap) combine: a request is sent
at its arrival time or when a slot frees, whichever is later, as a real client pool would.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence

from llmd.bench.datasets import Session
from llmd.bench.driver import Driver
from llmd.bench.request_record import RequestRecord


class LoadGenerator:
    """Sends every session's turns through `driver` and collects one record per turn."""

    def __init__(
        self,
        driver: Driver,
        sessions: Sequence[Session],
        offsets: Sequence[float],
        max_concurrency: int | None = None,
        on_done: Callable[[RequestRecord], None] | None = None,
    ) -> None:
        if len(offsets) != len(sessions):
            raise ValueError("one arrival offset per session is needed")
        self.driver = driver
        self.sessions = sessions
        self.offsets = offsets
        self.slots = asyncio.Semaphore(max_concurrency) if max_concurrency else None
        self.on_done = on_done
        self.records: list[RequestRecord] = []

    async def run(self) -> list[RequestRecord]:
        """Send everything and wait for every reply; records come back in send order."""
        start = self.driver.now()
        await asyncio.gather(
            *(
                self._session(number, session, start + offset)
                for number, (session, offset) in enumerate(zip(self.sessions, self.offsets))
            )
        )
        return sorted(self.records, key=lambda record: (record.sent_s, record.index))

    async def _session(self, session_index: int, session: Session, start_s: float) -> None:
        delay = start_s - self.driver.now()
        if delay > 0 and math.isfinite(delay):
            await asyncio.sleep(delay)
        history: list[int] = []
        for number, turn in enumerate(session.turns):
            scheduled_s = start_s if number == 0 else self.driver.now()
            record = RequestRecord(len(self.records), scheduled_s, session_index, number)
            self.records.append(record)
            prompt_ids = None if turn.prompt is not None else history + list(turn.prompt_token_ids)
            if self.slots is not None:
                async with self.slots:
                    output_ids = await self.driver.send(record, prompt_ids, turn)
            else:
                output_ids = await self.driver.send(record, prompt_ids, turn)
            if self.on_done is not None:
                self.on_done(record)
            if not record.is_ok:
                self._skip(session_index, range(number + 1, len(session.turns)))
                return  # the conversation cannot go on without its reply
            if prompt_ids is not None:
                history = prompt_ids + output_ids

    def _skip(self, session_index: int, turns: range) -> None:
        """Record the turns a failed session can no longer send, as failed requests."""
        for turn in turns:
            now = self.driver.now()
            record = RequestRecord(len(self.records), now, session_index, turn, now, finished_s=now)
            record.fail("not sent: an earlier turn of its session failed")
            self.records.append(record)
            if self.on_done is not None:
                self.on_done(record)
