"""Answers `tokenize` and `detokenize` with the daemon's own tokenizer and chat template.

The HTTP front end has no tokenizer (it imports no model code), so its /tokenize and
/detokenize ask the daemon; they run in the text worker's tokenizer pool, off the I/O thread.
"""

from __future__ import annotations

from llmd.engine.tokenizer import Tokenizer
from llmd.errors import LLMDError
from llmd.protocol import (
    DetokenizeReply,
    DetokenizeRequest,
    ErrorReply,
    TokenizeReply,
    TokenizeRequest,
    WireMessage,
)

TokenizerRequest = TokenizeRequest | DetokenizeRequest


def answer_tokenizer_request(
    tokenizer: Tokenizer, message: TokenizerRequest, max_model_len: int, tool_call_parser: str
) -> WireMessage:
    """The reply to `message`, or the error reply naming what was wrong."""
    try:
        if isinstance(message, DetokenizeRequest):
            text = tokenizer.decode(message.token_ids, skip_special_tokens=False)
            return DetokenizeReply(message.id, text)
        if message.prompt is not None:
            token_ids = tokenizer.encode(message.prompt, message.add_special_tokens)
        else:
            token_ids = tokenizer.apply_chat_template(
                message.messages or [], tool_call_parser=tool_call_parser
            )
        return TokenizeReply(message.id, token_ids, max_model_len)
    except LLMDError as error:
        return ErrorReply.from_error(message.id, error)
    except Exception as error:  # the tokenizer's own failure (an id past its vocabulary)
        parameter = "token_ids" if isinstance(message, DetokenizeRequest) else "prompt"
        text = f"{type(error).__name__}: {error}"
        return ErrorReply(message.id, "invalid_parameter", text, parameter)
