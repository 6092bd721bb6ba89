"""A client probes the daemon after at most 2 s of silence, whatever its timeout."""

from __future__ import annotations

import llmd.client.wire as wire
from llmd.client.wire import Liveness


def test_a_long_timeout_still_probes_after_two_seconds(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(wire.time, "monotonic", lambda: clock[0])
    liveness = Liveness(timeout=60.0)
    clock[0] += 1.9
    assert not liveness.should_probe()
    assert liveness.wait_s() <= 0.11  # it wakes up in time for the probe
    clock[0] += 0.1
    assert liveness.should_probe()  # before: only after 30 s (half the timeout)
    liveness.probe_sent()
    assert not liveness.should_probe() and not liveness.is_dead()
    clock[0] += 58.0
    assert liveness.is_dead()


def test_a_short_timeout_probes_at_half_of_it(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(wire.time, "monotonic", lambda: clock[0])
    liveness = Liveness(timeout=2.0)
    clock[0] += 0.99
    assert not liveness.should_probe()
    clock[0] += 0.01
    assert liveness.should_probe()
    liveness.heard()
    assert not liveness.should_probe()
