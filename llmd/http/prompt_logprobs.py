"""A completion choice's prompt part: the echoed prompt's logprobs and vLLM's prompt_logprobs.

OpenAI's `echo` puts the prompt's tokens before the generated ones in the same parallel
lists (the first token's logprob and alternatives null: nothing predicts it); vLLM's
`prompt_logprobs` lists, per prompt token, a map from token id to logprob, rank and text.
"""

from __future__ import annotations

from llmd.http.logprobs import finite
from llmd.protocol import LogprobEntry


def echoed_logprobs(
    prompt_tokens: list[str], entries: list[LogprobEntry | None]
) -> dict[str, list[object]]:
    """{tokens, token_logprobs, top_logprobs, text_offset} of the prompt, offsets from 0.

    The actual token is listed among the alternatives, as vLLM does, so a caller can
    compare its logprob with the best one (lm-eval's greedy check).
    """
    offsets: list[object] = []
    offset = 0
    for token in prompt_tokens:
        offsets.append(offset)
        offset += len(token)
    token_logprobs: list[object] = []
    top_logprobs: list[object] = []
    for entry in entries:
        if entry is None:
            token_logprobs.append(None)
            top_logprobs.append(None)
            continue
        token_logprobs.append(finite(entry["logprob"]))
        top: dict[str, float] = {}
        for text, logprob in zip(entry["top_tokens"], entry["top_logprobs"]):
            top.setdefault(text, finite(logprob))  # tokens of equal text: the likelier one
        top.setdefault(entry["token"], finite(entry["logprob"]))
        top_logprobs.append(top)
    return {
        "tokens": list(prompt_tokens),
        "token_logprobs": token_logprobs,
        "top_logprobs": top_logprobs,
        "text_offset": offsets,
    }


def vllm_prompt_logprobs(entries: list[LogprobEntry | None]) -> list[dict[str, object] | None]:
    """Per prompt token: null for the first, else {token id: {logprob, rank, decoded_token}}
    for the actual token and the top alternatives."""
    result: list[dict[str, object] | None] = []
    for entry in entries:
        if entry is None:
            result.append(None)
            continue
        tokens: dict[str, object] = {
            str(entry["token_id"]): {
                "logprob": finite(entry["logprob"]),
                "rank": entry["rank"],
                "decoded_token": entry["token"],
            }
        }
        ranked = zip(entry["top_token_ids"], entry["top_logprobs"], entry["top_tokens"])
        for rank, (token_id, logprob, text) in enumerate(ranked, start=1):
            tokens.setdefault(
                str(token_id), {"logprob": finite(logprob), "rank": rank, "decoded_token": text}
            )
        result.append(tokens)
    return result
