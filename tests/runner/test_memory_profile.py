"""KV sizing arithmetic: hand-computed budgets, and the runner's profiling on CPU with the
CUDA memory calls faked, counting the allocator's reserved memory (fragmentation)."""

from __future__ import annotations

import pytest
import torch

from llmd.attention.factory import create_attention_backend
from llmd.config import EngineConfig
from llmd.models.loader import load_hf_config, load_model, model_shape
from llmd.runner.kv_cache import GIB, kv_bytes_per_block
from llmd.runner.memory_profile import MemoryProfile, non_torch_bytes
from llmd.runner.model_runner import ModelRunner
from tests.checkpoints import make_tiny_checkpoint


def test_budget_by_hand():
    profile = MemoryProfile(
        free_at_start=80 * GIB, utilization=0.9, weights=16 * GIB, peak_reserved=30 * GIB,
        peak_allocated=27 * GIB, scratch=2 * GIB, non_torch=1 * GIB, graph_reserve=0.5 * GIB,
    )  # fmt: skip
    # 72 GiB allowed - (30 - 2) step peak - 1 outside the allocator - 0.5 graphs = 42.5
    assert profile.kv_budget == 42.5 * GIB
    assert profile.activations == 9 * GIB  # 27 - 2 scratch - 16 weights
    assert "KV budget 43520 MiB" in profile.describe()


def test_budget_is_never_negative():
    profile = MemoryProfile(
        free_at_start=10 * GIB, utilization=0.5, weights=4 * GIB, peak_reserved=9 * GIB,
        peak_allocated=8 * GIB, scratch=0, non_torch=0,
    )  # fmt: skip
    assert profile.kv_budget == 0.0


def test_memory_outside_the_allocator():
    assert non_torch_bytes(100 * GIB, 60 * GIB, 35 * GIB) == 5 * GIB
    assert non_torch_bytes(100 * GIB, 70 * GIB, 35 * GIB) == 0.0  # never negative


@pytest.fixture()
def cpu_runner(tmp_path):
    """A ModelRunner whose memory profiling can run on CPU (model and state only)."""
    path = make_tiny_checkpoint("llama", tmp_path / "llama")
    hf_config = load_hf_config(path)
    runner = ModelRunner.__new__(ModelRunner)
    runner.config = EngineConfig(
        model=str(path), device="cpu", max_num_seqs=4, max_num_batched_tokens=64,
        gpu_memory_utilization=0.5,
    )  # fmt: skip
    runner.device = torch.device("cpu")
    runner.dtype = torch.float32
    runner.kv_dtype = torch.float32
    runner.shape = model_shape(hf_config)
    runner.max_model_len = 32
    runner.max_num_batched_tokens = 64  # the engine's resolved step budget
    runner.backend = create_attention_backend("torch", runner.device)
    runner.model = load_model(path, hf_config, runner.backend, runner.dtype, runner.device)
    runner.block_size = 4
    runner.bytes_per_block = kv_bytes_per_block(
        runner.shape.num_layers, runner.shape.num_kv_heads, runner.shape.head_dim, 4,
        torch.float32,
    )  # fmt: skip
    runner.graph_batch_sizes = [1, 2, 4]
    runner.graph_reserve_bytes = 0.0
    runner.free_bytes_at_start = 40 * GIB
    return runner


def test_profiling_counts_reserved_memory_and_memory_outside_the_allocator(
    cpu_runner, monkeypatch
):
    weights, peak_allocated, peak_reserved = 2 * GIB, 5 * GIB, 7 * GIB  # 2 GiB fragmented
    reserved_now, free_now = 6 * GIB, 33 * GIB  # 40 - 33 = 7 taken; 6 reserved -> 1 outside
    fakes = {
        "empty_cache": lambda *a, **k: None,
        "reset_peak_memory_stats": lambda *a, **k: None,
        "synchronize": lambda *a, **k: None,
        "memory_allocated": lambda *a, **k: weights,
        "max_memory_allocated": lambda *a, **k: peak_allocated,
        "max_memory_reserved": lambda *a, **k: peak_reserved,
        "memory_reserved": lambda *a, **k: reserved_now,
        "mem_get_info": lambda *a, **k: (free_now, 80 * GIB),
    }
    for name, fake in fakes.items():
        monkeypatch.setattr(torch.cuda, name, fake)
    budget = cpu_runner._profile_free_gpu_bytes()
    profile = cpu_runner.memory_profile
    num_tokens = 64  # the step budget, as prompts of at most max_model_len = 32 tokens
    num_scratch_blocks = 64 // 4 + 2
    scratch = num_scratch_blocks * cpu_runner.bytes_per_block
    assert profile.scratch == scratch
    assert profile.non_torch == 1 * GIB
    activations = peak_allocated - scratch - weights
    graph_reserve = activations * 4 / num_tokens + 3 * 4 * 1024**2  # largest bucket 4, 3 graphs
    assert cpu_runner.graph_reserve_bytes == pytest.approx(graph_reserve)
    expected = 40 * GIB * 0.5 - (peak_reserved - scratch) - 1 * GIB - graph_reserve
    assert budget == pytest.approx(expected)
    # Sizing by peak *allocated* memory (the old way) would have promised 2 GiB more.
    assert budget < 40 * GIB * 0.5 - (peak_allocated - scratch) - 1 * GIB - graph_reserve
