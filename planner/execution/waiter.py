"""The one waiter of apply, cancel, verify and the restart roll: woken by a ZooKeeper watch or after a poll
interval, whichever comes first, up to a deadline.

ZooKeeper watches are one-shot (a triggered watch is gone until it is set again, ZooKeeper Programmer's Guide
"ZooKeeper Watches"), so every wait sets its watch again with the read that checks the condition: `arm`
(exists() sets a watch whether or not the znode is there; getData would not on a missing znode). A poll bounds
each wait, as the watch may be lost with a session.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from kazoo.client import KazooClient

from planner.execution.clusterview import retrying


class Waiter:
    def __init__(self, client: KazooClient, poll: float, read: Callable[[Callable[[], Any]], Any] | None = None):
        """`read(fn)`: how a read is run (the caller's patience with an unreachable ZooKeeper); retrying by
        default."""
        self.client = client
        self.poll = poll
        self.read = read or retrying
        self.event = threading.Event()

    def wake(self, _event: Any = None) -> None:
        """A watch callback (and anything else that must end a wait early: a state change, a stop request)."""
        self.event.set()

    def sleep(self, seconds: float | None = None) -> None:
        """Until woken, or `seconds` (one poll interval by default)."""
        self.event.wait(max(0.0, self.poll if seconds is None else seconds))
        self.event.clear()

    def arm(self, path: str) -> Any:
        """exists() with a one-shot watch that wakes the waiter when the znode is created, changed or deleted."""
        return self.read(lambda: self.client.exists(path, watch=self.wake))

    def rounds(self, path: str, deadline: float | None = None, read_at: float | None = None) -> Iterator[Any]:
        """The wait loop of apply's batches and of verify: yields (the exists() stat of `path`) each time the
        caller should read the cluster again, then sleeps a poll interval (never past `deadline`, monotonic).
        While `path` exists a change of it (the controller updating /admin/reassign_partitions as partitions
        complete) wakes the loop, but reads come at most once per poll interval; once it is gone (the last
        partition completed) at once. `read_at`: the caller read just before (the first read then waits too)."""
        last = read_at
        while True:
            stat = self.arm(path)
            now = time.monotonic()
            if stat is not None and last is not None and now - last < self.poll and (deadline is None or now < deadline):
                self.sleep(min(self.poll - (now - last), _left(deadline, now)))
                continue
            last = now
            yield stat
            self.sleep(min(self.poll, _left(deadline, time.monotonic())))

    def until_absent(self, path: str, timeout: float) -> bool:
        """Wait until `path` does not exist: True, or False once `timeout` seconds have passed."""
        limit = time.monotonic() + timeout
        while self.arm(path) is not None:
            if time.monotonic() > limit:
                return False
            self.sleep()
        return True


def _left(deadline: float | None, now: float) -> float:
    return float("inf") if deadline is None else max(0.0, deadline - now)
