"""Malformed frames on the raw socket: every frame answered, never with code `internal`.

A bare DEALER sends seeded garbage of every family (truncated msgpack, wrong types,
wrong versions, oversize, empty, multi-part, hostile msgpack) with a bounded number
outstanding, and waits for the replies: what counts is what was delivered and answered,
not what was handed to a socket that may drop it.
"""

from __future__ import annotations

import random
import struct
import time
from collections import Counter
from collections.abc import Callable

import msgpack
import zmq

from llmd.protocol import pack, unpack
from scripts.soak_suite.daemon_process import DaemonProcess
from scripts.soak_suite.result import ScenarioResult

WINDOW = 256
"""Frames outstanding per socket: enough to keep the daemon busy, never enough to hit HWM."""
NUM_SOCKETS = 4
SILENCE_LIMIT_S = 15.0
"""After this long without any reply, what is still outstanding counts as unanswered."""
HUGE_EVERY = 500
"""One frame in this many is oversize (over the daemon's limit, under twice it)."""


def _generate(frame_id: str, **overrides: object) -> dict:
    body = {
        "type": "generate", "v": 1, "id": frame_id, "prompt": "Hi",
        "sampling_params": {"max_tokens": 1},
    }  # fmt: skip
    body.update(overrides)
    return {k: v for k, v in body.items() if v is not _DROP}


_DROP = object()
WRONG_FIELDS: list[dict] = [
    {"prompt": 5}, {"prompt": ["a"]}, {"id": 7}, {"id": ""}, {"id": "x" * 129},
    {"stream": "yes"}, {"stream": 1}, {"priority": "high"}, {"priority": 2**40},
    {"priority": 1.5}, {"sampling_params": []}, {"sampling_params": {"max_tokens": "a"}},
    {"sampling_params": {"temperature": "hot"}}, {"sampling_params": {"nonsense": 1}},
    {"sampling_params": {"top_p": 7}}, {"sampling_params": {"stop": 5}},
    {"prompt_token_ids": "abc", "prompt": _DROP}, {"prompt_token_ids": [1, "a"], "prompt": _DROP},
    {"messages": "hi", "prompt": _DROP}, {"messages": [{"role": 1}], "prompt": _DROP},
    {"prompt": _DROP}, {"id": _DROP}, {"unknown_field": 1}, {"messages": [], "prompt": "x"},
    {"type": "nonsense"}, {"type": 7}, {"type": _DROP}, {"type": None},
    {"type": "abort", "extra": 1, "prompt": _DROP, "sampling_params": _DROP},
    {"type": "stats", "max_requests": -1, "prompt": _DROP, "sampling_params": _DROP},
    {"type": "subscribe", "interval_ms": 1, "prompt": _DROP, "sampling_params": _DROP},
    {"type": "health", "id": 3, "prompt": _DROP, "sampling_params": _DROP},
    {"type": "shutdown", "now": "yes", "prompt": _DROP, "sampling_params": _DROP},
    {"type": "unsubscribe", "id": [], "prompt": _DROP, "sampling_params": _DROP},
]  # fmt: skip
WRONG_VERSIONS: list[object] = [0, 2, -1, 2**63, "1", 1.5, True, None, [1], {"v": 1}, _DROP]


def _hostile_msgpack(rng: random.Random) -> bytes:
    choice = rng.randrange(7)
    if choice == 0:
        return msgpack.packb({"type": msgpack.ExtType(5, b"x"), "v": 1})
    if choice == 1:
        return msgpack.packb({"type": b"generate", "v": 1}, use_bin_type=True)
    if choice == 2:
        return msgpack.packb({1: "generate", "v": 1})
    if choice == 3:
        nested: object = "x"
        for _ in range(rng.randint(17, 200)):
            nested = [nested]
        return msgpack.packb({"type": "generate", "v": 1, "id": "n", "prompt": nested})
    if choice == 4:  # a msgpack timestamp (extension -1)
        return b"\x81\xa4type\xd6\xff" + struct.pack(">I", 0)
    if choice == 5:  # a map header promising more entries than there are
        return b"\xdf\xff\xff\xff\xff\xa4type"
    return msgpack.packb(rng.choice([[1, 2], 3, "generate", None, 1.5, True]))


