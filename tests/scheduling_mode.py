"""The scheduling mode every test daemon runs in: the one switch, read here and nowhere else.

`LLMD_TEST_ASYNC_SCHEDULING=1` runs every daemon the tests start (real `llmd serve`
processes and in-process ones) with async scheduling; unset or `0`, with it off. The mode
is always passed explicitly, so the default pass is the same on CPU and CUDA. Tests that
cover both modes themselves parametrize over `MODES` and pass `serve_flags(mode)` or
`engine_kwargs(mode)`, which win over the run's mode.
"""

from __future__ import annotations

import os
from typing import Any

ENV_VAR = "LLMD_TEST_ASYNC_SCHEDULING"
_value = os.environ.get(ENV_VAR, "0")
if _value not in ("0", "1"):
    raise RuntimeError(f"{ENV_VAR} must be 0 or 1, got {_value!r}")
ASYNC_SCHEDULING = _value == "1"
"""This run's mode: what every harness that starts a daemon passes to it."""

MODES = (False, True)
"""Both modes, for tests that cover each one in every run (ids: `mode_id`)."""

ON_FLAG = "--async-scheduling"
OFF_FLAG = "--no-async-scheduling"


def mode_id(is_async: bool) -> str:
    """A parametrize id: "async" or "sync"."""
    return "async" if is_async else "sync"


def mode_name(is_async: bool = ASYNC_SCHEDULING) -> str:
    """The mode as the test report's header shows it: "on" or "off"."""
    return "on" if is_async else "off"


def serve_flags(is_async: bool = ASYNC_SCHEDULING) -> list[str]:
    """The `llmd serve` flag for the mode (the last such flag on a command line wins)."""
    return [ON_FLAG if is_async else OFF_FLAG]


def engine_kwargs(is_async: bool = ASYNC_SCHEDULING) -> dict[str, Any]:
    """The EngineConfig keyword for the mode (in-process daemons)."""
    return {"async_scheduling": is_async}


def daemon_mode(address: str) -> bool:
    """The scheduling mode the engine of the `llmd serve` at `address` really runs."""
    from llmd.client import Client

    with Client(address) as client:
        facts = client.stats(include_requests=False, include_block_map=False).daemon
    return facts.async_scheduling
