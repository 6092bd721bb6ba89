"""What one engine step did and how long each phase took (no torch).

The daemon's metrics and `llmd top` read these to separate prefill from decode work and
to show where step time goes: schedule, grammar, prepare, forward, sample.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmd.engine.spec_decode_counts import SpecDecodeCounts


@dataclass(frozen=True)
class StepStats:
    """One step's token counts, batch composition and phase timings (seconds)."""

    started_at: float
    """time.monotonic() when the step began."""
    num_prefill_tokens: int
    num_decode_tokens: int
    num_prefill_seqs: int
    num_decode_seqs: int
    num_preempted: int
    num_running: int
    num_waiting: int
    schedule_s: float
    prepare_s: float
    forward_s: float
    sample_s: float
    total_s: float
    kv_context_tokens: int = 0
    """Context tokens whose K/V were read by attention this step (bandwidth accounting)."""
    num_sampling_seqs: int = 0
    """Sequences that sampled a token this step: the rows the output projection ran on."""
    grammar_s: float = 0.0
    """Host time filling the step's grammar masks (structured outputs), after scheduling
    and before `prepare_s`; zero for a step without a constrained row."""
    num_experts_touched: int = 0
    """(MoE layer, expert) pairs this step's tokens were routed to: the experts whose weights
    it read (0 for a dense model)."""
    device_gap_s: float | None = None
    """Device idle time from the previous step's end to this step's start, from CUDA
    events (None on CPU): the host gap the device really saw, measured the same way with
    async scheduling on or off (the daemon's idle_gap, between step calls, is host time)."""
    spec_decode: SpecDecodeCounts | None = None
    """Speculative decoding's drafts and accepted tokens this step; None when it is off."""

    @property
    def num_tokens(self) -> int:
        """Tokens computed in the step."""
        return self.num_prefill_tokens + self.num_decode_tokens
