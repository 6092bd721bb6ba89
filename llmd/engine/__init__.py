"""The control plane: request state, KV block bookkeeping and scheduling (no torch here)."""
