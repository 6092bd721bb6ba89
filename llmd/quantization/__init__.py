"""Quantized checkpoints: reading their config and tensors, and the linear layers that run them."""
