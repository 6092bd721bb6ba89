"""What each attention backend declares it can do, against a table written by hand.

The runner and the layers decide from these fields, never from a backend's name, so a
wrong declaration would turn on CUDA graphs or a cache dtype that the backend cannot serve.
"""

from __future__ import annotations

import pytest

from llmd.attention.backend import AttentionBackend
from llmd.attention.cpu_backend import CpuAttentionBackend
from llmd.attention.torch_backend import TorchAttentionBackend
from tests.kernels.triton_env import enable_interpreter_without_cuda

enable_interpreter_without_cuda()  # before llmd.kernels is imported (lazily, below)

ABILITIES = (
    "supports_cuda_graphs",
    "reads_any_kv_dtype",
    "pairs_with_triton_layers",
    "pairs_with_cpu_layer_ops",
)


def declared(backend_class: type[AttentionBackend]) -> set[str]:
    """The abilities a backend class declares true."""
    return {ability for ability in ABILITIES if getattr(backend_class, ability)}


def test_the_base_class_promises_nothing():
    assert declared(AttentionBackend) == set()


def test_torch_backend_reads_the_host_and_keeps_the_model_dtype():
    assert declared(TorchAttentionBackend) == set()


def test_cpu_backend_converts_the_cache_dtype_and_brings_the_cpu_layer_ops():
    assert declared(CpuAttentionBackend) == {"reads_any_kv_dtype", "pairs_with_cpu_layer_ops"}


def test_triton_backend_is_graph_safe_and_brings_the_triton_layer_kernels():
    pytest.importorskip("triton")
    from llmd.attention.triton_backend import TritonAttentionBackend

    assert declared(TritonAttentionBackend) == {"supports_cuda_graphs", "pairs_with_triton_layers"}
