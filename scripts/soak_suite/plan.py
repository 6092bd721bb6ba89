"""The scenario table: each scenario's function and its full and quick counts.

`scripts/soak.py` and tests/soak/ both run scenarios through `run_scenario`, so a count
changed here changes what both measure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scripts.soak_suite.bad_requests import run_bad_requests
from scripts.soak_suite.connections import run_connections, run_connections_at_hard_limit
from scripts.soak_suite.crash import run_crash
from scripts.soak_suite.daemon_process import DaemonProcess
from scripts.soak_suite.lifecycles import run_lifecycles
from scripts.soak_suite.malformed import run_malformed
from scripts.soak_suite.result import ScenarioResult
from scripts.soak_suite.streams import run_aborts, run_concurrency
from scripts.soak_suite.subscriptions import run_subscriptions

MAX_MESSAGE_BYTES = 1 << 20
"""The soak daemon's --max-message-bytes: oversize frames stay cheap to send by the thousand."""
DAEMON_ARGS = ("--max-message-bytes", str(MAX_MESSAGE_BYTES))

# name -> (function, full kwargs, quick kwargs); run in this order (crash last: it kills).
SCENARIOS: dict[str, tuple[Callable[..., ScenarioResult], dict[str, Any], dict[str, Any]]] = {
    "concurrency": (run_concurrency, {"num_streams": 256}, {"num_streams": 64}),
    "aborts": (run_aborts, {"num_aborts": 100}, {"num_aborts": 10}),
    "lifecycles": (run_lifecycles, {"num_lifecycles": 10_000}, {"num_lifecycles": 300}),
    "malformed": (
        run_malformed,
        {"num_frames": 100_000, "max_message_bytes": MAX_MESSAGE_BYTES},
        {"num_frames": 3_000, "max_message_bytes": MAX_MESSAGE_BYTES},
    ),
    "bad_requests": (run_bad_requests, {"num_rounds": 2}, {"num_rounds": 1}),
    "stats": (
        run_subscriptions,
        {"num_subscriptions": 64, "num_samples": 60},
        {"num_subscriptions": 64, "num_samples": 20, "sample_cap_s": 5.0},
    ),
    "connections": (
        run_connections,
        {"num_connections": 5_000},
        {"num_connections": 1_500},
    ),
    "connections_hard_limit": (
        run_connections_at_hard_limit,
        {"num_connections": 5_000, "hard_nofile": 1024},
        {"num_connections": 1_500, "hard_nofile": 1024},
    ),
    "crash": (run_crash, {"num_kills": 20, "num_streams": 32}, {"num_kills": 1, "num_streams": 8}),
}


def run_scenario(
    name: str, daemon: DaemonProcess, is_quick: bool = False, **overrides: Any
) -> ScenarioResult:
    """Run one scenario on `daemon` (restarted first if an earlier scenario killed it)."""
    function, full, quick = SCENARIOS[name]
    restarted = False
    if not daemon.is_running():
        daemon.start()
        restarted = True
    result = function(daemon, **{**(quick if is_quick else full), **overrides})
    if restarted:
        result.counts["daemon_restarted_before"] = True
    return result
