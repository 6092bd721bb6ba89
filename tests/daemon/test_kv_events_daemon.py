"""`--kv-events`: a daemon publishes its prefix cache's stores and clears in vLLM's format."""

from __future__ import annotations

import asyncio
import time

import msgpack
import pytest
import zmq

from llmd.client import AsyncClient, Client
from llmd.daemon.kv_event_publisher import check_kv_events_address, encode_batch
from llmd.engine.kv_events import AllBlocksCleared, BlockRemoved, BlockStored
from llmd.errors import InvalidParameterError
from llmd.sampling_params import SamplingParams
from tests.daemon.harness import free_tcp_port, inprocess_daemon


def test_events_encode_as_vllms_tagged_arrays():
    events = [
        BlockStored([b"\x01" * 16], None, [5, 6], 2),
        BlockRemoved([b"\x02"]),
        AllBlocksCleared(),
    ]
    ts, decoded = msgpack.unpackb(encode_batch(events, 12.5), raw=False)
    assert ts == 12.5
    assert decoded == [
        ["BlockStored", [b"\x01" * 16], None, [5, 6], 2, None, "GPU"],
        ["BlockRemoved", [b"\x02"], "GPU"],
        ["AllBlocksCleared"],
    ]


def test_addresses_are_checked_like_the_daemons():
    assert check_kv_events_address("tcp://127.0.0.1:5557", False) == "tcp://127.0.0.1:5557"
    for bad in ("udp://x", "tcp://127.0.0.1", "nonsense"):
        with pytest.raises(InvalidParameterError) as error:
            check_kv_events_address(bad, False)
        assert error.value.parameter == "kv_events"
    with pytest.raises(InvalidParameterError, match="allow-remote"):
        check_kv_events_address("tcp://0.0.0.0:5557", False)
    assert check_kv_events_address("tcp://0.0.0.0:5557", True) == "tcp://0.0.0.0:5557"


async def flush(address: str) -> int:
    """`/flush_cache`'s daemon call: the number of cached blocks dropped."""
    async with AsyncClient(address) as client:
        return await client.flush_cache()


def receive_batches(socket, until) -> list[list]:
    """Decoded events of batches received until `until(events)` holds (5 s at most)."""
    events: list[list] = []
    sequences = []
    poller = zmq.Poller()
    poller.register(socket, zmq.POLLIN)
    while not until(events):
        assert poller.poll(5000), f"no KV event batch within 5 s; got {events}"
        topic, sequence, payload = socket.recv_multipart()
        assert topic == b""
        sequences.append(int.from_bytes(sequence, "big"))
        events.extend(msgpack.unpackb(payload, raw=False)[1])
    assert sequences == sorted(sequences) and len(set(sequences)) == len(sequences)
    return events


def test_a_daemon_publishes_a_requests_blocks_then_a_clear_on_flush(tiny_model_dir, tmp_path):
    port = free_tcp_port()
    kv_address = f"tcp://127.0.0.1:{port}"
    subscriber = zmq.Context.instance().socket(zmq.SUB)
    subscriber.setsockopt(zmq.SUBSCRIBE, b"")
    subscriber.setsockopt(zmq.LINGER, 0)
    try:
        with inprocess_daemon(
            tiny_model_dir, f"ipc://{tmp_path / 'd.sock'}", kv_events=kv_address,
            engine={"block_size": 16},
        ) as daemon:  # fmt: skip
            subscriber.connect(kv_address)
            time.sleep(0.5)  # PUB/SUB: a subscription takes effect a moment after connecting
            prompt = [(i * 11) % 200 + 3 for i in range(40)]  # two full 16-token blocks
            params = SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True)
            with Client(str(daemon.address)) as client:
                client.generate(prompt_token_ids=prompt, params=params)

                def two_blocks(events):
                    stored = [e for e in events if e[0] == "BlockStored"]
                    return sum(len(e[1]) for e in stored) >= 2

                stored = [
                    e for e in receive_batches(subscriber, two_blocks) if e[0] == "BlockStored"
                ]
                tokens = [token for event in stored for token in event[3]]
                assert tokens[:32] == prompt[:32]
                assert stored[0][2] is None and stored[0][4] == 16  # no parent; block size
                hashes = [h for event in stored for h in event[1]]
                assert len(hashes[0]) == 16 and hashes[0] != hashes[1]
                assert asyncio.run(flush(str(daemon.address))) >= 2
                cleared = receive_batches(subscriber, lambda events: ["AllBlocksCleared"] in events)
                assert ["AllBlocksCleared"] in cleared
    finally:
        subscriber.close()
