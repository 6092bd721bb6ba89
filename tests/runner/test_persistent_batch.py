"""Persistent batch: after random joins, leaves, preemptions and prefix hits, every step's
tensors equal the ones rebuilt from Python lists (`build_input_batch`, the reference)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from llmd.engine.request import PENDING_TOKEN_ID, FinishReason
from llmd.engine.scheduler_output import SchedulerOutput
from llmd.errors import LLMDError
from llmd.runner.host_transfer import ALIGN_BYTES, arrays_to_device
from llmd.runner.input_batch import DecodeBuffers, build_decode_batch, build_input_batch
from llmd.runner.pending_tokens import PendingTokens
from llmd.runner.persistent_batch import PersistentBatch
from llmd.runner.step_batch import build_step_batch, fill_decode_buffers
from tests.engine.factories import make_request, make_scheduler

CPU = torch.device("cpu")
BLOCK_SIZE = 4
MAX_MODEL_LEN = 96


def _tables(plan):
    """Each scheduled request's whole block table (the reference builders need them)."""
    return {chunk.request_id: list(chunk.request.block_ids) for chunk in plan.chunks}


def _in_row_order(plan, persistent):
    """The plan with its chunks in the order `build_step_batch` lays them out."""
    rows = [persistent.row_of(chunk.request.request_id) for chunk in plan.chunks]
    order = sorted(range(len(rows)), key=lambda i: (not plan.chunks[i].is_decode, rows[i]))
    return SchedulerOutput(chunks=[plan.chunks[i] for i in order]), order


def _assert_same_batch(persistent, reference):
    for name in ("input_ids", "positions", "logits_indices"):
        assert torch.equal(getattr(persistent, name), getattr(reference, name)), name
    assert persistent.sampling_request_indices == reference.sampling_request_indices
    ours, theirs = persistent.metadata, reference.metadata
    for name in ("slot_mapping", "query_start_loc", "seq_lens", "block_tables"):
        assert torch.equal(getattr(ours, name), getattr(theirs, name)), name
    for name in ("num_decode_seqs", "num_prefill_seqs", "num_tokens", "max_query_len",
                 "max_seq_len", "query_lens_cpu", "seq_lens_cpu"):  # fmt: skip
        assert getattr(ours, name) == getattr(theirs, name), name


