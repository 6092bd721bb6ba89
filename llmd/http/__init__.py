"""The OpenAI-compatible HTTP front end of `llmd serve`, and its Prometheus metrics.

It runs in the daemon's process on its own thread and event loop, and reaches the engine
only through `llmd.client.AsyncClient` over the daemon's own address, exactly like any
ZeroMQ client; it never imports torch.
"""
