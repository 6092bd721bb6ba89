"""Help text shared by several commands: the address option and the top-level epilog.

Kept in one place so every command describes the address (and its default) the same way.
"""

from __future__ import annotations

ADDRESS_HELP = "Daemon address, ipc://PATH or tcp://HOST:PORT."
ADDRESS_DEFAULT = "$LLMD_ADDRESS, else an ipc socket in $XDG_RUNTIME_DIR/llmd or /tmp/llmd-$UID"
"""Shown as `[default: (...)]`: every default is shown by click, in one way."""

MAIN_EPILOG = """\b
Examples:
  llmd serve --detach            # start the daemon on the shipped model, in the background
  llmd chat                      # talk to it;  llmd top  watches it
  llmd status                    # is it up? model, queue, KV use, log file
  llmd logs -f                   # follow the daemon's log
  llmd stop                      # drain in-flight requests and stop it

\b
Run `llmd COMMAND --help` for a command's options and examples.
Shell completion (bash; use zsh_source or fish_source for those shells):
  eval "$(_LLMD_COMPLETE=bash_source llmd)"
"""
