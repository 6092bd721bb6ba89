"""Tool calling: the tools a chat request offers, the constraint that forces a call, and the
parsers that find calls in a reply's text, whole or streamed (pure Python, no torch)."""
