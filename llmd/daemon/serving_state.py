"""The daemon's health: warming, ok, draining or dead, and why the engine died.

One small state machine, changed by the I/O thread alone, so that the health reply, the
stats and the refusal of new requests all give the same answer. A drain outranks a death:
a daemon that is stopping says so even if its engine died meanwhile.
"""

from __future__ import annotations

import logging

from llmd.errors import EngineDeadError, LLMDError, ShuttingDownError

logger = logging.getLogger("llmd.daemon.server")

WARMING = "warming"
OK = "ok"
DRAINING = "draining"
DEAD = "dead"


class ServingState:
    """Where the daemon is in its life, as health replies and stats report it."""

    def __init__(self, is_warming: bool) -> None:
        self.value = WARMING if is_warming else OK
        """warming (until the engine's warm-up ends), ok, draining or dead."""
        self.dead_message: str | None = None
        """Why the engine died (the first reason given), once it has."""

    def on_warm(self, seconds: float) -> None:
        """The engine's warm-up ended after `seconds`: ready, unless stopping or dead."""
        if self.value == WARMING:
            self.value = OK
        logger.info("ready (warm-up took %.1f s)", seconds)

    def on_engine_death(self, message: str) -> None:
        """The engine (or the text thread) stopped: dead, unless already draining."""
        if self.dead_message is None:
            logger.error("engine is dead: %s", message)
            self.dead_message = message
        if self.value != DRAINING:
            self.value = DEAD

    def on_drain(self) -> None:
        """A drain began (or another drain request came)."""
        self.value = DRAINING

    @property
    def is_dead(self) -> bool:
        """True once the engine died, unless the daemon was draining already."""
        return self.value == DEAD

    def refusal(self) -> LLMDError | None:
        """Why a new request is refused in this state, or None to take it."""
        if self.value == DRAINING:
            return ShuttingDownError("the daemon is shutting down and accepts no new requests")
        if self.value == DEAD:
            return EngineDeadError(f"the engine has died ({self.dead_message})")
        return None
