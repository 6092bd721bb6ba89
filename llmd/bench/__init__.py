"""Benchmarks of llmd: a serving load generator, budget sweeps, offline throughput against
HF transformers, and the machine's measured limits."""
