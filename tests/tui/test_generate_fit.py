"""`llmd generate` asks for what fits the context instead of being refused for max_tokens."""

from __future__ import annotations

from llmd.client.context_fit import context_warning, fitted_max_tokens, refused_max_tokens
from llmd.errors import RequestRejectedError


def test_fitted_max_tokens_is_the_room_after_the_prompt():
    assert fitted_max_tokens(3, 300, 256) == 253
    assert fitted_max_tokens(3, 24, 256) == 24
    assert fitted_max_tokens(255, 10, 256) == 1
    assert context_warning(3, 253, 256) is None
    assert "at most 253 tokens" in context_warning(3, 300, 256)


def test_only_a_max_tokens_refusal_is_retried():
    refusal = RequestRejectedError(
        "prompt (3 tokens) plus max_tokens (300) is 303 tokens, but max_model_len is 256",
        "max_tokens",
    )
    assert refused_max_tokens(refusal) == (3, 256)
    too_long_prompt = RequestRejectedError(
        "prompt has 814 tokens, but max_model_len is 256 (prompt plus at least one output "
        "token must fit)",
        "prompt",
    )
    assert refused_max_tokens(too_long_prompt) is None
    kv_pool = RequestRejectedError("prompt plus max_tokens needs 9000 tokens = 563 KV blocks",
                                   "max_tokens")  # fmt: skip
    assert refused_max_tokens(kv_pool) is None


def test_local_generate_fits_max_tokens_to_the_context(tmp_path):
    from click.testing import CliRunner

    from llmd.cli import main

    result = CliRunner().invoke(
        main, ["generate", "--local", "--max-tokens", "100000", "--ignore-eos", "once"]
    )
    assert result.exit_code == 0, result.output
    assert "warning: --max-tokens 100000 does not fit" in result.output
