"""Bad requests through the client and through the raw socket: each a typed error naming the field.

The client validates before sending and the daemon validates again on arrival, so the
same mistakes are made both ways; an answer counts only if its code is typed (not
`internal`, not a timeout) and its `parameter` names the field that was wrong.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import zmq

from llmd.client import AsyncClient, Client
from llmd.protocol import pack, unpack
from scripts.soak_suite.daemon_process import DaemonProcess
from scripts.soak_suite.result import ScenarioResult

TIMEOUT_S = 10.0
"""The client's own timeout (silence after which it calls the daemon gone)."""
CASE_LIMIT_S = 2 * TIMEOUT_S
"""A case not answered by then counts as a hang."""
FIELD_CODES = ("invalid_parameter", "request_too_large", "protocol_error")
LONG_PROMPT_IDS = [5] * 1000
"""Longer than the soak daemon's --max-model-len."""

# (case name, generate keyword arguments / message fields, fields an answer may name)
SAMPLING_CASES: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    ("negative temperature", {"temperature": -1.0}, ("temperature",)),
    ("infinite temperature", {"temperature": float("inf")}, ("temperature",)),
    ("nan top_p", {"top_p": float("nan")}, ("top_p",)),
    ("top_p above 1", {"top_p": 1.5}, ("top_p",)),
    ("zero max_tokens", {"max_tokens": 0}, ("max_tokens",)),
    ("max_tokens beyond the context", {"max_tokens": 10**6}, ("max_tokens",)),
    ("tiny repetition_penalty", {"repetition_penalty": 1e-45}, ("repetition_penalty",)),
    ("seed of 2**64", {"seed": 2**64}, ("seed",)),
    ("logprobs above 20", {"logprobs": 21}, ("logprobs",)),
    ("stop of the wrong type", {"stop": 5}, ("stop",)),
    ("unknown sampling key", {"bogus": 1}, ("bogus",)),
    ("negative top_k", {"top_k": -5}, ("top_k",)),
    ("min_tokens above max_tokens", {"min_tokens": 9, "max_tokens": 4}, ("min_tokens",)),
]
INPUT_CASES: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    ("token id -1", {"prompt_token_ids": [1, -1]}, ("prompt_token_ids",)),
    ("token id 2**63", {"prompt_token_ids": [2**63]}, ("prompt_token_ids",)),
    ("token id beyond the vocabulary", {"prompt_token_ids": [10**7]}, ("prompt_token_ids",)),
    ("prompt longer than the context", {"prompt_token_ids": LONG_PROMPT_IDS},
     ("prompt_token_ids", "prompt")),
    ("no prompt", {}, ("prompt",)),
    ("message without content", {"messages": [{"role": "user"}]}, ("messages", "content")),
    ("priority of 2**31", {"prompt": "Hi", "priority": 2**31}, ("priority",)),
]  # fmt: skip
CLIENT_ONLY_CASES: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    ("token id 2**64", {"prompt_token_ids": [2**64]}, ("prompt_token_ids",)),
    ("lone surrogate", {"prompt": "a\ud800b"}, ("prompt",)),
    ("prompt over the daemon's message limit", {"prompt": "x" * (2 << 20)}, ("prompt",)),
    ("prompt over the client's message limit", {"prompt": "x" * (9 << 20)}, ("prompt",)),
]
RAW_ONLY_CASES: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    ("token id 2**64-1", {"prompt_token_ids": [2**64 - 1]}, ("prompt_token_ids",)),
    ("token id -2**63", {"prompt_token_ids": [-(2**63)]}, ("prompt_token_ids",)),
    ("token id of the wrong type", {"prompt_token_ids": ["a"]}, ("prompt_token_ids",)),
    ("max_tokens of the wrong type", {"sampling_params": {"max_tokens": "8"}}, ("max_tokens",)),
    ("stream of the wrong type", {"stream": "yes"}, ("stream",)),
    ("unknown field", {"colour": "red"}, ("colour",)),
    ("priority of the wrong type", {"priority": 0.5}, ("priority",)),
]


async def _client_call(address: str, fields: dict[str, Any]) -> None:
    kwargs = {k: v for k, v in fields.items() if k in ("prompt", "prompt_token_ids", "messages")}
    async with AsyncClient(address, timeout=TIMEOUT_S) as client:
        await asyncio.wait_for(
            client.generate(
                **kwargs, priority=fields.get("priority", 0), params=fields.get("params")
            ),
            CASE_LIMIT_S,
        )


