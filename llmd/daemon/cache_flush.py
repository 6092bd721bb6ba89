"""A client's flush_cache: handed to the engine thread, answered from there via the outbox.

The engine drops its cached prefixes between two steps; the reply (blocks dropped, or the
typed refusal) is posted as an ordinary send, so the I/O thread stays the socket's owner.
"""

from __future__ import annotations

from llmd.daemon.engine_commands import FlushCacheCommand
from llmd.daemon.engine_loop import EngineLoop
from llmd.daemon.outbox import Outbox, Send
from llmd.errors import EngineDeadError, LLMDError
from llmd.protocol import CacheFlushed, ErrorReply, encode


def flush_cache(engine_loop: EngineLoop, outbox: Outbox, peer: bytes, client_id: str) -> None:
    """Queue the flush; a dead engine is refused at once (no thread would answer)."""
    if engine_loop.dead_error is not None or not engine_loop.is_alive:
        raise EngineDeadError(f"the engine has died ({engine_loop.dead_error})")

    def on_done(result: int | LLMDError) -> None:
        if isinstance(result, LLMDError):
            reply: CacheFlushed | ErrorReply = ErrorReply.from_error(client_id, result)
        else:
            reply = CacheFlushed(client_id, result)
        outbox.post(Send(peer, encode(reply)))

    engine_loop.submit(FlushCacheCommand(on_done))
