"""Speculative decoding with structured outputs: constrained requests draft, same tokens.

A verify step samples every draft position at once, so each position must be masked by
the grammar's state after the drafts before it, drafts the grammar refuses must be cut,
and the accepted run must advance the matcher; a wrong mask at any position lets the
random tiny model's choice differ from the one made without speculation within a token
or two, which the oracle proposer's runs of every acceptance length would show.
"""

from __future__ import annotations

import numpy as np
import pytest

from llmd import LLM, SamplingParams
from llmd.structured.grammar_compiler import GrammarCompiler, build_llg_tokenizer
from llmd.structured_outputs import StructuredOutputs
from tests.oracle_proposer import OracleProposer
from tests.structured.constraints import ANSWERS, PERSON, PHONE, check_output
from tests.tiny_model import make_tiny_model

MAX_TOKENS = 64
CHOICES = ["yes, certainly", "no, not at all", "maybe later"]
"""Choices of several tokens each, so every request has decodes to draft for."""
SPECS = [{"json": PERSON}, {"regex": PHONE}, {"choice": CHOICES}]
PROMPTS = [[5, 9, 3, 7], list(range(20, 40)), [42], [11, 12, 13, 14] * 3, [7, 7, 8], [300, 2]]
"""One prompt per request, so the oracle's continuation of each is that request's own."""
SPEC_OF = [SPECS[i // 2] for i in range(len(PROMPTS))]
PARAMS = [
    SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, structured_outputs=spec)
    if i % 2 == 0
    else SamplingParams(temperature=1.0, seed=i, max_tokens=MAX_TOKENS, structured_outputs=spec)
    for i, spec in enumerate(SPEC_OF)
]
"""Each constraint greedy and seeded at temperature 1."""


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("spec-structured"), "llama")


def make_llm(path, speculate: bool, **kwargs) -> LLM:
    """An engine with the constraints compiled already: a request whose grammar compiles
    waits outside the scheduler, so batches (and preemptions) would follow the compile
    thread's timing."""
    if speculate:
        kwargs.update(speculative_method="ngram", num_speculative_tokens=4, prompt_lookup_min=1)
    llm = LLM(str(path), device="cpu", dtype="float32", block_size=4, attention_backend="cpu",
              **kwargs)  # fmt: skip
    llm.generate([[3]] * len(SPECS), [SamplingParams(max_tokens=1, structured_outputs=spec)
                                      for spec in SPECS])  # fmt: skip
    return llm


@pytest.fixture(scope="module")
def expected(model_path):
    """The spec-off outputs (tokens with the final EOS, and text) of `PROMPTS`."""
    outputs = make_llm(model_path, False, num_blocks=256).generate(PROMPTS, PARAMS)
    return [(output.token_ids, output.text) for output in outputs]


class CountingProposer(OracleProposer):
    """The oracle, counting the tokens it proposes (the speculator's count is after cuts)."""

    num_proposed = 0

    def propose(self, token_ids, max_num_tokens):
        draft = super().propose(token_ids, max_num_tokens)
        self.num_proposed += len(draft)
        return draft


def test_spec_off_outputs_are_valid_and_end_by_the_grammar(expected):
    for spec, (token_ids, text) in zip(SPEC_OF, expected):
        check_output(spec, text)
        assert len(token_ids) < MAX_TOKENS  # ended by EOS, which the oracle drafts too


