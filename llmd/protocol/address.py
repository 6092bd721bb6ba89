"""Daemon addresses: the per-user default, parsing, and the loopback check.

`llmd serve`, `llmd stop`, `llmd status`, the client and the terminal apps must agree on
where the daemon listens without being told, so the default lives here, torch-free.
"""

from __future__ import annotations

import ipaddress
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from llmd.errors import InvalidParameterError

ADDRESS_ENV = "LLMD_ADDRESS"
"""Overrides the default address for every llmd command and client."""
SOCKET_NAME = "llmd.sock"
MAX_IPC_PATH_BYTES = 107
"""sun_path holds 108 bytes including the terminating NUL."""
_LOOPBACK_NAMES = ("localhost", "ip6-localhost")


def runtime_dir() -> Path:
    """$XDG_RUNTIME_DIR/llmd when that directory exists, else /tmp/llmd-$UID."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base and os.path.isdir(base):
        return Path(base) / "llmd"
    return Path("/tmp") / f"llmd-{os.getuid()}"


def ensure_private_dir(path: Path) -> Path:
    """Create `path` with mode 0700, or check an existing one is ours and make it 0700."""
    try:
        path.mkdir(mode=0o700, parents=False)
    except FileExistsError:
        pass
    except FileNotFoundError:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.mkdir(mode=0o700, exist_ok=True)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise InvalidParameterError(f"{path} exists and is not a directory", "address")
    if info.st_uid != os.getuid():
        raise InvalidParameterError(
            f"{path} belongs to another user (uid {info.st_uid}); refusing to use it", "address"
        )
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


def default_address() -> str:
    """$LLMD_ADDRESS, else an ipc socket in the per-user runtime directory."""
    return os.environ.get(ADDRESS_ENV) or f"ipc://{runtime_dir() / SOCKET_NAME}"


@dataclass(frozen=True)
class Address:
    """A parsed ZeroMQ endpoint: ipc://PATH or tcp://HOST:PORT."""

    scheme: str
    path: str = ""
    host: str = ""
    port: int = 0

    def __str__(self) -> str:
        if self.scheme == "ipc":
            return f"ipc://{self.path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"tcp://{host}:{self.port}"

    @property
    def is_loopback(self) -> bool:
        """True when only this machine can connect (ipc, or tcp on a loopback interface)."""
        if self.scheme == "ipc":
            return True
        if self.host in _LOOPBACK_NAMES:
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False  # '*' or a hostname that may resolve anywhere

    @property
    def instance_name(self) -> str:
        """A file-name-safe key for this address's lock and pid files."""
        if self.scheme == "ipc":
            return "ipc-" + re.sub(r"[^A-Za-z0-9._-]", "_", self.path.strip("/"))[-150:]
        return f"tcp-{re.sub(r'[^A-Za-z0-9.-]', '_', self.host)}-{self.port}"


def parse_address(text: str) -> Address:
    """Parse and check an address; raises InvalidParameterError naming 'address'."""
    if not isinstance(text, str):
        raise InvalidParameterError("must be a string", "address")
    if text.startswith("ipc://"):
        path = text[len("ipc://") :]
        if not path:
            raise InvalidParameterError("ipc:// needs a socket path", "address")
        if path.startswith("@"):
            raise InvalidParameterError("abstract ipc sockets are not supported", "address")
        path = os.path.abspath(os.path.expanduser(path))
        if len(path.encode()) > MAX_IPC_PATH_BYTES:
            raise InvalidParameterError(
                f"ipc socket path is {len(path.encode())} bytes; the limit is "
                f"{MAX_IPC_PATH_BYTES} (use a shorter path or tcp://127.0.0.1:PORT)",
                "address",
            )
        return Address("ipc", path=path)
    if text.startswith("tcp://"):
        rest = text[len("tcp://") :]
        host, sep, port_text = rest.rpartition(":")
        if not sep or not host or not port_text.isdigit():
            raise InvalidParameterError("use tcp://HOST:PORT", "address")
        port = int(port_text)
        if not 0 < port < 65536:
            raise InvalidParameterError(f"port {port} is outside 1..65535", "address")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        return Address("tcp", host=host, port=port)
    raise InvalidParameterError(f"{text!r}: use ipc://PATH or tcp://HOST:PORT", "address")
