"""dtype auto on CPUs with and without native bf16, the thread setting and its validation."""

from __future__ import annotations

import pytest
import torch

from llmd.config import EngineConfig
from llmd.errors import InvalidParameterError
from llmd.runner import device

ZEN4_FLAGS = "flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni\n"
ZEN2_FLAGS = "flags\t\t: fpu sse2 avx2 fma\n"
SAPPHIRE_RAPIDS_FLAGS = "flags\t\t: fpu avx512f amx_bf16 amx_tile\n"


def test_native_bf16_detected_from_cpu_flags():
    assert device.cpu_has_native_bf16(ZEN4_FLAGS)
    assert device.cpu_has_native_bf16(SAPPHIRE_RAPIDS_FLAGS)
    assert not device.cpu_has_native_bf16(ZEN2_FLAGS)
    assert not device.cpu_has_native_bf16("")


@pytest.mark.parametrize(
    ("flags", "want"), [(ZEN4_FLAGS, torch.bfloat16), (ZEN2_FLAGS, torch.float32)]
)
def test_auto_dtype_follows_the_cpu(monkeypatch, flags, want):
    detect = device.cpu_has_native_bf16
    monkeypatch.setattr(device, "cpu_has_native_bf16", lambda: detect(flags))
    assert device.resolve_dtype("auto", torch.device("cpu")) == want
    assert device.resolve_dtype("float32", torch.device("cpu")) == torch.float32  # explicit wins


def test_default_threads_follow_omp_num_threads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert device.default_num_threads() == 3
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert device.default_num_threads() >= 1


def test_set_num_threads_sets_torch_once():
    before = torch.get_num_threads()
    try:
        assert device.set_num_threads(2) == 2
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("bad", [0, -1])
def test_num_threads_must_be_positive(bad):
    with pytest.raises(InvalidParameterError, match="num_threads"):
        EngineConfig(num_threads=bad)


def test_the_kv_cache_dtype_follows_the_model_unless_the_cpu_op_can_read_another():
    from llmd.runner.kv_cache import resolve_kv_cache_dtype

    assert resolve_kv_cache_dtype("auto", torch.float32, "torch") is torch.float32
    assert resolve_kv_cache_dtype("auto", torch.bfloat16, "triton") is torch.bfloat16
    assert resolve_kv_cache_dtype("bfloat16", torch.float32, "cpu") is torch.bfloat16
    assert resolve_kv_cache_dtype("bfloat16", torch.bfloat16, "triton") is torch.bfloat16
    for backend in ("torch", "triton"):
        with pytest.raises(InvalidParameterError) as error:
            resolve_kv_cache_dtype("bfloat16", torch.float32, backend)
        assert error.value.parameter == "kv_cache_dtype" and backend in error.value.message
    with pytest.raises(InvalidParameterError):
        resolve_kv_cache_dtype("int8", torch.float32, "cpu")
    with pytest.raises(InvalidParameterError) as error:
        EngineConfig(kv_cache_dtype="int8")
    assert error.value.parameter == "kv_cache_dtype"
