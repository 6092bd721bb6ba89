"""One daemon per address: the lock, the pid file and the clean-up of a dead one's files."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap

import pytest

from llmd.daemon.instance_lock import DaemonAlreadyRunningError, InstanceLock
from llmd.daemon.listen_check import check_can_listen
from llmd.daemon.serve import resolve_address
from llmd.daemon.serve_options import ServeOptions
from llmd.errors import InvalidParameterError
from llmd.protocol import parse_address
from tests.daemon.harness import REPO_ROOT, daemon_env


@pytest.fixture
def lock_dir(tmp_path):
    return tmp_path / "rt" / "llmd"


def test_acquire_writes_a_private_pid_file_and_release_removes_everything(tmp_path, lock_dir):
    socket_path = tmp_path / "d.sock"
    lock = InstanceLock(parse_address(f"ipc://{socket_path}"), lock_dir)
    lock.acquire()
    assert stat.S_IMODE(lock_dir.stat().st_mode) == 0o700
    assert lock.read_pid() == os.getpid() and lock.is_held()
    assert stat.S_IMODE(lock.pid_path.stat().st_mode) == 0o600
    socket_path.write_text("")  # stands in for the bound socket
    lock.release()
    assert not lock.is_held()
    assert sorted(lock_dir.iterdir()) == [] and not socket_path.exists()


def test_second_holder_is_refused_with_the_pid(tmp_path, lock_dir):
    address = parse_address("tcp://127.0.0.1:4999")
    first = InstanceLock(address, lock_dir)
    first.acquire()
    try:
        expected = rf"already running .*pid {os.getpid()}"
        with pytest.raises(DaemonAlreadyRunningError, match=expected):
            InstanceLock(address, lock_dir).acquire()
    finally:
        first.release()
    second = InstanceLock(address, lock_dir)
    second.acquire()  # free again once released
    second.release()


def test_leftovers_of_a_killed_holder_are_cleaned(tmp_path, lock_dir):
    socket_path = tmp_path / "k.sock"
    address = f"ipc://{socket_path}"
    script = textwrap.dedent(f"""
        import sys, pathlib, time
        from llmd.daemon.instance_lock import InstanceLock
        from llmd.protocol import parse_address
        lock = InstanceLock(parse_address({address!r}), pathlib.Path({str(lock_dir)!r}))
        lock.acquire()
        pathlib.Path({str(socket_path)!r}).write_text("stale")
        print("locked", flush=True)
        time.sleep(60)
    """)
    holder = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        env=daemon_env(),
        cwd=REPO_ROOT,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        lock = InstanceLock(parse_address(address), lock_dir)
        assert lock.is_held() and lock.read_pid() == holder.pid
        with pytest.raises(DaemonAlreadyRunningError, match=f"pid {holder.pid}"):
            lock.acquire()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert socket_path.exists() and lock.pid_path.exists()  # what kill -9 leaves
    assert not lock.is_held()
    lock.acquire()
    assert not socket_path.exists() and lock.read_pid() == os.getpid()
    lock.release()


def test_remote_addresses_need_allow_remote():
    with pytest.raises(InvalidParameterError, match="--allow-remote") as error:
        resolve_address("tcp://0.0.0.0:5000", allow_remote=False)
    assert error.value.parameter == "address"
    assert resolve_address("tcp://0.0.0.0:5000", allow_remote=True).port == 5000
    assert resolve_address("tcp://127.0.0.1:5000", allow_remote=False).is_loopback


def test_serve_options_validate_and_survive_json():
    options = ServeOptions(
        address="ipc:///tmp/x.sock", slo_ttft_ms=200.0, engine_kwargs={"num_blocks": 8}
    )
    assert ServeOptions.from_json(options.to_json()) == options
    for field, value in [
        ("max_queued_requests", 0),
        ("slo_tpot_ms", -1.0),
        ("drain_timeout_s", -1),
        ("log_level", "loud"),
    ]:
        with pytest.raises(InvalidParameterError) as error:
            ServeOptions(**{field: value})
        assert error.value.parameter == field
    with pytest.raises(InvalidParameterError) as error:
        ServeOptions.from_json('{"adress": "x"}')
    assert error.value.parameter == "adress"


def test_unusable_addresses_fail_before_the_model_loads(tmp_path):
    with pytest.raises(InvalidParameterError, match="does not exist"):
        check_can_listen(parse_address(f"ipc://{tmp_path / 'missing' / 'd.sock'}"))
    check_can_listen(parse_address(f"ipc://{tmp_path / 'd.sock'}"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = parse_address(f"tcp://127.0.0.1:{taken.getsockname()[1]}")
        with pytest.raises(InvalidParameterError, match="cannot listen") as error:
            check_can_listen(address)
    assert error.value.parameter == "address"
