"""The cancel request of a run, as an apply sees it: `kplan cancel` (planner.api.cancel) writes
`/kplan/runs/<plan>/cancel`; the running apply honours it between units. Read once, then again only after the
watch on that znode fired or the ZooKeeper connection changed state (a watch may be lost with the session), so
checking it costs no round trip.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from planner.execution import runstate as rs


class CancelWatch:
    """Holds the last cancel request read and whether it must be read again."""

    def __init__(self, client: Any, hexid: str, read: Callable[[Callable[[], Any]], Any],
                 wake: Callable[[], None], dry_run: bool = False):
        self.client, self.hexid, self.read, self.wake, self.dry_run = client, hexid, read, wake, dry_run
        self.stale = True   # read (again): at start, after its watch fired, after a connection change
        self.seen: dict[str, Any] | None = None

    def request(self) -> dict[str, Any] | None:
        """The cancel request recorded for the run (None: none; a dry run never has one)."""
        if self.dry_run:
            return None
        if self.stale:
            self.stale = False
            self.seen = self.read(lambda: rs.read_cancel(self.client, self.hexid, watch=self._fired))
        return self.seen

    def _fired(self, event: Any) -> None:
        self.stale = True
        self.wake()
