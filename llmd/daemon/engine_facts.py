"""What the daemon reports about the engine it serves: static facts and the metrics sink.

Built once at start-up from the engine's `EngineFacts` (`LLMEngine.facts()`), so that the
I/O thread's stats snapshots and the roofline figures read the same numbers.
"""

from __future__ import annotations

from llmd.daemon.serve_options import ServeOptions
from llmd.engine.engine_snapshot import EngineFacts
from llmd.metrics import ServingMetrics
from llmd.metrics.device_peaks import DevicePeaks, published_peaks
from llmd.metrics.roofline import ModelCost
from llmd.protocol.engine_sections import ELEMENT_BYTES


def device_peaks(facts: EngineFacts) -> DevicePeaks:
    """Datasheet peaks for a known GPU; on CPU, copy bandwidth and GEMM rate measured now."""
    peaks = published_peaks(facts.device_name, facts.dtype)
    if peaks.source == "unknown" and facts.device_name == "cpu":
        from llmd.runner.host_peaks import measure_host_peaks

        peaks = measure_host_peaks(facts.dtype)
    return peaks


def serving_metrics(facts: EngineFacts, options: ServeOptions) -> ServingMetrics:
    """The daemon's metrics, with the model's cost and the device's peaks for rooflines."""
    dtype_bytes = ELEMENT_BYTES.get(facts.dtype, 4)
    peaks = device_peaks(facts)
    return ServingMetrics(
        window_s=options.metrics_window_s,
        slo_ttft_s=None if options.slo_ttft_ms is None else options.slo_ttft_ms / 1000,
        slo_tpot_s=None if options.slo_tpot_ms is None else options.slo_tpot_ms / 1000,
        cost=ModelCost(
            num_params=facts.num_params,
            vocab_size=facts.vocab_size,
            hidden_size=facts.hidden_size,
            is_tied=facts.is_tied,
            num_experts=facts.num_experts,
            num_experts_per_token=facts.num_experts_per_token,
            num_moe_layers=facts.num_moe_layers,
            num_params_per_expert=facts.num_params_per_expert,
        ),
        dtype_bytes=dtype_bytes,
        kv_bytes_per_token=facts.kv_token_bytes,
        peak_gb_per_s=peaks.gb_per_s,
        peak_tflop_per_s=peaks.tflop_per_s,
        peak_source=peaks.source,
    )
