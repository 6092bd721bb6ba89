"""Speculative decoding's proposers: where draft tokens come from (numpy, no torch)."""
