"""The draft-model proposer on its own: guesses equal the draft model's greedy continuation
(computed independently, by an engine serving the draft) after every kind of rollback,
chunked catch-ups, a full pool and a failing pass; released requests leave nothing behind."""

from __future__ import annotations

import pytest

from llmd import LLM, SamplingParams
from llmd.config import EngineConfig
from llmd.models.loader import load_hf_config
from llmd.spec.draft_ask import DraftAsk
from llmd.spec.draft_model_proposer import load_draft_proposer
from tests.tiny_model import make_tiny_model

NUM_GUESSES = 3


@pytest.fixture(scope="module")
def draft_path(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("draft"), "llama", seed=2)


@pytest.fixture(scope="module")
def reference(draft_path):
    """The draft model's own greedy continuation of some tokens (an engine serving it)."""
    llm = LLM(str(draft_path), device="cpu", dtype="float32", block_size=4, num_blocks=256)
    params = SamplingParams(temperature=0.0, max_tokens=NUM_GUESSES, ignore_eos=True)

    def continuation(token_ids: list[int]) -> list[int]:
        return llm.generate([token_ids], params)[0].token_ids

    return continuation


def make_proposer(draft_path, num_target_blocks=64, max_num_batched_tokens=16):
    config = EngineConfig(
        model=str(draft_path), device="cpu", dtype="float32", block_size=4,
        attention_backend="cpu", max_num_seqs=4, max_num_batched_tokens=max_num_batched_tokens,
        speculative_method="draft", draft_model=str(draft_path),
        num_speculative_tokens=NUM_GUESSES,
    )  # fmt: skip
    vocab_size = load_hf_config(draft_path).vocab_size
    return load_draft_proposer(config, 128, vocab_size, num_target_blocks)


def assert_freed(proposer) -> None:
    assert proposer.sequences == {}
    assert proposer.pool.num_free_blocks == proposer.pool.num_blocks
    assert proposer.runner.persistent_batch.num_rows_in_use == 0


CATCH_UP = {"all": 2, "first": 1, "none": 1, "unused": 1, "none, plain": 2}
"""Tokens a request's next catch-up feeds after each pattern: those past the longest prefix
of what the draft was fed (the request's tokens, then its guesses but the last) that the
request's tokens still agree with, and at least the last token."""


def test_guesses_follow_the_draft_model_through_accepted_rejected_and_unused_drafts(
    draft_path, reference
):
    proposer = make_proposer(draft_path, max_num_batched_tokens=5)  # catch-ups in passes
    num_fed = 0
    execute = proposer.runner.execute

    def counting_execute(plan):
        nonlocal num_fed
        num_fed += sum(chunk.num_new_tokens for chunk in plan.chunks)
        return execute(plan)

    proposer.runner.execute = counting_execute
    tokens = {"a": list(range(30, 42)), "b": [7, 8, 9], "c": [99]}
    # What each request's next tokens are, per step, relative to the guesses: all of them
    # and a bonus; the first then another; none accepted; guesses never verified (cut by
    # the budget) and a plain decode's token; a rejected draft, then a plain decode (the
    # request was not asked, backing off), which leaves a wrong guess before the last token.
    patterns = {
        "a": ["all", "first", "none, plain", "none", "all"],
        "b": ["none, plain", "unused", "all", "first", "none"],
        "c": ["first", "all", "unused", "none, plain", "all"],
    }
    catch_ups = {rid: len(ids) for rid, ids in tokens.items()}  # the prompts, first
    for step in range(6):
        asks = [DraftAsk(rid, ids, NUM_GUESSES) for rid, ids in tokens.items()]
        num_fed = 0
        guesses = proposer.propose_batch(asks)
        assert num_fed == sum(catch_ups.values()) + len(asks) * (NUM_GUESSES - 1), step
        for (rid, ids), guess in zip(tokens.items(), guesses):
            assert guess == reference(ids), (step, rid)
            if step == 5:
                continue
            pattern = patterns[rid][step]
            catch_ups[rid] = CATCH_UP[pattern]
            if pattern == "all":
                ids += guess + [1]
            elif pattern == "first":
                ids += [guess[0], (guess[1] + 1) % 300]
            elif pattern == "none":
                ids.append((guess[0] + 1) % 300)
            elif pattern == "unused":
                ids.append(5 if guess[0] != 5 else 6)
            else:
                ids += [(guess[0] + 1) % 300, guess[1]]
    for rid in tokens:
        proposer.release(rid)
    assert_freed(proposer)


def test_a_full_pool_leaves_a_request_undrafted_and_holding_nothing(draft_path, reference):
    proposer = make_proposer(draft_path, num_target_blocks=4)  # 4 + 4 x 2 blocks of 4
    long_ids = list(range(10, 40))  # 30 tokens + 2 guesses fed back: 8 blocks
    short_ids = [3, 4, 5]
    guesses = proposer.propose_batch(
        [DraftAsk("long", long_ids, NUM_GUESSES), DraftAsk("short", short_ids, 2)]
    )
    assert guesses == [reference(long_ids), reference(short_ids)[:2]]
    assert proposer.pool.num_free_blocks == 12 - 8 - 1
    proposer.release("long")
    crowded = [DraftAsk(f"r{i}", list(range(50 + i, 70 + i)), NUM_GUESSES) for i in range(3)]
    guesses = proposer.propose_batch(crowded)  # 6 blocks each, 11 free: one fits
    assert guesses == [reference(crowded[0].token_ids), [], []]
    assert set(proposer.sequences) == {"short", "r0"}
    for rid in list(proposer.sequences):
        proposer.release(rid)
    assert_freed(proposer)


def test_guesses_stop_at_the_drafts_longest_context(draft_path, reference):
    proposer = make_proposer(draft_path)  # a context of 128 tokens
    near_end = [i % 300 for i in range(127)]  # room for 2 tokens fed: 2 guesses
    assert proposer.propose_batch([DraftAsk("end", near_end, NUM_GUESSES)]) == [
        reference(near_end)[:2]
    ]
    at_end = near_end + [1, 2]
    assert proposer.propose_batch([DraftAsk("end", at_end, NUM_GUESSES)]) == [[]]
    assert_freed(proposer)


def test_a_failing_pass_drafts_nothing_and_the_next_step_starts_over(draft_path, reference):
    proposer = make_proposer(draft_path)
    ids = [11, 12, 13, 14, 15]
    assert proposer.propose_batch([DraftAsk("x", ids, NUM_GUESSES)]) == [reference(ids)]
    execute = proposer.runner.execute

    def broken(plan):
        raise RuntimeError("device lost")

    proposer.runner.execute = broken
    ids = ids + [1]
    assert proposer.propose_batch([DraftAsk("x", ids, NUM_GUESSES)]) == [[]]
    assert_freed(proposer)
    proposer.runner.execute = execute
    assert proposer.propose_batch([DraftAsk("x", ids, NUM_GUESSES)]) == [reference(ids)]
    proposer.release("x")
    assert_freed(proposer)