@pytest.mark.parametrize("period", [0, 2, 3])
@pytest.mark.parametrize(
    "scenario",
    [
        {"num_blocks": 256},
        {"num_blocks": 22, "max_num_batched_tokens": 16},
        {"num_blocks": 256, "async_scheduling": True},
    ],
    ids=["batched", "preempted", "async"],
)
def test_constrained_requests_draft_and_keep_their_tokens(model_path, expected, period, scenario):
    llm = make_llm(model_path, True, **scenario)
    speculator = llm.engine.scheduler.speculator
    proposer = CountingProposer(PROMPTS, [token_ids for token_ids, _ in expected], period)
    speculator.proposer = proposer
    outputs = llm.generate(PROMPTS, PARAMS)
    assert [(o.token_ids, o.text) for o in outputs] == expected
    for spec, output in zip(SPEC_OF, outputs):
        check_output(spec, output.text)
        assert output.metrics.num_drafts > 0  # every constrained request drafted
    totals = speculator.totals
    if period == 0:  # the exact continuation, EOS included: all accepted
        assert totals.num_accepted_tokens == totals.num_draft_tokens
    else:
        assert 0 < totals.num_accepted_tokens < totals.num_draft_tokens
    if scenario["num_blocks"] == 22:
        assert llm.engine.scheduler.num_preemptions > 0
    if scenario != {"num_blocks": 256}:
        return  # drafts without free blocks are dropped, async asks the proposer ahead
    # Only cuts make proposals go unverified here: the exact oracle loses at most each
    # request's lone EOS after its complete text (llguidance refuses even EOS once stopped;
    # the mask forces it anyway), the corrupting one every refused draft and all after it.
    num_cut = proposer.num_proposed - totals.num_draft_tokens
    assert num_cut <= len(PROMPTS) if period == 0 else num_cut > 2 * len(PROMPTS)


def test_ngram_drafts_keep_constrained_output(model_path, expected):
    llm = make_llm(model_path, True, num_blocks=256)
    outputs = llm.generate(PROMPTS, PARAMS)
    assert [(o.token_ids, o.text) for o in outputs] == expected


def _matcher(model_path, spec: dict):
    """A fresh matcher of `spec` for the tiny model's tokenizer, and its vocabulary size."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    vocab_size = len(tokenizer)
    tokenizer_json = (model_path / "tokenizer.json").read_text()
    compiler = GrammarCompiler(
        lambda: build_llg_tokenizer(tokenizer_json, vocab_size, [tokenizer.eos_token_id])
    )
    try:
        compiled = compiler.submit(StructuredOutputs.from_dict(spec)).result()
    finally:
        compiler.close()
    return compiled.new_matcher(), tokenizer, vocab_size


def _masks(fill, num_rows: int, vocab_size: int) -> list[list[int]]:
    """The allowed token ids of each of `num_rows` masks that `fill(address, bytes)` writes."""
    num_words = (vocab_size + 31) // 32
    bitmask = np.zeros((num_rows, num_words), dtype=np.int32)
    fill(bitmask.ctypes.data, num_words * 4)
    bits = np.unpackbits(bitmask.view(np.uint8), axis=1, bitorder="little")[:, :vocab_size]
    return [np.flatnonzero(row).tolist() for row in bits]


def test_draft_masks_follow_the_drafts_and_leave_the_matcher_as_it_was(model_path):
    matcher, tokenizer, vocab_size = _matcher(model_path, {"choice": ANSWERS})
    eos = tokenizer.eos_token_id
    yes = tokenizer.encode("yes", add_special_tokens=False)
    drafts = [*yes, eos, 5]  # the text is complete after `yes`: only EOS may follow
    assert matcher.num_allowed(drafts) == len(yes) + 1
    assert matcher.num_allowed([yes[0], vocab_size + 3]) == 1  # an unknown id: no error
    assert matcher.error is None
    masks = _masks(
        lambda address, size: matcher.fill_draft_masks(drafts, address, size),
        len(drafts) + 1,
        vocab_size,
    )
    plain, _, _ = _matcher(model_path, {"choice": ANSWERS})
    for j in range(len(yes) + 1):  # a plain matcher advanced by the same tokens, in turn
        assert masks[j] == _masks(plain.fill_mask, 1, vocab_size)[0]
        if j < len(yes):
            assert plain.accept(yes[j])
    assert masks[len(yes)] == masks[len(yes) + 1] == masks[-1] == [eos]
    assert len(masks[0]) > 1 and masks[1] != masks[0]
    assert not matcher.is_terminated  # the drafts moved a copy only
    assert _masks(matcher.fill_mask, 1, vocab_size)[0] == masks[0]