def malformed_frame(rng: random.Random, index: int, max_message_bytes: int) -> list[bytes]:
    """Frame(s) of one malformed message; never a valid request (so exactly one reply)."""
    frame_id = f"m-{index}"
    if index % HUGE_EVERY == HUGE_EVERY - 1:
        return [b"\x80" + b"x" * (max_message_bytes + rng.randint(1, 4096))]
    family = index % 8
    if family == 0:  # truncated msgpack of a valid request
        whole = pack(_generate(frame_id, prompt="Hello " * rng.randint(1, 20)))
        return [whole[: rng.randrange(1, len(whole))]]
    if family == 1:
        return [pack(_generate(frame_id, **rng.choice(WRONG_FIELDS)))]
    if family == 2:
        return [pack(_generate(frame_id, v=rng.choice(WRONG_VERSIONS)))]
    if family == 3:
        return [b""]
    if family == 4:  # several frames (but not a REQ-style empty delimiter + one frame)
        good = pack(_generate(frame_id))
        return rng.choice([[good, good], [b"", b"", good], [good, b""], [b"x", b"y", b"z"]])
    if family == 5:
        return [bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 64)))]
    if family == 6:
        return [_hostile_msgpack(rng)]
    return [pack(rng.choice([{}, {"v": 1}, {"type": "generate"}, {"type": ""}]))]


def run_malformed(
    daemon: DaemonProcess,
    num_frames: int = 100_000,
    max_message_bytes: int = 1 << 20,
    seed: int = 0,
) -> ScenarioResult:
    """Send `num_frames` malformed frames; each must be answered by a typed, non-internal error."""
    result = ScenarioResult("malformed_frames")
    tally = drive_raw(
        daemon.address, num_frames, lambda rng, i: malformed_frame(rng, i, max_message_bytes), seed
    )
    result.counts.update(tally)
    result.check(
        "every frame answered",
        tally["num_unanswered"] == 0 and tally["num_sent"] == num_frames,
        f"{tally['num_unanswered']} of {tally['num_sent']} unanswered",
    )
    result.check("no reply with code internal", tally["codes"].get("internal", 0) == 0)
    result.check(
        "every reply is an error",
        tally["num_non_error_replies"] == 0,
        f"{tally['num_non_error_replies']} replies were not errors",
    )
    result.check("daemon still running", daemon.is_running(), daemon.log_tail(500))
    return result.finish()


def drive_raw(
    address: str,
    num_frames: int,
    make_frames: Callable[[random.Random, int], list[bytes]],
    seed: int,
) -> dict:
    """Send frames over NUM_SOCKETS DEALERs with WINDOW outstanding each; count the replies."""
    rng = random.Random(seed)
    context = zmq.Context.instance()
    sockets = [context.socket(zmq.DEALER) for _ in range(NUM_SOCKETS)]
    poller = zmq.Poller()
    for socket in sockets:
        socket.setsockopt(zmq.LINGER, 0)
        socket.connect(address)
        poller.register(socket, zmq.POLLIN)
    outstanding = [0] * NUM_SOCKETS
    codes: Counter = Counter()
    unnamed: Counter = Counter()
    num_sent = num_non_error = num_replies = 0
    started = time.monotonic()

    def receive(timeout_ms: int) -> bool:
        nonlocal num_non_error, num_replies
        events = dict(poller.poll(timeout_ms))
        for slot, socket in enumerate(sockets):
            while socket in events:
                try:
                    frames = socket.recv_multipart(zmq.NOBLOCK)  # one reply per frame
                except zmq.Again:
                    break
                for payload in frames:
                    reply = unpack(payload, len(payload) + 1)
                    if reply.get("type") == "keepalive":
                        continue  # a liveness ping, not an answer to a frame
                    num_replies += 1
                    outstanding[slot] -= 1
                    if reply.get("type") != "error":
                        num_non_error += 1
                        continue
                    codes[reply.get("code")] += 1
                    if reply.get("code") == "invalid_parameter" and not reply.get("parameter"):
                        unnamed[reply.get("message", "")[:60]] += 1
        return bool(events)

    try:
        for index in range(num_frames):
            slot = index % NUM_SOCKETS
            while outstanding[slot] >= WINDOW:
                if not receive(int(SILENCE_LIMIT_S * 1000)):
                    break  # silence: stop waiting on this socket, the frame is counted as lost
            sockets[slot].send_multipart(make_frames(rng, index))
            outstanding[slot] += 1
            num_sent += 1
        deadline = time.monotonic() + SILENCE_LIMIT_S
        while sum(outstanding) > 0 and time.monotonic() < deadline:
            if receive(100):
                deadline = time.monotonic() + SILENCE_LIMIT_S
    finally:
        for socket in sockets:
            socket.close(linger=0)
    elapsed = time.monotonic() - started
    return {
        "num_sent": num_sent,
        "num_replies": num_replies,
        "num_unanswered": sum(max(0, n) for n in outstanding),
        "num_extra_replies": sum(max(0, -n) for n in outstanding),
        "num_non_error_replies": num_non_error,
        "codes": dict(codes),
        "invalid_parameter_without_field": dict(unnamed),
        "frames_per_s": round(num_sent / elapsed, 1),
    }
