"""Constrained decoding: grammars compiled from `StructuredOutputs`, matched token by token."""
