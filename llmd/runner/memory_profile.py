"""What a worst-case step costs in GPU memory, and the KV-cache budget that leaves.

The KV cache gets what remains of the memory budget once weights, the largest step and the
CUDA graphs are paid for. The step's cost is counted as the caching allocator's peak
*reserved* memory, not its peak allocated: blocks the allocator keeps but cannot reuse
(fragmentation) are just as unavailable to the KV cache. Memory the process took outside
the allocator (cuBLAS workspaces, loaded kernels) is counted too.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024**2


@dataclass(frozen=True)
class MemoryProfile:
    """Byte counts measured around one worst-case step, and the budget they imply."""

    free_at_start: float
    """Device memory free before anything of ours was loaded."""
    utilization: float
    """Fraction of `free_at_start` llmd may use (gpu_memory_utilization)."""
    weights: float
    """Allocated after loading the model: the weights."""
    peak_reserved: float
    """The allocator's peak reservation during the step (weights, activations, sampling,
    the scratch KV cache, and fragmentation)."""
    peak_allocated: float
    """The allocator's peak allocation during the forward pass (for the graph estimate)."""
    scratch: float
    """The scratch KV cache the step wrote to: part of the KV budget, not overhead."""
    non_torch: float
    """Taken by the process outside the allocator since start (free drop minus reserved)."""
    graph_reserve: float = 0.0
    """Set aside for the CUDA graphs' pool, captured after sizing."""

    @property
    def step_peak(self) -> float:
        """Weights plus the worst step's peak, fragmentation included, without scratch KV."""
        return self.peak_reserved - self.scratch

    @property
    def activations(self) -> float:
        """Peak forward activations (allocated), for scaling the graph reserve."""
        return max(self.peak_allocated - self.scratch - self.weights, 0.0)

    @property
    def kv_budget(self) -> float:
        """Bytes the KV cache may take: the budget less everything else; never negative."""
        budget = (
            self.free_at_start * self.utilization
            - self.step_peak
            - self.non_torch
            - self.graph_reserve
        )
        return max(budget, 0.0)

    def describe(self) -> str:
        """One log line, in MiB."""
        return (
            f"memory profile: weights {self.weights / MIB:.0f} MiB, step peak (reserved) "
            f"{(self.step_peak - self.weights) / MIB:.0f} MiB, outside the allocator "
            f"{self.non_torch / MIB:.0f} MiB, graph reserve {self.graph_reserve / MIB:.0f} MiB, "
            f"KV budget {self.kv_budget / MIB:.0f} MiB"
        )


def non_torch_bytes(free_at_start: float, free_now: float, reserved_now: float) -> float:
    """Memory the process holds outside the caching allocator: the drop in free memory
    since start that the allocator's current reservation does not explain."""
    return max(free_at_start - free_now - reserved_now, 0.0)
