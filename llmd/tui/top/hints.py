"""Rules that recognise known serving bottlenecks in the view state and say what to try.

Each rule is a pure function of a TopView returning a Hint or None, so every threshold is
unit-tested on hand-built views; the hints panel shows whichever rules fire.
"""

from __future__ import annotations

from collections.abc import Callable

from llmd.tui.formatting import fmt_percent, fmt_seconds
from llmd.tui.top.view import Hint, TopView
from llmd.wait_breakdown import KV_BLOCKS, MAX_NUM_SEQS, TOKEN_BUDGET

KV_FULL_USAGE = 0.95
"""Usage from which the KV cache counts as full."""
QUEUE_GROWTH_PER_S = 0.5
"""Waiting requests per second of growth that counts as falling behind."""
QUEUE_MIN_WAITING = 4
ITL_SPIKE_RATIO = 4.0
"""ITL p99 / p50 from which inter-token latency counts as spiky."""
ITL_SPIKE_MIN_S = 0.005
HOST_GAP_SHARE = 0.2
"""Idle gap between steps, as a share of step time, that counts as host-bound."""
HOST_GAP_MIN_MS = 0.5
BUSY_FRACTION = 0.8
TREND_TEXT = "10s"
"""How the trend window of llmd.tui.top.model reads in a hint."""
LOW_EFFICIENCY = 0.2
"""Below this share of peak bandwidth, a busy engine counts as inefficient."""
WAIT_MIN_S = 0.5
"""Seconds a request must have waited before what holds it counts as a bottleneck."""
LOW_ACCEPTANCE = 0.3
"""Share of draft tokens accepted below which speculation does not pay at a large batch."""
SPEC_LARGE_BATCH = 8
"""Running requests from which a step has little spare compute for rejected drafts."""
USELESS_ACCEPTANCE = 0.1
"""Share accepted below which speculation does not pay at any batch."""


def kv_occupancy(view: TopView) -> float | None:
    """Share of KV blocks not free: owned by requests or holding cached prefixes."""
    kv = view.kv
    if kv.num_total > 0:
        return 1.0 - kv.num_free / kv.num_total
    return kv.usage


def kv_full_with_preemptions(view: TopView) -> Hint | None:
    """The KV cache is full and limits the batch: requests wait or are preempted for blocks.

    Free blocks count, not used ones: blocks holding cached prefixes fill the cache too.
    Neither a growing queue nor fresh preemptions are needed: a steady queue behind a
    full cache, with few requests running, is the KV-limited state.
    """
    kv, queue = view.kv, view.queue
    occupancy = kv_occupancy(view)
    if occupancy is None or occupancy < KV_FULL_USAGE:
        return None
    is_preempting = queue.recent_preemptions > 0 or queue.preempted > 0
    if not is_preempting and queue.waiting == 0:
        return None
    counts = (
        f"{kv.num_free} of {kv.num_total} blocks free"
        if kv.num_total
        else f"{fmt_percent(occupancy)} full"
    )
    if is_preempting:
        cause = f"{queue.recent_preemptions} preemptions in {TREND_TEXT} (recomputed)"
    else:
        cause = f"{queue.waiting} waiting, {queue.running} running"
    if any(row.waiting_on == KV_BLOCKS for row in view.requests):
        cause += ", the queue's head waiting on kv_blocks"
    return Hint(
        "kv_full",
        f"KV cache full ({counts}), {cause}: add blocks (--num-blocks, "
        "--kv-cache-memory-gib) or lower --max-num-seqs.",
    )


def queue_growing(view: TopView) -> Hint | None:
    """Requests arrive faster than the engine drains them."""
    queue = view.queue
    growth = queue.waiting_growth_per_s
    if growth is None or growth < QUEUE_GROWTH_PER_S or queue.waiting < QUEUE_MIN_WAITING:
        return None
    return Hint(
        "queue_growing",
        f"Queue grows {growth:.1f}/s ({queue.waiting} waiting): arrivals outpace the engine "
        "and TTFT keeps rising. Reduce load or max_tokens, or raise --max-num-seqs.",
    )


def prefill_starving_decode(view: TopView) -> Hint | None:
    """Inter-token latency spikes while prefill takes most of each step's tokens."""
    p50, _, p99 = view.latency.percentiles.get("itl", (None, None, None))
    steps = view.steps
    if p50 is None or p99 is None or p50 <= 0 or p99 < ITL_SPIKE_MIN_S:
        return None
    prompt, generation = steps.prompt_tokens_per_step, steps.generation_tokens_per_step
    if prompt is None or generation is None or prompt <= generation:
        return None
    ratio = p99 / p50
    if ratio < ITL_SPIKE_RATIO:
        return None
    return Hint(
        "prefill_starving_decode",
        f"ITL p99 {fmt_seconds(p99)} is {ratio:.1f}× p50, prefill {prompt:.0f} of "
        f"{prompt + generation:.0f} tokens/step: prompt chunks stall decodes. Lower "
        "--max-num-batched-tokens.",
    )


