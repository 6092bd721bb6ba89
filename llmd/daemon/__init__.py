"""The llmd daemon: one engine served over a ZeroMQ ROUTER socket to many clients.

Three threads split the work: the I/O thread owns the socket, the engine thread only
steps the engine, and the text thread tokenizes prompts and detokenizes outputs.
"""
