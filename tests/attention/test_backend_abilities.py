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
    "reads_fp8_kv",
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

    assert declared(TritonAttentionBackend) == {
        "supports_cuda_graphs",
        "reads_fp8_kv",
        "pairs_with_triton_layers",
    }


@pytest.mark.parametrize(
    ("capability", "is_refused"), [((8, 0), True), ((8, 6), True), ((8, 9), False), ((9, 0), False)]
)
def test_triton_refuses_an_fp8_cache_before_sm89_by_name(monkeypatch, capability, is_refused):
    """Triton has no e4m3 type before sm_89: the runner must refuse fp8 at start-up there."""
    pytest.importorskip("triton")
    import torch

    from llmd.attention.triton_backend import TritonAttentionBackend
    from llmd.errors import InvalidParameterError
    from llmd.runner.kv_cache import resolve_kv_cache_dtype

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    backend, cuda = TritonAttentionBackend(), torch.device("cuda", 0)
    backend.check_kv_cache_dtype(torch.bfloat16, cuda)  # other caches: any arch
    backend.check_kv_cache_dtype(torch.float8_e4m3fn, torch.device("cpu"))  # the interpreter
    if not is_refused:
        assert resolve_kv_cache_dtype("fp8", torch.bfloat16, backend, cuda) is torch.float8_e4m3fn
        return
    with pytest.raises(InvalidParameterError) as error:
        resolve_kv_cache_dtype("fp8", torch.bfloat16, backend, cuda)
    assert error.value.parameter == "kv_cache_dtype" and "8.9" in error.value.message