def host_gaps(view: TopView) -> Hint | None:
    """The engine waits on the host between steps (Python overhead, tokenization, I/O)."""
    gap_ms = view.steps.phase_ms.get("idle_gap")
    step_mean_s = view.steps.step_mean_s
    if gap_ms is None or step_mean_s is None or step_mean_s <= 0 or gap_ms < HOST_GAP_MIN_MS:
        return None
    share = gap_ms / (step_mean_s * 1000 + gap_ms)
    if share < HOST_GAP_SHARE:
        return None
    return Hint(
        "host_gaps",
        f"{gap_ms:.1f} ms host gap between steps ({fmt_percent(share)} of busy time): the "
        "device idles while the host works. Bigger batches amortise it.",
    )


def busy_but_inefficient(view: TopView) -> Hint | None:
    """The engine is always stepping, yet decode reads memory far below the device's peak."""
    efficiency = view.efficiency
    busy, achieved, peak = (
        efficiency.busy_fraction,
        efficiency.decode_gb_per_s,
        efficiency.peak_gb_per_s,
    )
    if busy is None or achieved is None or not peak or busy < BUSY_FRACTION:
        return None
    share = achieved / peak
    if share >= LOW_EFFICIENCY:
        return None
    return Hint(
        "busy_but_inefficient",
        f"Busy {fmt_percent(busy)} of the time, decode at {fmt_percent(share)} of peak "
        "bandwidth: overhead or tiny batches dominate steps.",
        severity="info",
    )


def _held_by(view: TopView, reason: str) -> tuple[int, float]:
    """Waiting requests the scheduler holds back by `reason` (for WAIT_MIN_S or more), and
    the longest wait among them, from the request table's `waiting_on`."""
    waits = [
        row.wait_s
        for row in view.requests
        if row.waiting_on == reason and not row.is_finished and row.wait_s >= WAIT_MIN_S
    ]
    return len(waits), max(waits, default=0.0)


def waiting_on_max_num_seqs(view: TopView) -> Hint | None:
    """Requests wait because the running set is full, not for memory or compute."""
    num_held, longest = _held_by(view, MAX_NUM_SEQS)
    if not num_held:
        return None
    limit = None if view.header is None else view.header.max_num_seqs
    return Hint(
        MAX_NUM_SEQS,
        f"{num_held} waiting on max_num_seqs (the running set is full"
        f"{f' at {limit}' if limit else ''}; longest {fmt_seconds(longest)}): raise "
        "--max-num-seqs if KV blocks allow.",
    )


def waiting_on_token_budget(view: TopView) -> Hint | None:
    """Requests wait because each step's token budget goes to running prefills."""
    num_held, longest = _held_by(view, TOKEN_BUDGET)
    if not num_held:
        return None
    budget = None if view.header is None else view.header.max_num_batched_tokens
    return Hint(
        TOKEN_BUDGET,
        f"{num_held} waiting on token_budget (every step's "
        f"{f'{budget} tokens go' if budget else 'budget goes'} to running prefills; longest "
        f"{fmt_seconds(longest)}): raise --max-num-batched-tokens.",
    )


def waiting_on_kv_blocks(view: TopView) -> Hint | None:
    """The queue's head waits for KV blocks although the cache is not full (a long prompt)."""
    num_held, longest = _held_by(view, KV_BLOCKS)
    if not num_held or kv_full_with_preemptions(view) is not None:
        return None  # a full cache has its own hint
    kv = view.kv
    return Hint(
        KV_BLOCKS,
        f"The queue's head waits on kv_blocks for {fmt_seconds(longest)}: its prompt needs "
        f"more than the {kv.num_free} free blocks. Add blocks (--num-blocks, "
        "--kv-cache-memory-gib) or lower --max-num-seqs.",
    )


def speculation_not_paying(view: TopView) -> Hint | None:
    """Speculative decoding scores drafts that are mostly rejected: at a large batch (or
    at any batch when almost none pass) the verify tokens cost more than they save.

    It reads the window's figures, not the totals since start, so it follows the workload.
    """
    throughput = view.throughput
    rate = throughput.spec_acceptance_rate
    if rate is None:
        return None
    running = view.queue.running
    if rate >= LOW_ACCEPTANCE or (running < SPEC_LARGE_BATCH and rate >= USELESS_ACCEPTANCE):
        return None
    length = throughput.spec_mean_acceptance_length or 1.0
    per_step = throughput.spec_tokens_per_step
    gain = "" if per_step is None else f", {per_step:.2f} per decode step"
    window = throughput.spec_window_s
    over = "" if not window else f" over the last {window:.0f}s"
    return Hint(
        "speculation",
        f"Speculative decoding accepted {fmt_percent(rate)} of its drafts{over} ({length:.2f} "
        f"tokens per verify step{gain}) with {running} running: lower "
        "--num-speculative-tokens, or drop --speculative-method for this workload.",
    )


HINT_RULES: tuple[Callable[[TopView], Hint | None], ...] = (
    kv_full_with_preemptions,
    waiting_on_kv_blocks,
    waiting_on_max_num_seqs,
    waiting_on_token_budget,
    queue_growing,
    prefill_starving_decode,
    host_gaps,
    busy_but_inefficient,
    speculation_not_paying,
)


def find_hints(view: TopView) -> tuple[Hint, ...]:
    """Every hint whose rule fires on `view`, in rule order (none before the first snapshot)."""
    if not view.has_snapshot:
        return ()
    return tuple(hint for rule in HINT_RULES if (hint := rule(view)) is not None)
