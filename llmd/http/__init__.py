"""The OpenAI-compatible HTTP front end of `llmd serve`, and its Prometheus metrics.

It runs in a process `llmd serve` starts (llmd.http.worker) and reaches the engine only
through `llmd.client.AsyncClient` over the daemon's own address, exactly like any ZeroMQ
client; it never imports torch.
"""
