"""Preferred leader elections, one implementation for apply (a drain's leadership batches), verify and the
restart roll.

Kafka's rule (KafkaController.onReplicaElection with PreferredReplicaPartitionLeaderElectionStrategy, i.e.
PartitionLeaderElectionAlgorithms.preferredReplicaPartitionLeaderElection): the leader becomes the first
replica of the assignment only if that replica is alive and in the ISR; otherwise the partition keeps its
leader. So a request is made only for those partitions, and the others are named.

The election is requested by creating /admin/preferred_replica_election (created only: the controller acts on
its creation and deletes it when done; see zkgate). The caller makes that write, through the gate, with
whatever must be recorded in the same transaction (the executor's run record); this module decides what to
elect and waits.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from planner import codec
from planner.execution import preflight
from planner.execution.clusterview import Key, PartStatus
from planner.execution.waiter import Waiter


@dataclass
class Electable:
    ok: list[Key] = field(default_factory=list)        # the controller would move these now
    blocked: list[Key] = field(default_factory=list)   # preferred replica not registered or not in the ISR

    def blocked_text(self, preferred: Mapping[Key, int], isr: bool = False,
                     statuses: Mapping[Key, PartStatus] | None = None) -> list[str]:
        """Each blocked partition named with its preferred replica (and its ISR, with `isr`)."""
        return [f"{preflight.name(k)} (preferred {preferred[k]}"
                + (f", ISR {list(statuses[k].isr)})" if isr and statuses is not None else ")") for k in self.blocked]


def electable(statuses: Mapping[Key, PartStatus], live: set[int], preferred: Mapping[Key, int],
              keys: Iterable[Key] | None = None) -> Electable:
    """The partitions of `keys` (all of `statuses` by default) not led by their preferred replica, split by
    whether Kafka's rule would move the leadership now."""
    out = Electable()
    for k in keys if keys is not None else statuses:
        s = statuses[k]
        if s.leader == preferred[k]:
            continue
        (out.ok if preferred[k] in live and preferred[k] in s.isr else out.blocked).append(k)
    return out


def request(keys: list[Key]) -> bytes:
    """The /admin/preferred_replica_election data for `keys` (Kafka's PreferredReplicaElectionZNode)."""
    return codec.encode_preferred_election(keys)


def await_none_pending(waiter: Waiter, timeout: float) -> bool:
    """Someone else's election first: True once none is pending, False after `timeout` seconds."""
    return waiter.until_absent(codec.PREFERRED_ELECTION, timeout)


def await_moved(waiter: Waiter, keys: list[Key], preferred: Mapping[Key, int],
                leaders: Callable[[list[Key]], Mapping[Key, PartStatus]], timeout: float) -> tuple[int, str]:
    """After a request: wait until every partition of `keys` is led by its preferred replica, the controller
    is done (the znode deleted), or `timeout`. Returns (leaders moved, "moved" | "done" | "timeout")."""
    limit = time.monotonic() + timeout
    while True:
        gone = waiter.arm(codec.PREFERRED_ELECTION) is None
        now = leaders(keys)
        moved = sum(1 for k in keys if now[k].leader == preferred[k])
        if moved == len(keys):
            return moved, "moved"
        if gone:   # the controller is done; what did not move could not (the preferred replica left the ISR?)
            return moved, "done"
        if time.monotonic() > limit:
            return moved, "timeout"
        waiter.sleep()
