"""Benchmarks of llmd: a serving load generator, budget sweeps and offline throughput."""
