"""Waiting for an app under Pilot to reach a state, with a deadline instead of sleeps.

`Pilot.pause()` alone is not enough to read the screen: it waits for the messages queued
when it is called and then for the process to look idle by CPU time, which a loaded machine
fakes. A change that takes several hops (a widget's refresh, then the screen's layout) can
still be on its way, and the compositor then draws new text at the old sizes. `settle`
waits until no hop is left.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.app import App
from textual.pilot import Pilot

REFRESH_FLAGS = (
    "_layout_required",
    "_repaint_required",
    "_scroll_required",
    "_recompose_required",
    "_refresh_styles_required",
)
"""A widget's (and the screen's) marks for work its next idle will hand on or do."""


async def wait_for(pilot: Pilot, condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Let the app run until `condition()` holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {condition}")
        await pilot.pause(0.01)


def is_settled(app: App) -> bool:
    """Whether no message is queued and every refresh reached the compositor's map.

    A message being handled right now leaves no mark; `settle` covers that by checking
    twice. Uses Textual internals on purpose: no public API says a layout is pending.
    """
    screen = app.screen
    if app._batch_count or screen._dirty_widgets:
        return False
    for node in (app, *screen.walk_children(with_self=True)):
        if not node._message_queue.empty() or node._pending_message or node._next_callbacks:
            return False
        if any(getattr(node, flag, False) for flag in REFRESH_FLAGS):
            return False
    return True


async def settle(pilot: Pilot, timeout: float = 10.0) -> None:
    """Let the app run until nothing is left to handle or draw; fail after `timeout`.

    Each pause first lets every handler that was running or queued finish, and ends by
    applying any layout the screen was told of; two settled checks in a row mean that
    a handler still running at the first had nothing left to start by the second.
    """
    deadline = time.monotonic() + timeout
    num_settled = 0
    while num_settled < 2:
        if time.monotonic() > deadline:
            raise AssertionError(f"the app did not settle within {timeout}s")
        await pilot.pause()
        num_settled = num_settled + 1 if is_settled(pilot.app) else 0