def _raw_message(index: int, fields: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"type": "generate", "v": 1, "id": f"bad-{index}"}
    sampling = fields.pop("params", None)
    if sampling is not None:
        message["sampling_params"] = sampling
    message.update(fields)
    return message


def _can_pack(fields: dict[str, Any]) -> bool:
    try:
        pack(_raw_message(0, dict(fields)))
    except (OverflowError, UnicodeEncodeError):
        return False
    return True


def cases() -> list[tuple[str, str, dict[str, Any], tuple[str, ...]]]:
    """(way, name, fields, accepted parameter names) for every bad request, both ways."""
    out = []
    sampling = [(n, {"prompt": "Hi", "params": p}, f) for n, p, f in SAMPLING_CASES]
    for name, fields, names in sampling + INPUT_CASES:
        out.append(("client", name, fields, names))
        if _can_pack(fields):  # msgpack has no integers of 2**64 and beyond
            out.append(("raw", name, dict(fields), names))
    out += [("client", n, f, ns) for n, f, ns in CLIENT_ONLY_CASES]
    for name, fields, names in RAW_ONLY_CASES:
        has_input = {"prompt", "prompt_token_ids", "messages"} & set(fields)
        out.append(("raw", name, fields if has_input else {"prompt": "Hi", **fields}, names))
    return out


def run_bad_requests(daemon: DaemonProcess, num_rounds: int = 1) -> ScenarioResult:
    """Every bad request, `num_rounds` times each way; all typed errors naming the field."""
    result = ScenarioResult("bad_requests")
    failures: list[str] = []
    num_sent = num_typed = 0
    for _ in range(num_rounds):
        for index, (way, name, fields, names) in enumerate(cases()):
            num_sent += 1
            started = time.monotonic()
            if way == "client":
                answer = _through_client(daemon.address, fields)
            else:
                answer = _through_raw(daemon.address, index, dict(fields))
            code, parameter = answer
            is_typed = code in FIELD_CODES and parameter in names
            num_typed += is_typed
            if not is_typed and len(failures) < 40:
                took = time.monotonic() - started
                failures.append(f"{way}: {name}: got {code}/{parameter} in {took:.1f}s")
    result.counts.update({"num_sent": num_sent, "num_typed_naming_field": num_typed})
    result.counts["failures"] = failures
    result.check(
        "every bad request got a typed error naming the field",
        num_typed == num_sent,
        f"{num_sent - num_typed} of {num_sent} did not",
    )
    result.check("daemon still serving", _serves(daemon.address))
    return result.finish()


def _through_client(address: str, fields: dict[str, Any]) -> tuple[str, str | None]:
    try:
        asyncio.run(_client_call(address, fields))
    except asyncio.TimeoutError:
        return f"no answer within {CASE_LIMIT_S:g}s", None
    except Exception as error:  # the point is to see exactly what surfaces
        code = getattr(error, "code", None) or f"untyped {type(error).__name__}"
        return code, getattr(error, "parameter", None)
    return "accepted", None


def _through_raw(address: str, index: int, fields: dict[str, Any]) -> tuple[str, str | None]:
    socket = zmq.Context.instance().socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(address)
    try:
        socket.send(pack(_raw_message(index, fields)))
        deadline = time.monotonic() + TIMEOUT_S
        reply: dict[str, Any] = {"type": "keepalive"}
        frames: list[bytes] = []  # a daemon message may carry several replies, one a frame
        while reply.get("type") == "keepalive":  # the daemon's liveness pings are no answer
            if not frames:
                remaining_ms = int((deadline - time.monotonic()) * 1000)
                if remaining_ms <= 0 or not socket.poll(remaining_ms):
                    return "no reply", None
                frames = socket.recv_multipart()
            payload = frames.pop(0)
            reply = unpack(payload, len(payload) + 1)
        if reply.get("type") != "error":
            return f"reply {reply.get('type')}", None
        return reply.get("code"), reply.get("parameter")
    finally:
        socket.close(linger=0)


def _serves(address: str) -> bool:
    try:
        with Client(address, timeout=TIMEOUT_S) as client:
            return len(client.generate("Hello", params={"max_tokens": 2}).token_ids) >= 1
    except Exception:
        return False
