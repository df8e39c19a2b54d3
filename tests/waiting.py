"""Waiting on a condition with a deadline (never a bare sleep): the one helper every test module uses."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def poll(fn: Callable[[], Any], timeout: float = 30.0, what: str = "condition", every: float = 0.05) -> Any:
    """Call `fn` until it returns something truthy (returned); AssertionError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)
