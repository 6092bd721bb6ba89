"""A client killed with -9 while its requests produce no output: the daemon aborts them.

Non-streaming requests send nothing until they finish, so only the daemon's keepalives
can reveal that their client is gone; steps are slowed so that the requests would run
for many seconds if nobody noticed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from llmd.client import Client
from tests.daemon.harness import REPO_ROOT, daemon_env, inprocess_daemon

NUM_REQUESTS = 4
MAX_TOKENS = 240
STEP_DELAY_S = 0.02
"""Each step takes at least this long: the requests would need about 5 s to finish."""

CLIENT_SCRIPT = """
import sys, time, zmq
from llmd.protocol import decode_daemon_message, pack
socket = zmq.Context().socket(zmq.DEALER)
socket.connect(sys.argv[1])
for i in range(int(sys.argv[2])):
    socket.send(pack({
        "type": "generate", "v": 1, "id": f"r{i}", "prompt_token_ids": [1, 2, 3],
        "stream": False, "sampling_params": {"max_tokens": int(sys.argv[3]), "ignore_eos": True},
    }))
num_accepted = 0
while num_accepted < int(sys.argv[2]):
    for frame in socket.recv_multipart():  # a message may carry several replies
        num_accepted += decode_daemon_message(frame).TYPE == "accepted"
print("accepted", flush=True)
time.sleep(600)
"""


def test_a_killed_clients_silent_requests_are_aborted(tiny_model_dir, tmp_path, monkeypatch):
    address = f"ipc://{tmp_path / 'liveness.sock'}"
    with inprocess_daemon(tiny_model_dir, address) as daemon:
        real_step = daemon.engine.step

        def slow_step():
            time.sleep(STEP_DELAY_S)
            return real_step()

        monkeypatch.setattr(daemon.engine, "step", slow_step)
        client_process = subprocess.Popen(
            [sys.executable, "-c", CLIENT_SCRIPT, address, str(NUM_REQUESTS), str(MAX_TOKENS)],
            env=daemon_env(),
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert client_process.stdout.readline().strip() == "accepted"
            os.kill(client_process.pid, signal.SIGKILL)
            client_process.wait(10)
            deadline = time.monotonic() + 60
            while len(daemon.routes) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(daemon.routes) == 0
        finally:
            if client_process.poll() is None:
                client_process.kill()
        with Client(address, timeout=10) as client:
            snapshot = client.stats(include_block_map=False, include_requests=True)
        assert snapshot.totals.finished == {"abort": NUM_REQUESTS}
        assert all(row.num_generated_tokens < MAX_TOKENS for row in snapshot.recent)
        assert snapshot.kv.num_used == 0
