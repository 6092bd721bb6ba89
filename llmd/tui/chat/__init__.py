"""`llmd chat`: a multi-turn chat with the daemon, streamed as Markdown, or one-shot for scripts."""
