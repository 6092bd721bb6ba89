"""A quantized checkpoint served end to end: the CPU runner (C++ ops, oneDNN prepacking of
the dense linears) against the same engine on the dequantized weights, and what status shows."""

from __future__ import annotations

import pytest
from torch import nn

from llmd.client.status_report import format_status, status_report
from llmd.layers.packed_linear import PackedLinear, can_pack
from llmd.llm import LLM
from llmd.quantization.int4_linear import Int4Linear
from llmd.quantization.int8_linear import Int8Linear
from llmd.sampling_params import SamplingParams
from tests.protocol.snapshot_samples import daemon_section, sample_snapshot
from tests.quantized_checkpoints import write_quantized_pair
from tests.tiny_model import make_tiny_model

PROMPTS = [[5, 9, 13, 2, 77], list(range(3, 40))]


@pytest.fixture(scope="module")
def tiny_llama_source(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny-llama-source"), "llama")


@pytest.mark.parametrize(
    "recipe, scheme, layer_kind",
    [("w4a16-g32", "w4a16-g32", Int4Linear), ("w8a16-channel", "w8a16", Int8Linear)],
)
def test_quantized_engine_generates_the_dequantized_models_greedy_tokens(
    tmp_path, tiny_llama_source, recipe, scheme, layer_kind
):
    quantized, reference = write_quantized_pair(
        tmp_path, "llama", recipe, dense_source=tiny_llama_source
    )
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    quantized_llm, dense_llm = (
        LLM(str(path), device="cpu", dtype="float32", num_blocks=32)
        for path in (quantized, reference)
    )
    runner = quantized_llm.engine.runner
    quantized_layers = [m for m in runner.model.modules() if isinstance(m, layer_kind)]
    assert len(quantized_layers) == 8  # 4 per layer, 2 layers
    # Under the C++ CPU ops the prefill (42 rows) takes the dense path, decodes the kernels.
    uses_cpu_ops = runner.kernel_config.use_cpu_ops
    assert all((layer.cpu_ops is not None) == uses_cpu_ops for layer in quantized_layers)
    dense_layers = [m for m in runner.model.modules() if isinstance(m, (nn.Linear, PackedLinear))]
    assert len(dense_layers) == 1  # lm_head, the recipes' ignored module
    if can_pack(runner.dtype):
        assert runner.num_packed_linears == 1  # prepacking passed the quantized ones by
    facts, dense_facts = quantized_llm.engine.facts(), dense_llm.engine.facts()
    assert facts.quantization == f"compressed-tensors {scheme}"
    assert dense_facts.quantization == ""
    assert 0 < facts.weight_bytes < dense_facts.weight_bytes
    outputs = [
        [output.token_ids for output in llm.generate(PROMPTS, params)]
        for llm in (quantized_llm, dense_llm)
    ]
    assert outputs[0] == outputs[1]


def test_status_names_the_quantization_and_the_weight_bytes():
    snapshot = sample_snapshot(
        daemon=daemon_section(quantization="awq w4a16-g128", weight_bytes=96_300_000)
    )
    report = status_report(snapshot)
    assert (report["quantization"], report["weight_bytes"]) == ("awq w4a16-g128", 96_300_000)
    assert "weights   awq w4a16-g128, 96.3 MB" in format_status(report).splitlines()
    older = status_report(sample_snapshot(daemon=daemon_section(quantization="", weight_bytes=0)))
    assert "weights   dense, -" in format_status(older).splitlines()


def test_metrics_name_the_quantization_and_the_weight_bytes():
    from prometheus_client.parser import text_string_to_metric_families

    from llmd.http import metrics_exporter

    snapshot = sample_snapshot(
        daemon=daemon_section(quantization="gptq w4a16-g128", weight_bytes=96_300_000)
    )
    text = metrics_exporter.render(snapshot).decode()
    samples = {
        sample.name: sample for family in text_string_to_metric_families(text)
        for sample in family.samples
    }  # fmt: skip
    assert samples["llmd:model_weight_bytes"].value == 96_300_000
    info = samples["llmd:model_quantization_info"]
    assert info.value == 1 and info.labels["quantization"] == "gptq w4a16-g128"
    dense = metrics_exporter.render(sample_snapshot(daemon=daemon_section(quantization="")))
    assert 'quantization="none"' in dense.decode()
    assert "llmd:model_weight_bytes" not in dense.decode()  # 0: a daemon that did not say
