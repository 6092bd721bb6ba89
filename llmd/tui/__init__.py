"""Terminal apps: `llmd chat` (a streaming chat client) and `llmd top` (a live daemon monitor).

They reach the daemon only through `llmd.client` and never import torch or transformers,
so they start in well under a second on any machine that can reach a daemon.
"""
