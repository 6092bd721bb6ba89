"""What the daemon says about itself: the health reply and a snapshot's "daemon" section.

Both are read from the daemon's public state on the I/O thread; they change nothing.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from llmd import __version__
from llmd.protocol import PROTOCOL_VERSION, HealthReply, HealthRequest
from llmd.protocol.stats_snapshot import CpuPlacementSection, DaemonSection

if TYPE_CHECKING:
    from llmd.daemon.server import Daemon


def daemon_facts(daemon: Daemon) -> DaemonSection:
    """The "daemon" section of a stats snapshot: the engine's facts and the daemon's state."""
    gate = daemon.gate
    admission = daemon.engine_loop.admission
    placement = daemon.placement
    return DaemonSection.of(
        daemon.facts,
        version=__version__,
        protocol_version=PROTOCOL_VERSION,
        pid=os.getpid(),
        address=str(daemon.address),
        instance_id=daemon.instance_id,
        state=daemon.state,
        error=daemon.dead_message,
        uptime_s=time.monotonic() - daemon.started_at,
        num_in_flight=len(daemon.routes),
        max_queued_requests=daemon.options.max_queued_requests,
        num_subscriptions=len(daemon.stats.subscriptions),
        admission=daemon.options.admission,
        num_refused_by_admission=0 if admission is None else admission.num_refused,
        log_file=daemon.options.log_file,
        cpu_placement=None
        if placement is None
        else CpuPlacementSection(placement.forward_cpu_ids, placement.serving_cpu_ids),
        num_connections=None if gate is None else gate.num_connections,
        max_connections=None if gate is None else gate.max_connections,
        num_refused_connections=None if gate is None else gate.num_refused,
        tool_call_parser=daemon.tool_call_parser,
    )


def health_reply(daemon: Daemon, peer: bytes, request: HealthRequest) -> HealthReply:
    """The answer to `peer`'s health probe (naming which of its request ids are unknown)."""
    unknown = [
        request_id
        for request_id in request.request_ids or ()
        if daemon.routes.engine_id(peer, request_id) is None
        and not daemon.stats.knows(peer, request_id)
    ]
    return HealthReply(
        id=request.id,
        status=daemon.state,
        is_healthy=daemon.state == "ok",
        pid=os.getpid(),
        model=daemon.facts.model,
        address=str(daemon.address),
        uptime_s=time.monotonic() - daemon.started_at,
        num_in_flight=len(daemon.routes),
        version=__version__,
        protocol_version=PROTOCOL_VERSION,
        message=daemon.dead_message,
        instance_id=daemon.instance_id,
        max_message_bytes=daemon.options.max_message_bytes,
        unknown_request_ids=unknown,
    )