def _assert_index_tensors_aligned(batch):
    """Triton specializes kernels on 16-byte pointer alignment: never vary it per step."""
    metadata = batch.metadata
    tensors = {
        "input_ids": batch.input_ids, "positions": batch.positions,
        "logits_indices": batch.logits_indices, "slot_mapping": metadata.slot_mapping,
        "query_start_loc": metadata.query_start_loc, "seq_lens": metadata.seq_lens,
    }  # fmt: skip
    for name, tensor in tensors.items():
        assert tensor.data_ptr() % ALIGN_BYTES == 0, (name, tensor.data_ptr() % ALIGN_BYTES)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_persistent_batch_equals_rebuilt_batch_under_random_traffic(seed):
    rng = random.Random(seed)
    # A small pool forces preemptions; shared prompt heads give prefix hits.
    scheduler = make_scheduler(
        num_blocks=40, block_size=BLOCK_SIZE, max_num_seqs=8, max_num_batched_tokens=24,
        max_model_len=MAX_MODEL_LEN,
    )  # fmt: skip
    persistent = PersistentBatch(8, MAX_MODEL_LEN // BLOCK_SIZE, CPU)
    heads = [[rng.randrange(1, 90) for _ in range(12)] for _ in range(3)]
    num_preemptions = num_prefix_hits = num_steps = num_aborts = num_views = 0
    for _ in range(250):
        if rng.random() < 0.35:
            prompt = rng.choice(heads) + [rng.randrange(1, 90) for _ in range(rng.randrange(1, 20))]
            request = make_request(prompt_token_ids=prompt, max_tokens=rng.randrange(1, 30))
            scheduler.add_request(request)
        if scheduler.running and rng.random() < 0.05:
            victim = rng.choice(scheduler.running)
            scheduler.finish_request(victim.request_id, FinishReason.ABORT)
            num_aborts += 1
        plan = scheduler.schedule()
        if plan.is_empty:
            persistent.free(plan)  # as the engine does with a plan it does not run
            continue
        num_steps += 1
        num_preemptions += len(plan.preempted_request_ids)
        num_prefix_hits += sum(1 for c in plan.chunks if c.request.num_cached_tokens)
        ours = build_step_batch(plan, BLOCK_SIZE, persistent)
        ordered, order = _in_row_order(plan, persistent)
        reference = build_input_batch(ordered, BLOCK_SIZE, CPU, block_tables=_tables(plan))
        reference.sampling_request_indices = [order[i] for i in reference.sampling_request_indices]
        _assert_same_batch(ours, reference)
        _assert_index_tensors_aligned(ours)
        # Rows in use stay dense: 0..n-1.
        rows = sorted(persistent.row_of(r.request_id) for r in scheduler.running)
        assert rows == list(range(len(rows)))
        num_views += ours.metadata.block_tables.data_ptr() == persistent.block_tables.data_ptr()
        assert persistent.num_rows_in_use == len(scheduler.running)
        sampled = {c.request.request_id: rng.randrange(1, 90) for c in plan.chunks if c.is_sampling}
        scheduler.update_from_output(plan, sampled)
    # The traffic really exercised every path.
    assert num_steps > 100 and num_preemptions > 0 and num_prefix_hits > 0 and num_aborts > 0
    assert 0 < num_views < num_steps  # both the in-place read and the gather ran


def test_rows_are_written_incrementally():
    scheduler = make_scheduler(num_blocks=200, block_size=BLOCK_SIZE, max_model_len=MAX_MODEL_LEN)
    persistent = PersistentBatch(16, MAX_MODEL_LEN // BLOCK_SIZE, CPU)
    requests = [make_request(num_prompt_tokens=17, max_tokens=40) for _ in range(2)]
    for request in requests:
        scheduler.add_request(request)
    written = []
    for _ in range(5):  # a prefill of positions 0-16, then decodes at 17, 18, 19, 20
        plan = scheduler.schedule()
        build_step_batch(plan, BLOCK_SIZE, persistent)
        written.append(persistent.num_entries_written)
        scheduler.update_from_output(plan, {r.request_id: 7 for r in requests})
    # 17 prompt tokens fill 5 blocks of 4; positions 17-19 fit the fifth; 20 opens a sixth.
    assert written == [10, 10, 10, 10, 12]


def test_decode_buffers_from_persistent_rows_equal_rebuilt_ones():
    rng = random.Random(5)
    scheduler = make_scheduler(num_blocks=100, block_size=BLOCK_SIZE, max_model_len=MAX_MODEL_LEN)
    persistent = PersistentBatch(8, MAX_MODEL_LEN // BLOCK_SIZE, CPU)
    ours = DecodeBuffers.allocate(8, MAX_MODEL_LEN // BLOCK_SIZE, CPU)
    theirs = DecodeBuffers.allocate(8, MAX_MODEL_LEN // BLOCK_SIZE, CPU)
    for _ in range(5):
        scheduler.add_request(make_request(num_prompt_tokens=rng.randrange(3, 30), max_tokens=20))
    num_compared = 0
    for _ in range(25):
        plan = scheduler.schedule()
        if plan.is_empty:
            break
        if all(chunk.is_decode for chunk in plan.chunks):
            expected = build_decode_batch(plan, BLOCK_SIZE, theirs, 8, _tables(plan))
            batch = fill_decode_buffers(plan, BLOCK_SIZE, persistent, ours, 8)
            width = max(len(c.request.block_ids) for c in plan.chunks)
            num = len(plan.chunks)
            assert torch.equal(ours.token_rows, theirs.token_rows)
            assert torch.equal(ours.seq_lens, theirs.seq_lens)
            assert torch.equal(ours.block_tables[:num, :width], theirs.block_tables[:num, :width])
            assert batch.metadata.seq_lens_cpu == expected.metadata.seq_lens_cpu
            num_compared += 1
        else:
            build_step_batch(plan, BLOCK_SIZE, persistent)
        scheduler.update_from_output(
            plan, {c.request.request_id: rng.randrange(1, 90) for c in plan.chunks}
        )
    assert num_compared > 10


def test_pending_input_tokens_come_from_the_device_tensor():
    scheduler = make_scheduler(num_blocks=100, block_size=BLOCK_SIZE, max_model_len=MAX_MODEL_LEN)
    persistent = PersistentBatch(8, MAX_MODEL_LEN // BLOCK_SIZE, CPU)
    requests = [make_request(num_prompt_tokens=6, max_tokens=10) for _ in range(3)]
    for request in requests:
        scheduler.add_request(request)
    plan = scheduler.schedule()
    build_step_batch(plan, BLOCK_SIZE, persistent)
    scheduler.update_from_output(plan, {r.request_id: 11 for r in requests})
    plan = scheduler.schedule()  # three decodes whose input is token 11
    reference = build_input_batch(plan, BLOCK_SIZE, CPU, block_tables=_tables(plan))
    assert [chunk.token_ids for chunk in plan.chunks] == [[11]] * 3
    for chunk in plan.chunks:
        chunk.token_ids = [PENDING_TOKEN_ID]  # as an async plan sends them
    pending = PendingTokens(
        torch.tensor([0, 11, 0, 11, 11]), {r.request_id: i for r, i in zip(requests, (1, 3, 4))}
    )
    batch = build_step_batch(plan, BLOCK_SIZE, persistent, pending)
    _assert_same_batch(batch, reference)
    with pytest.raises(LLMDError, match="pending"):
        build_step_batch(plan, BLOCK_SIZE, persistent, None)


def test_a_request_the_runner_was_never_sent_is_a_typed_error():
    scheduler = make_scheduler(num_blocks=100, block_size=BLOCK_SIZE, max_model_len=MAX_MODEL_LEN)
    scheduler.add_request(make_request(num_prompt_tokens=6, max_tokens=4))
    plan = scheduler.schedule()
    plan.new_requests.clear()
    with pytest.raises(LLMDError, match="never sent"):
        build_step_batch(plan, BLOCK_SIZE, PersistentBatch(4, 24, CPU))


def test_finished_and_preempted_ids_free_rows_and_a_resent_request_is_rewritten():
    scheduler = make_scheduler(num_blocks=100, block_size=BLOCK_SIZE, max_model_len=MAX_MODEL_LEN)
    persistent = PersistentBatch(4, MAX_MODEL_LEN // BLOCK_SIZE, CPU)
    requests = [make_request(num_prompt_tokens=6, max_tokens=10) for _ in range(3)]
    for request in requests:
        scheduler.add_request(request)
    plan = scheduler.schedule()
    build_step_batch(plan, BLOCK_SIZE, persistent)
    scheduler.update_from_output(plan, {r.request_id: 11 for r in requests})
    scheduler.finish_request(requests[0].request_id, FinishReason.ABORT)
    scheduler.forget_runner_state()  # as after a failed step: the others come whole again
    plan = scheduler.schedule()
    assert plan.finished_request_ids == [requests[0].request_id]
    assert [data.request_id for data in plan.new_requests] == [r.request_id for r in requests[1:]]
    assert [data.output_token_ids for data in plan.new_requests] == [[11], [11]]
    ours = build_step_batch(plan, BLOCK_SIZE, persistent)
    assert persistent.num_rows_in_use == 2 and persistent.row_of(requests[0].request_id) is None
    ordered, order = _in_row_order(plan, persistent)  # the last row moved into the hole
    reference = build_input_batch(ordered, BLOCK_SIZE, CPU, block_tables=_tables(plan))
    reference.sampling_request_indices = [order[i] for i in reference.sampling_request_indices]
    _assert_same_batch(ours, reference)
    assert persistent.num_blocks[2:].tolist() == [0, 0]  # the freed row was zeroed


def test_too_many_blocks_is_a_typed_error():
    scheduler = make_scheduler(num_blocks=100, block_size=BLOCK_SIZE, max_model_len=MAX_MODEL_LEN)
    scheduler.add_request(make_request(num_prompt_tokens=30, max_tokens=2))
    plan = scheduler.schedule()
    with pytest.raises(LLMDError, match="blocks"):
        build_step_batch(plan, BLOCK_SIZE, PersistentBatch(4, 2, CPU))


def test_pending_inputs_of_graph_decodes_come_from_the_device_tensor():
    scheduler = make_scheduler(num_blocks=100, block_size=BLOCK_SIZE, max_model_len=MAX_MODEL_LEN)
    requests = [make_request(num_prompt_tokens=5 + i, max_tokens=10) for i in range(3)]
    for request in requests:
        scheduler.add_request(request)
    plan = scheduler.schedule()
    persistent = PersistentBatch(4, 24, CPU)
    build_step_batch(plan, BLOCK_SIZE, persistent)
    scheduler.update_from_output(plan, {r.request_id: 20 + i for i, r in enumerate(requests)})
    plan = scheduler.schedule()
    expected = DecodeBuffers.allocate(4, 24, CPU)
    build_decode_batch(plan, BLOCK_SIZE, expected, 4, _tables(plan))
    for chunk in plan.chunks:
        chunk.token_ids = [PENDING_TOKEN_ID]
    pending = PendingTokens(
        torch.tensor([22, 21, 20]), {r.request_id: 2 - i for i, r in enumerate(requests)}
    )
    buffers = DecodeBuffers.allocate(4, 24, CPU)
    fill_decode_buffers(plan, BLOCK_SIZE, persistent, buffers, 4, pending)
    assert torch.equal(buffers.token_rows, expected.token_rows)
    assert buffers.token_rows[0, :3].tolist() == [20, 21, 22]


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_arrays_travel_in_one_buffer_each_16_byte_aligned(dtype):
    rng = np.random.default_rng(0)
    for _ in range(50):
        arrays = [rng.integers(-1000, 1000, rng.integers(0, 9)).astype(dtype) for _ in range(5)]
        tensors = arrays_to_device(arrays, dtype, CPU)
        for array, tensor in zip(arrays, tensors, strict=True):
            assert tensor.tolist() == array.tolist()
            assert tensor.data_ptr() % ALIGN_BYTES == 0
        assert len({t.untyped_storage().data_ptr() for t in tensors}) == 1  # one transfer


def test_a_cut_table_is_zeroed_past_its_end_and_regrown_blocks_take_the_cut_columns():
    """After a verify step's rejected drafts lose their blocks, the next plan's chunk says
    the shorter length: the row is zeroed past it, and blocks the table grows into again
    land in the columns they take, whatever blocks the row held there before."""
    scheduler = make_scheduler(num_blocks=40, block_size=BLOCK_SIZE, max_model_len=MAX_MODEL_LEN)
    persistent = PersistentBatch(4, MAX_MODEL_LEN // BLOCK_SIZE, CPU)
    request = make_request(num_prompt_tokens=6, max_tokens=30)
    scheduler.add_request(request)
    plan = scheduler.schedule()
    build_step_batch(plan, BLOCK_SIZE, persistent)
    scheduler.update_from_output(plan, {request.request_id: 7})  # 7 tokens, 2 blocks
    assert scheduler.block_manager.allocate_slots(request, 9)  # as if for 8 drafts: 4 blocks
    plan = scheduler.schedule()
    build_step_batch(plan, BLOCK_SIZE, persistent)
    row = persistent.row_of(request.request_id)
    assert persistent.host_block_tables[row, :4].tolist() == request.block_ids
    scheduler.update_from_output(plan, {request.request_id: 8})
    cut_ids = request.block_ids[2:]
    cut = scheduler.block_manager.free_tail(request, request.num_computed_tokens + 1)
    scheduler.plan_writer.on_table_cut(request.request_id, len(request.block_ids))
    assert cut == 2 and len(request.block_ids) == 2
    plan = scheduler.schedule()  # a plain decode: the chunk carries the cut length
    build_step_batch(plan, BLOCK_SIZE, persistent)
    assert persistent.host_block_tables[row, :2].tolist() == request.block_ids
    assert not persistent.host_block_tables[row, 2:].any()
    assert not persistent.block_tables[row, 2:].any()
    scheduler.update_from_output(plan, {request.request_id: 9})
    assert scheduler.block_manager.allocate_slots(request, 8)  # grows back to 4 blocks
    assert request.block_ids[2:] != cut_ids  # the freed blocks queue behind the free ones
    plan = scheduler.schedule()
    build_step_batch(plan, BLOCK_SIZE, persistent)
    assert persistent.host_block_tables[row, :4].tolist() == request.block_ids
    assert persistent.block_tables[row, :4].tolist() == request.block_ids
