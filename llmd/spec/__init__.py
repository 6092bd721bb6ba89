"""Speculative decoding's proposers: where draft tokens come from (the n-gram one numpy,
the draft model's torch, imported only when used)."""
