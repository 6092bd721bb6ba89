"""`llmd generate` asks for what fits the context instead of being refused for max_tokens."""

from __future__ import annotations

from llmd.client.context_fit import (
    MaxTokensCut,
    context_warning,
    fitted_max_tokens,
    max_tokens_cut,
)
from llmd.errors import RequestRejectedError


def test_fitted_max_tokens_is_the_room_after_the_prompt():
    assert fitted_max_tokens(3, 300, 256) == 253
    assert fitted_max_tokens(3, 24, 256) == 24
    assert fitted_max_tokens(255, 10, 256) == 1
    assert context_warning(3, 253, 256) is None
    assert "at most 253 tokens" in context_warning(3, 300, 256)


def test_only_a_refusal_that_carries_a_smaller_fit_is_cut():
    refusal = RequestRejectedError("any words", "max_tokens", num_prompt_tokens=3,
                                   max_model_len=256, max_fitting_tokens=253)  # fmt: skip
    cut = max_tokens_cut(refusal, 300)
    assert cut == MaxTokensCut(num_prompt_tokens=3, max_model_len=256, wanted_max_tokens=300,
                               max_tokens=253)  # fmt: skip
    assert cut.warning() == context_warning(3, 300, 256)
    assert max_tokens_cut(refusal, 253) is None  # nothing smaller fits than what was asked
    too_long_prompt = RequestRejectedError("prompt has 814 tokens", "prompt", num_prompt_tokens=814,
                                           max_model_len=256, max_fitting_tokens=0)  # fmt: skip
    assert max_tokens_cut(too_long_prompt, 300) is None
    kv_pool = RequestRejectedError("prompt plus max_tokens needs 9000 tokens = 563 KV blocks",
                                   "max_tokens")  # fmt: skip
    assert max_tokens_cut(kv_pool, 300) is None  # no numbers: never read from the text
    text_only = RequestRejectedError(
        "prompt (3 tokens) plus max_tokens (300) is 303 tokens, but max_model_len is 256",
        "max_tokens",
    )  # what a daemon older than the numbers sends
    assert max_tokens_cut(text_only, 300) is None
    assert max_tokens_cut(ValueError("prompt (3 tokens)"), 300) is None


def test_local_generate_fits_max_tokens_to_the_context(tmp_path):
    from click.testing import CliRunner

    from llmd.cli import main

    result = CliRunner().invoke(
        main, ["generate", "--local", "--max-tokens", "100000", "--ignore-eos", "once"]
    )
    assert result.exit_code == 0, result.output
    assert "warning: --max-tokens 100000 does not fit" in result.output
