"""The `llmd` command group: turns every expected failure into one clean `Error: ...` line.

Commands raise llmd's typed errors (bad flags, a bad address, no daemon) and may meet a
full or closed stdout; the group catches them in one place, so no command can print a
traceback for bad input and every error reads the same way.
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Any

import click

from llmd.errors import LLMDError, user_message

STDOUT_ERRNOS = (errno.ENOSPC, errno.EPIPE, errno.EIO, errno.EBADF)
"""Errors of writing to stdout that end a command with a message instead of a traceback."""


def cli_error(error: BaseException) -> click.ClickException:
    """The one-line error a user sees: what went wrong, no internal code or traceback."""
    return click.ClickException(user_message(error))


def silence_stdout() -> None:
    """Point fd 1 at /dev/null, so the interpreter's final flush of stdout cannot fail too."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


class LLMDGroup(click.Group):
    """A click group whose commands fail with `Error: message` and exit status 1."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().main(*args, **kwargs)
        except OSError as error:  # raised while click parsed or printed help
            if error.errno not in STDOUT_ERRNOS:
                raise
            _exit_on_stdout_error(error)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except LLMDError as error:
            raise cli_error(error) from None
        except OSError as error:
            if error.errno in STDOUT_ERRNOS:
                _exit_on_stdout_error(error)
            raise cli_error(error) from None
        except Exception as error:
            if type(error).__module__.startswith("zmq"):  # a socket error at connect time
                raise cli_error(error) from None
            raise


def _exit_on_stdout_error(error: OSError) -> None:
    """Stdout is full or gone: say so on stderr (a reader that left is no error) and exit."""
    silence_stdout()
    if error.errno == errno.EPIPE:  # `llmd ... | head` closed the pipe: not an error
        sys.exit(0)
    click.echo(f"Error: cannot write the output: {error.strerror}", err=True)
    sys.exit(1)
