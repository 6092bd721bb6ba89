"""Async scheduling on a GPU: with CUDA graphs and the Triton kernels, every sampling
feature gives the same tokens as sync mode, and decode steps really replay graphs."""

from __future__ import annotations

import pytest
import torch

from llmd import LLM
from tests.integration.test_async_scheduling import _outputs, _workload
from tests.tiny_model import make_tiny_model


@pytest.mark.cuda
def test_async_scheduling_on_cuda_equals_sync(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    path = make_tiny_model(tmp_path / "qwen3", "qwen3")
    results = {}
    for is_async in (False, True):
        llm = LLM(str(path), device="cuda", dtype="float32", block_size=4, max_num_seqs=16,
                  num_blocks=30, max_num_batched_tokens=32, attention_backend="triton",
                  async_scheduling=is_async)  # fmt: skip
        engine = llm.engine
        assert engine.async_scheduling is is_async
        prompts, params = _workload(engine.shape.vocab_size)
        results[is_async] = _outputs(llm, prompts, params)
        assert engine.runner.graph_runner is not None
        assert engine.runner.graph_runner.num_replays > 0
        assert engine.scheduler.num_preemptions > 0
        del llm, engine
        torch.cuda.empty_cache()
    assert results[True] == results[False]


@pytest.mark.cuda
def test_async_scheduling_is_the_cuda_default(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    path = make_tiny_model(tmp_path / "llama", "llama")
    llm = LLM(str(path), device="cuda", dtype="float32", block_size=4, max_num_seqs=4,
              num_blocks=64)  # fmt: skip
    assert llm.engine.async_scheduling is True
