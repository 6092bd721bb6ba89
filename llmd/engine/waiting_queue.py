"""Queues of requests waiting for admission, in FCFS or priority order.

Preempted requests must resume before newer arrivals, so both queues can put a request
back at the front of its order without rescanning the queue.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Iterator

from llmd.engine.request import Request


class FcfsQueue:
    """Arrival order; preempted requests go back to the front."""

    def __init__(self) -> None:
        self._queue: deque[Request] = deque()

    def push(self, request: Request) -> None:
        self._queue.append(request)

    def push_front(self, request: Request) -> None:
        self._queue.appendleft(request)

    def peek(self) -> Request:
        return self._queue[0]

    def pop(self) -> Request:
        return self._queue.popleft()

    def remove(self, request: Request) -> None:
        self._queue.remove(request)

    def __len__(self) -> int:
        return len(self._queue)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._queue)


class PriorityQueue:
    """Lowest `priority` first, then earliest arrival; removed entries are skipped lazily."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, float, int, Request]] = []
        self._counter = itertools.count()
        self._removed: set[int] = set()
        self._size = 0

    def push(self, request: Request) -> None:
        entry = (request.priority, request.times.arrival, next(self._counter), request)
        heapq.heappush(self._heap, entry)
        self._size += 1

    def push_front(self, request: Request) -> None:
        # The (priority, arrival) key already ranks a preempted request ahead of newer ones.
        self.push(request)

    def _drop_removed(self) -> None:
        while self._heap and id(self._heap[0][3]) in self._removed:
            self._removed.discard(id(heapq.heappop(self._heap)[3]))

    def peek(self) -> Request:
        self._drop_removed()
        return self._heap[0][3]

    def pop(self) -> Request:
        self._drop_removed()
        self._size -= 1
        return heapq.heappop(self._heap)[3]

    def remove(self, request: Request) -> None:
        if not any(entry[3] is request for entry in self._heap):
            raise ValueError(f"{request.request_id} is not waiting")
        self._removed.add(id(request))
        self._size -= 1

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Request]:
        live = [entry for entry in self._heap if id(entry[3]) not in self._removed]
        return (entry[3] for entry in sorted(live))


def make_waiting_queue(policy: str) -> FcfsQueue | PriorityQueue:
    """The queue for a scheduling policy name (fcfs or priority)."""
    return PriorityQueue() if policy == "priority" else FcfsQueue()
