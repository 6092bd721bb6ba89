"""What the daemon reports about the engine it serves: static facts and the metrics sink.

Built once at start-up from the engine's model shape, device and config, so that the I/O
thread's stats snapshots and the roofline figures read the same numbers.
"""

from __future__ import annotations

from typing import Any

from llmd import __version__
from llmd.daemon.serve_options import ServeOptions
from llmd.metrics import ServingMetrics
from llmd.metrics.device_peaks import DevicePeaks, published_peaks
from llmd.metrics.roofline import DTYPE_BYTES, ModelCost
from llmd.protocol import PROTOCOL_VERSION


def device_peaks(engine: Any) -> DevicePeaks:
    """Datasheet peaks for a known GPU; on CPU, copy bandwidth and GEMM rate measured now."""
    peaks = published_peaks(engine.device_name, engine.dtype)
    if peaks.source == "unknown" and engine.device_name == "cpu":
        from llmd.runner.host_peaks import measure_host_peaks

        peaks = measure_host_peaks(engine.dtype)
    return peaks


def serving_metrics(engine: Any, options: ServeOptions) -> ServingMetrics:
    """The daemon's metrics, with the model's cost and the device's peaks for rooflines."""
    dtype_bytes = DTYPE_BYTES.get(engine.dtype, 4)
    peaks = device_peaks(engine)
    shape = engine.shape
    return ServingMetrics(
        window_s=options.metrics_window_s,
        slo_ttft_s=None if options.slo_ttft_ms is None else options.slo_ttft_ms / 1000,
        slo_tpot_s=None if options.slo_tpot_ms is None else options.slo_tpot_ms / 1000,
        cost=ModelCost(
            num_params=shape.num_params,
            vocab_size=shape.vocab_size,
            hidden_size=shape.hidden_size,
            is_tied=getattr(shape, "tie_word_embeddings", False),
        ),
        dtype_bytes=dtype_bytes,
        kv_bytes_per_token=shape.kv_bytes_per_token(dtype_bytes),
        peak_gb_per_s=peaks.gb_per_s,
        peak_tflop_per_s=peaks.tflop_per_s,
        peak_source=peaks.source,
    )


def engine_facts(engine: Any) -> dict[str, Any]:
    """The engine's part of a snapshot's "daemon" section: what does not change while serving."""
    return {
        "model": engine.model_name,
        "device": engine.device,
        "dtype": engine.dtype,
        "max_model_len": engine.max_model_len,
        "num_params": engine.shape.num_params,
        "vocab_size": engine.shape.vocab_size,
        "device_name": engine.device_name,
        "scheduling_policy": engine.config.scheduling_policy,
        "max_num_batched_tokens": engine.scheduler.config.max_num_batched_tokens,
        "max_num_seqs": engine.config.max_num_seqs,
        "block_size": engine.config.block_size,
        "num_blocks": engine.runner.num_blocks,
        "attention_backend": engine.runner.backend.name,
        "async_scheduling": engine.async_scheduling,
        "version": __version__,
        "protocol_version": PROTOCOL_VERSION,
    }
