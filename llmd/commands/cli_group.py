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


PARAMETER_OPTIONS = {
    "seed": "sampling_seed",  # SamplingParams.seed is --sampling-seed where --seed is the engine's
    "drain_timeout_s": "drain_timeout",
    "metrics_window_s": "metrics_window",
    "ready_timeout_s": "ready_timeout",
    "timeout_s": "timeout",
}
"""Error parameters (config and SamplingParams fields) whose option has another name."""


def cli_error(error: BaseException, command: click.Command | None = None) -> click.ClickException:
    """The one-line error a user sees: what went wrong, no internal code or traceback.

    A parameter the command has an option for is named as typed (`--sampling-seed: ...`,
    not the field name `seed: ...`); `command` defaults to the one running now.
    """
    if command is None:
        ctx = click.get_current_context(silent=True)
        command = ctx.command if ctx is not None else None
    flag = _flag_for(command, getattr(error, "parameter", None))
    if flag is not None:
        error = _Renamed(error.message, flag, getattr(error, "code", ""))  # type: ignore[attr-defined]
    return click.ClickException(user_message(error))


class _Renamed(Exception):
    """An llmd error as user_message reads it, its parameter named by the option's flag."""

    def __init__(self, message: str, parameter: str, code: str) -> None:
        super().__init__(message)
        self.message, self.parameter, self.code = message, parameter, code


def _flag_for(command: click.Command | None, parameter: str | None) -> str | None:
    """The long flag of `command`'s option that sets `parameter`, if it has one."""
    if command is None or not parameter:
        return None
    options = {p.name: p for p in command.params if isinstance(p, click.Option)}
    for name in (PARAMETER_OPTIONS.get(parameter), parameter):
        option = options.get(name) if name else None
        if option is not None:
            return max(option.opts, key=len)
    return None


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
            raise cli_error(error, self._subcommand(ctx)) from None
        except OSError as error:
            if error.errno in STDOUT_ERRNOS:
                _exit_on_stdout_error(error)
            raise cli_error(error) from None
        except Exception as error:
            if type(error).__module__.startswith("zmq"):  # a socket error at connect time
                raise cli_error(error) from None
            raise

    def _subcommand(self, ctx: click.Context) -> click.Command | None:
        name = ctx.invoked_subcommand
        return self.get_command(ctx, name) if name else None


def _exit_on_stdout_error(error: OSError) -> None:
    """Stdout is full or gone: say so on stderr (a reader that left is no error) and exit."""
    silence_stdout()
    if error.errno == errno.EPIPE:  # `llmd ... | head` closed the pipe: not an error
        sys.exit(0)
    click.echo(f"Error: cannot write the output: {error.strerror}", err=True)
    sys.exit(1)
