"""Queues of requests waiting for admission, in FCFS or priority order.

Preempted requests must resume before newer arrivals, so both queues can put a request
back at the front of its order without rescanning the queue. Removal (an abort) is O(1)
too: it forgets the request's entry, which is skipped when it reaches the head, so a
client aborting thousands of queued requests cannot stall the engine thread.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Iterable, Iterator

from llmd.engine.request import Request, RequestStatus

COMPACT_MIN_STALE = 64
"""Stale (removed) entries are swept out once there are this many and more than live ones,
so memory stays proportional to the live queue whatever the abort pattern (amortised O(1))."""


class _LazyQueue:
    """Live-entry bookkeeping shared by both orders: request id -> the token of its entry.

    An entry whose token no longer matches (the request was removed, or pushed again) is
    stale. Also counts the preempted requests waiting, for stats, without a scan.
    """

    def __init__(self) -> None:
        self._tokens = itertools.count()
        self._live: dict[str, int] = {}
        self._num_stale = 0
        self._preempted_ids: set[str] = set()
        """Live entries whose request was preempted (status PREEMPTED when pushed)."""

    @property
    def num_preempted(self) -> int:
        """Waiting requests that were preempted and await recomputation."""
        return len(self._preempted_ids)

    def _new_token(self, request: Request) -> int:
        if request.request_id in self._live:
            self._forget(request.request_id)
        token = next(self._tokens)
        self._live[request.request_id] = token
        if request.status is RequestStatus.PREEMPTED:
            self._preempted_ids.add(request.request_id)
        return token

    def _forget(self, request_id: str) -> None:
        del self._live[request_id]
        self._num_stale += 1
        self._preempted_ids.discard(request_id)

    def _is_live(self, token: int, request: Request) -> bool:
        return self._live.get(request.request_id) == token

    def _should_compact(self) -> bool:
        return self._num_stale >= COMPACT_MIN_STALE and self._num_stale > len(self._live)

    def remove(self, request: Request) -> None:
        """Drop a waiting request (O(1)); ValueError if it is not waiting here."""
        if request.request_id not in self._live:
            raise ValueError(f"{request.request_id} is not waiting")
        self._forget(request.request_id)
        if self._should_compact():
            self._compact()

    def _compact(self) -> None:
        raise NotImplementedError

    def _live_entries(self, entries: Iterable[tuple[int, Request]]) -> Iterator[Request]:
        """The requests of (token, request) `entries` that are still live, in order."""
        return (request for token, request in entries if self._is_live(token, request))

    def _has_entries(self) -> bool:
        raise NotImplementedError

    def _head(self) -> tuple[int, Request]:
        """(token, request) of the entry first in order, live or stale."""
        raise NotImplementedError

    def _pop_head(self) -> Request:
        raise NotImplementedError

    def _drop_stale_head(self) -> None:
        while self._has_entries() and not self._is_live(*self._head()):
            self._pop_head()
            self._num_stale -= 1

    def peek(self) -> Request:
        """The request first in order (IndexError when none waits)."""
        self._drop_stale_head()
        return self._head()[1]

    def pop(self) -> Request:
        """Take the request first in order out (IndexError when none waits)."""
        self._drop_stale_head()
        request = self._pop_head()
        del self._live[request.request_id]
        self._preempted_ids.discard(request.request_id)
        return request

    def __len__(self) -> int:
        return len(self._live)


class FcfsQueue(_LazyQueue):
    """Arrival order; preempted requests go back to the front."""

    def __init__(self) -> None:
        super().__init__()
        self._queue: deque[tuple[int, Request]] = deque()

    def push(self, request: Request) -> None:
        self._queue.append((self._new_token(request), request))

    def push_front(self, request: Request) -> None:
        self._queue.appendleft((self._new_token(request), request))

    def _has_entries(self) -> bool:
        return bool(self._queue)

    def _head(self) -> tuple[int, Request]:
        return self._queue[0]

    def _pop_head(self) -> Request:
        return self._queue.popleft()[1]

    def _compact(self) -> None:
        self._queue = deque(entry for entry in self._queue if self._is_live(*entry))
        self._num_stale = 0

    def __iter__(self) -> Iterator[Request]:
        return self._live_entries(self._queue)


class PriorityQueue(_LazyQueue):
    """Lowest `priority` first, then earliest arrival."""

    def __init__(self) -> None:
        super().__init__()
        self._heap: list[tuple[int, float, int, Request]] = []

    def push(self, request: Request) -> None:
        entry = (request.priority, request.times.arrival, self._new_token(request), request)
        heapq.heappush(self._heap, entry)

    def push_front(self, request: Request) -> None:
        # The (priority, arrival) key already ranks a preempted request ahead of newer ones.
        self.push(request)

    def _has_entries(self) -> bool:
        return bool(self._heap)

    def _head(self) -> tuple[int, Request]:
        _, _, token, request = self._heap[0]
        return token, request

    def _pop_head(self) -> Request:
        return heapq.heappop(self._heap)[3]

    def _compact(self) -> None:
        self._heap = [entry for entry in self._heap if self._is_live(entry[2], entry[3])]
        heapq.heapify(self._heap)
        self._num_stale = 0

    def __iter__(self) -> Iterator[Request]:
        live = sorted(entry for entry in self._heap if self._is_live(entry[2], entry[3]))
        return self._live_entries((entry[2], entry[3]) for entry in live)


def make_waiting_queue(policy: str) -> FcfsQueue | PriorityQueue:
    """The queue for a scheduling policy name (fcfs or priority)."""
    return PriorityQueue() if policy == "priority" else FcfsQueue()
