"""`llmd top`: a live view of the daemon's queues, KV cache, throughput, latency and requests."""
