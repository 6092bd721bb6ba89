"""Which of llmd's C++ CPU ops a call dispatched, as torch's profiler records them."""

from __future__ import annotations

import torch


def llmd_ops_run(call):
    """(the llmd_cpu ops `call()` ran, in order, as torch's profiler saw them; its result):
    what a layer really dispatched, however it holds the ops."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        result = call()
    events = sorted(profile.events(), key=lambda event: event.time_range.start)
    names = [event.name.removeprefix("llmd_cpu::") for event in events]
    return [name for name, event in zip(names, events) if event.name != name], result
