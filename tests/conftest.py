"""Shared fixtures: tiny model directories built once per test session.

Tests run tiny models whose ops are too small to gain from threads; one intra-op thread
(also for daemon subprocesses, through the environment) avoids oversubscribing CI's cores.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
import torch

from tests.tiny_model import make_tiny_model

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny Llama model with a real tokenizer (random weights, float32)."""
    return make_tiny_model(tmp_path_factory.mktemp("tiny-llama"), "llama")
