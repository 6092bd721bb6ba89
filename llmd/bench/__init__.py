"""Benchmarks of llmd against HF transformers and against the machine's measured limits."""
