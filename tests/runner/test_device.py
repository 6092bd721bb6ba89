"""dtype auto on CPUs with and without native bf16, the thread setting and its validation."""

from __future__ import annotations

import pytest
import torch

from llmd.config import EngineConfig
from llmd.errors import InvalidParameterError
from llmd.runner import device

ZEN4_FLAGS = "flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni\n"
ZEN2_FLAGS = "flags\t\t: fpu sse2 avx2 fma\n"
SAPPHIRE_RAPIDS_FLAGS = "flags\t\t: fpu avx512f avx512_bf16 amx_bf16 amx_tile\n"
AMX_ONLY_FLAGS = "flags\t\t: fpu avx512f amx_bf16 amx_tile\n"

# The rule `auto` follows, one row per kind of machine: (kind, CPU flags, device, dtype).
AUTO_DTYPE_RULE = [
    ("avx2-only", "fpu sse2 avx2 fma", "cpu", torch.float32),
    ("avx512-without-bf16", "fpu avx2 avx512f avx512bw avx512_vnni", "cpu", torch.float32),
    ("avx512_bf16", "fpu avx2 avx512f avx512_bf16", "cpu", torch.bfloat16),
    ("amx", "fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile", "cpu", torch.bfloat16),
    ("cuda", "fpu sse2 avx2 fma", "cuda", torch.bfloat16),  # the host CPU does not matter
]


def test_native_bf16_detected_from_cpu_flags():
    assert device.cpu_has_native_bf16(ZEN4_FLAGS)
    assert device.cpu_has_native_bf16(SAPPHIRE_RAPIDS_FLAGS)
    assert device.cpu_has_native_bf16(AMX_ONLY_FLAGS)
    assert not device.cpu_has_native_bf16(ZEN2_FLAGS)
    assert not device.cpu_has_native_bf16("")
    assert not device.cpu_has_native_bf16("processor\t: 0\nmodel name\t: x\n")  # no flags line


@pytest.mark.parametrize(
    ("flags", "device_type", "want"),
    [row[1:] for row in AUTO_DTYPE_RULE],
    ids=[row[0] for row in AUTO_DTYPE_RULE],
)
def test_auto_dtype_follows_the_machine(monkeypatch, flags, device_type, want):
    """The probe is faked through $LLMD_CPU_FLAGS, so every branch runs on any machine."""
    monkeypatch.setenv(device.CPU_FLAGS_ENV, flags)
    assert device.cpu_flags() == frozenset(flags.split())
    assert device.resolve_dtype("auto", torch.device(device_type)) == want
    for explicit, dtype in [("float32", torch.float32), ("bfloat16", torch.bfloat16)]:
        assert device.resolve_dtype(explicit, torch.device(device_type)) == dtype  # explicit wins


def test_the_probe_reads_the_real_cpu_without_the_override(monkeypatch):
    monkeypatch.delenv(device.CPU_FLAGS_ENV, raising=False)
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            text = cpuinfo.read()
    except OSError:
        pytest.skip("no /proc/cpuinfo on this system")
    assert device.cpu_flags() == device.cpu_flags(text)
    assert device.cpu_flags(text)  # Linux always lists some flags


def test_an_unknown_dtype_is_a_typed_error():
    with pytest.raises(InvalidParameterError) as error:
        device.resolve_dtype("float8", torch.device("cpu"))
    assert error.value.parameter == "dtype" and "float8" in error.value.message


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
    from llmd.attention.torch_backend import TorchAttentionBackend
    from llmd.runner.kv_cache import resolve_kv_cache_dtype

    keeps_dtype, converts = TorchAttentionBackend(), TorchAttentionBackend()
    converts.reads_any_kv_dtype = True  # what the cpu backend declares
    assert resolve_kv_cache_dtype("auto", torch.float32, keeps_dtype) is torch.float32
    assert resolve_kv_cache_dtype("auto", torch.bfloat16, keeps_dtype) is torch.bfloat16
    assert resolve_kv_cache_dtype("bfloat16", torch.float32, converts) is torch.bfloat16
    assert resolve_kv_cache_dtype("bfloat16", torch.bfloat16, keeps_dtype) is torch.bfloat16
    with pytest.raises(InvalidParameterError) as error:
        resolve_kv_cache_dtype("bfloat16", torch.float32, keeps_dtype)
    assert error.value.parameter == "kv_cache_dtype" and "torch" in error.value.message
    for fp8 in ("fp8", "fp8_e4m3"):  # e4m3, quantized by the cpu op
        assert resolve_kv_cache_dtype(fp8, torch.bfloat16, converts) is torch.float8_e4m3fn
        with pytest.raises(InvalidParameterError, match="cpu or triton attention backend"):
            resolve_kv_cache_dtype(fp8, torch.bfloat16, keeps_dtype)
    reads_fp8 = TorchAttentionBackend()
    reads_fp8.reads_fp8_kv = True  # what the triton backend declares
    assert resolve_kv_cache_dtype("fp8", torch.float32, reads_fp8) is torch.float8_e4m3fn
    with pytest.raises(InvalidParameterError, match="needs the cpu attention backend"):
        resolve_kv_cache_dtype("bfloat16", torch.float32, reads_fp8)
    with pytest.raises(InvalidParameterError):
        resolve_kv_cache_dtype("int8", torch.float32, converts)
    with pytest.raises(InvalidParameterError) as error:
        EngineConfig(kv_cache_dtype="int8")
    assert error.value.parameter == "kv_cache_dtype"
