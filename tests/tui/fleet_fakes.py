"""Three fake daemons for the fleet tests of `llmd top`, each under its own load.

Daemon k's snapshot i is `busy_wire(i)` with its queue, KV use, decode rate and latencies
scaled by k, so the fleet table's rows differ and the totals can be checked by hand.
"""

from __future__ import annotations

from llmd.protocol import StatsSnapshot
from llmd.tui.top.fleet_app import create_fleet_app
from tests.tui.fake_client import FakeAsyncClient
from tests.tui.sample_snapshots import busy_wire, typed
from tests.tui.waiting import settle, wait_for

FLEET_ADDRESSES = ["tcp://10.0.0.1:7070", "tcp://10.0.0.2:7070", "ipc:///run/llmd/gpu2.sock"]


def fleet_snapshot(
    daemon_index: int, step: int, timeline_request_id: str | None = None
) -> StatsSnapshot:
    """Snapshot `step` of fake daemon `daemon_index` (0, 1 or 2)."""
    wire = busy_wire(step, timeline_request_id)
    scale = daemon_index + 1
    wire["queue"]["waiting"] = step * scale
    wire["queue"]["running"] = 2 * scale
    wire["kv"]["num_used"] = 30 * scale
    wire["kv"]["num_free"] = 128 - 30 * scale - 4
    wire["kv"]["prefix_hit_tokens"] = 100 * scale
    wire["throughput"]["generation_tokens_per_s"] = 100.0 * scale
    wire["latency"]["ttft"]["p50"] = 0.05 * scale
    wire["latency"]["ttft"]["p99"] = 0.2 * scale
    wire["latency"]["tpot"]["p50"] = 0.004 * scale
    wire["latency"]["tpot"]["p99"] = 0.008 * scale
    wire["daemon"]["address"] = FLEET_ADDRESSES[daemon_index]
    return typed(wire)


def make_fleet(clock=lambda: 0.0, addresses=FLEET_ADDRESSES, wrap=lambda client, address: client):
    """A fleet app over one FakeAsyncClient per address (each wrapped by `wrap`)."""
    clients = [FakeAsyncClient() for _ in addresses]
    factories = [lambda c=c, a=a: wrap(c, a) for c, a in zip(clients, addresses)]
    app = create_fleet_app(factories, list(addresses), interval_s=0.25, clock=clock,
                           slow_redraw_s=0.0)  # fmt: skip
    return app, clients


async def deliver(pilot, client: FakeAsyncClient, daemon_index: int, step: int) -> None:
    """Push one snapshot to one fake daemon and wait until the app applied it."""
    app = pilot.app
    snapshot = fleet_snapshot(daemon_index, step, app.feeds[daemon_index].timeline_request_id)
    await client.push(snapshot)
    await wait_for(pilot, lambda: app.models[daemon_index].snapshot is snapshot)
    await settle(pilot)
