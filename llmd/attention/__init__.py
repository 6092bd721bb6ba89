"""Paged attention: the per-step metadata and the backends (torch reference, Triton)."""
