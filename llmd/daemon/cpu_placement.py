"""Which CPU cores run the forward pass and which run everything else the daemon does.

The forward pass on CPU is an OpenMP team that meets at a barrier after every operator:
one worker preempted by a text, I/O or HTTP thread (or by the load generator) stalls the
whole team, so a busy daemon ran its decode steps far slower than the engine alone. Like
vLLM on CPU, the daemon therefore keeps a core for serving and pins the forward pass's
threads to the others, by default once it may use four or more: on two cores, giving up
half the compute cost more than the interference (measured with the peer benchmark:
unpinned two threads kept 1.58 and 1.74 req/s within the SLO at 2/s and 3/s, pinned one
thread 1.34 and 1.17; docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass

from llmd.errors import InvalidParameterError

logger = logging.getLogger(__name__)

MIN_CPUS_TO_RESERVE = 4
"""By default one core is kept for serving only when the daemon may use at least this many."""


@dataclass(frozen=True)
class CpuPlacement:
    """The cores of the forward pass and of the serving threads (may overlap: no split)."""

    forward_cpu_ids: tuple[int, ...]
    """Cores of the engine thread and its OpenMP workers."""
    serving_cpu_ids: tuple[int, ...]
    """Cores of the I/O, text, tokenizer and connection-gate threads and the HTTP process."""

    @property
    def is_split(self) -> bool:
        """True when the forward pass has cores of its own."""
        return not set(self.forward_cpu_ids) & set(self.serving_cpu_ids)


def allowed_cpu_ids() -> tuple[int, ...]:
    """The cores this process may run on (sorted); all of them where affinity is unknown."""
    if hasattr(os, "sched_getaffinity"):
        return tuple(sorted(os.sched_getaffinity(0)))
    return tuple(range(os.cpu_count() or 1))


def plan_placement(cpu_ids: tuple[int, ...], num_reserved: int | None) -> CpuPlacement:
    """Keep `num_reserved` cores (None: one, given MIN_CPUS_TO_RESERVE) off the forward pass."""
    if num_reserved is None:
        num_reserved = 1 if len(cpu_ids) >= MIN_CPUS_TO_RESERVE else 0
    if num_reserved > 0 and num_reserved >= len(cpu_ids):
        raise InvalidParameterError(
            f"{num_reserved} reserved cores leave none of this process's {len(cpu_ids)} "
            "for the forward pass",
            "reserved_cpus",
        )
    if num_reserved == 0:
        return CpuPlacement(cpu_ids, cpu_ids)
    return CpuPlacement(cpu_ids[num_reserved:], cpu_ids[:num_reserved])


def pin_current_thread(cpu_ids: tuple[int, ...]) -> bool:
    """Restrict the calling thread (and the threads it starts later) to `cpu_ids`."""
    if not hasattr(os, "sched_setaffinity"):
        return False
    try:
        os.sched_setaffinity(0, cpu_ids)  # Linux: 0 is the calling thread only
    except OSError as error:
        logger.warning("cannot pin a thread to cores %s: %s", list(cpu_ids), error)
        return False
    return True


def pin_process(pid: int, cpu_ids: tuple[int, ...]) -> None:
    """Restrict another process's main thread (and the threads it starts) to `cpu_ids`."""
    if hasattr(os, "sched_setaffinity"):
        with contextlib.suppress(OSError):  # it may already have exited
            os.sched_setaffinity(pid, cpu_ids)
