"""Waiting queues against a plain-list model: order, length, removal, preempted count, memory."""

from __future__ import annotations

import random

import pytest

from llmd.engine.request import RequestStatus
from llmd.engine.waiting_queue import COMPACT_MIN_STALE, FcfsQueue, PriorityQueue
from tests.engine.factories import make_request


class ListModel:
    """The obvious O(n) queue: a list kept in admission order."""

    def __init__(self, policy: str) -> None:
        self.policy = policy
        self.requests: list = []

    def order(self) -> list:
        if self.policy == "priority":
            return sorted(self.requests, key=lambda r: (r.priority, r.times.arrival))
        return list(self.requests)

    def push(self, request, front: bool = False) -> None:
        if front and self.policy == "fcfs":
            self.requests.insert(0, request)
        else:
            self.requests.append(request)

    def pop(self):
        head = self.order()[0]
        self.requests.remove(head)
        return head


def new_queue(policy: str):
    return PriorityQueue() if policy == "priority" else FcfsQueue()


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
@pytest.mark.parametrize("seed", range(6))
def test_random_operations_match_the_list_model(policy, seed):
    rng = random.Random(seed)
    queue, model = new_queue(policy), ListModel(policy)
    outside = []  # popped (running) requests that may be preempted back
    for step in range(3000):
        action = rng.random()
        if action < 0.35 or (not model.requests and not outside):
            request = make_request(priority=rng.randrange(3), arrival_time=float(step))
            request.status = RequestStatus.WAITING
            queue.push(request)
            model.push(request)
        elif action < 0.55 and model.requests:
            assert queue.peek() is model.order()[0]
            popped = queue.pop()
            assert popped is model.pop()
            outside.append(popped)
        elif action < 0.8 and model.requests:
            victim = rng.choice(model.requests)
            queue.remove(victim)
            model.requests.remove(victim)
            with pytest.raises(ValueError):
                queue.remove(victim)  # a second abort of the same request is refused
        elif outside:
            request = outside.pop(rng.randrange(len(outside)))
            request.status = RequestStatus.PREEMPTED
            queue.push_front(request)
            model.push(request, front=True)
        assert len(queue) == len(model.requests)
        assert list(queue) == model.order()
        expected_preempted = sum(r.status is RequestStatus.PREEMPTED for r in model.requests)
        assert queue.num_preempted == expected_preempted


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
def test_mass_aborts_leave_storage_proportional_to_the_live_queue(policy):
    queue = new_queue(policy)
    requests = [make_request(arrival_time=float(i)) for i in range(5000)]
    for request in requests:
        request.status = RequestStatus.WAITING
        queue.push(request)
    survivor = requests[0]  # the head stays, so stale entries cannot drain from the front
    for request in reversed(requests[1:]):
        queue.remove(request)
    storage = queue._queue if policy == "fcfs" else queue._heap
    assert len(queue) == 1
    assert len(storage) <= 2 * COMPACT_MIN_STALE
    assert queue.pop() is survivor and len(queue) == 0


def test_a_removed_request_pushed_again_is_waiting_once():
    queue = FcfsQueue()
    first, second = make_request(), make_request()
    for request in (first, second):
        request.status = RequestStatus.WAITING
        queue.push(request)
    queue.remove(first)
    queue.push(first)
    assert list(queue) == [second, first]
    assert [queue.pop(), queue.pop()] == [second, first]
    assert len(queue) == 0
