"""How `llmd serve` runs its HTTP front end: the address it binds and the daemon it serves.

Plain data, fixed before the HTTP process starts: the daemon builds one from its
ServeOptions, HttpServer binds and starts the HTTP process from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GRACEFUL_SHUTDOWN_S = 5.0
"""On stop, how long open connections may take to finish their last response."""


@dataclass(frozen=True)
class HttpSettings:
    """Where the HTTP API listens, which daemon it forwards to, and its limits."""

    host: str
    port: int
    daemon_address: str
    allow_remote: bool = False
    """Whether a host other machines can reach is allowed (set --api-key with it)."""
    api_key: str | None = field(default=None, repr=False)
    """Passed to the HTTP process in its environment, never on its command line."""
    max_body_bytes: int = 8 * 1024 * 1024
    graceful_shutdown_s: float = GRACEFUL_SHUTDOWN_S
    log_level: str = "info"

    @property
    def url(self) -> str:
        """http://HOST:PORT."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"
