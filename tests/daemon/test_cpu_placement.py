"""The daemon's CPU placement: the forward pass on cores of its own, serving on the rest.

The plan is checked for every core count; a real `llmd serve` restricted to two cores
must run its engine thread on one and its I/O, text, gate threads and HTTP process on the
other, and report it in status.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llmd.client import Client
from llmd.daemon.cpu_placement import CpuPlacement, plan_placement
from llmd.daemon.serve_options import ServeOptions
from llmd.errors import InvalidParameterError
from llmd.protocol.stats_snapshot import CpuPlacementSection
from tests.daemon.harness import daemon_env, start_daemon
from tests.http.http_harness import DAEMON_ARGS, http_daemon


@pytest.mark.parametrize(
    ("cpu_ids", "num_reserved", "forward", "serving"),
    [
        ((0,), None, (0,), (0,)),  # one core: nothing to split
        ((0, 1), None, (0, 1), (0, 1)),  # two or three: the compute is worth more
        ((0, 1, 2), None, (0, 1, 2), (0, 1, 2)),
        ((0, 1), 1, (1,), (0,)),
        ((2, 5, 7, 9), None, (5, 7, 9), (2,)),
        ((0, 1, 2, 3), 2, (2, 3), (0, 1)),
        ((0, 1, 2, 3), 0, (0, 1, 2, 3), (0, 1, 2, 3)),
    ],
)
def test_plan_placement(cpu_ids, num_reserved, forward, serving):
    placement = plan_placement(cpu_ids, num_reserved)
    assert placement == CpuPlacement(forward, serving)
    assert placement.is_split == (forward != serving)


@pytest.mark.parametrize(("cpu_ids", "num_reserved"), [((0, 1), 2), ((0,), 1), ((0, 1, 2), 5)])
def test_reserving_every_core_is_a_typed_error(cpu_ids, num_reserved):
    with pytest.raises(InvalidParameterError) as raised:
        plan_placement(cpu_ids, num_reserved)
    assert raised.value.parameter == "reserved_cpus"


def test_negative_reserved_cpus_is_refused():
    with pytest.raises(InvalidParameterError) as raised:
        ServeOptions(reserved_cpus=-1)
    assert raised.value.parameter == "reserved_cpus"


def _allowed(task: Path) -> set[int]:
    """A thread's allowed cores, from /proc (Cpus_allowed_list: '0-2,5')."""
    for line in (task / "status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            cores: set[int] = set()
            for part in line.split(":", 1)[1].strip().split(","):
                low, _, high = part.partition("-")
                cores.update(range(int(low), int(high or low) + 1))
            return cores
    raise AssertionError(f"no Cpus_allowed_list in {task}/status")


def _threads(pid: int) -> dict[str, set[int]]:
    """OS thread name -> union of the allowed cores of the threads with that name."""
    threads: dict[str, set[int]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        name = (task / "comm").read_text().strip()
        threads.setdefault(name, set()).update(_allowed(task))
    return threads


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="needs Linux affinity")
def test_a_daemon_on_two_cores_pins_the_forward_pass_apart(tiny_model_dir, tmp_path):
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs two cores to split")
    first, second = allowed[:2]
    with http_daemon(
        tiny_model_dir,
        tmp_path,
        [*DAEMON_ARGS, "--reserved-cpus", "1"],
        lambda: os.sched_setaffinity(0, {first, second}),
    ) as served:
        process = served.process
        with Client(served.address, timeout=10.0) as client:
            client.generate("warm", params={"max_tokens": 2})  # the OpenMP team exists now
            facts = client.stats(include_requests=False, include_block_map=False).daemon
        assert facts.cpu_placement == CpuPlacementSection((second,), (first,))
        threads = _threads(process.pid)
        assert threads["llmd-engine"] == {second}, threads
        for name in ("llmd-text", "llmd-gate"):
            assert threads[name] == {first}, threads
        assert _allowed(Path(f"/proc/{process.pid}/task/{process.pid}")) == {first}  # I/O
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
        assert children, "no HTTP process"
        for child in children:
            assert set().union(*_threads(int(child)).values()) == {first}


def test_two_cores_by_default_pin_nothing(tiny_model_dir, tmp_path):
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs two cores")
    pair = set(allowed[:2])
    address = f"ipc://{tmp_path / 'default.sock'}"
    process = start_daemon(
        tiny_model_dir, address, daemon_env(), tmp_path / "daemon.log",
        preexec_fn=lambda: os.sched_setaffinity(0, pair),
    )  # fmt: skip
    try:
        with Client(address, timeout=10.0) as client:
            facts = client.stats(include_requests=False, include_block_map=False).daemon
        assert facts.cpu_placement is None
        assert all(cores == pair for cores in _threads(process.pid).values())
    finally:
        process.terminate()
        process.wait(30)


def test_reserved_cpus_zero_pins_nothing(tiny_model_dir, tmp_path):
    address = f"ipc://{tmp_path / 'nopin.sock'}"
    process = start_daemon(
        tiny_model_dir, address, daemon_env(), tmp_path / "daemon.log",
        "--no-http", "--reserved-cpus", "0",
    )  # fmt: skip
    try:
        with Client(address, timeout=10.0) as client:
            facts = client.stats(include_requests=False, include_block_map=False).daemon
        assert facts.cpu_placement is None
        allowed = set(os.sched_getaffinity(0))
        assert all(cores == allowed for cores in _threads(process.pid).values())
    finally:
        process.terminate()
        process.wait(30)
