"""Shared fixtures: tiny model directories built once per test session.

Tests run tiny models whose ops are too small to gain from threads; one intra-op thread
(also for daemon subprocesses, through the environment) avoids oversubscribing CI's cores.
The scheduling mode of every test daemon is set by one variable (tests/scheduling_mode.py)
and named in the report's header.
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"  # a user's setting would oversubscribe in-process engines

from tests.kernels.triton_env import enable_interpreter_without_cuda

# Before anything (transformers) imports triton: on CPU-only machines kernels are interpreted.
enable_interpreter_without_cuda()

import pytest  # noqa: E402
import torch  # noqa: E402

from tests import scheduling_mode  # noqa: E402
from tests.tiny_model import make_tiny_model  # noqa: E402

torch.set_num_threads(1)


def pytest_report_header(config):
    """Which scheduling mode this run's daemons use, and how to choose the other one."""
    mode = scheduling_mode.mode_name()
    return f"llmd test daemons: async scheduling {mode} ({scheduling_mode.ENV_VAR}=0|1)"


@pytest.fixture(scope="module")
def single_thread():
    """One intra-op thread for a module of tiny matmuls, which on a shared 2-core machine
    run far faster without a thread team (modules opt in with `usefixtures`)."""
    num_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(num_threads)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny Llama model with a real tokenizer (random weights, float32)."""
    return make_tiny_model(tmp_path_factory.mktemp("tiny-llama"), "llama")


@pytest.fixture(scope="session")
def cpu_ops():
    """torch.ops.llmd_cpu (llmd's C++ CPU ops), built or loaded once, or skip with why."""
    from llmd.attention.cpu_extension import CpuExtensionUnavailableError, load_cpu_ops

    try:
        return load_cpu_ops()
    except CpuExtensionUnavailableError as error:
        pytest.skip(f"no C++ CPU ops here: {error}")
