"""Shared fixtures: tiny model directories built once per test session."""

from __future__ import annotations

import pytest

from tests.tiny_model import make_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny Llama model with a real tokenizer (random weights, float32)."""
    return make_tiny_model(tmp_path_factory.mktemp("tiny-llama"), "llama")
