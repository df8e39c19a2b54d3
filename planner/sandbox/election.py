"""Kafka's leader election rules (docs/KAFKA_ZK.md §2), one function per rule, written from the ZooKeeper-mode
controller's behaviour (`PartitionLeaderElectionAlgorithms`, `Election`, `ReplicaStateMachine`).

These are deliberately independent of the planner's replay code: tests compare the two implementations.
`online(b)` means registered in /brokers/ids and not shutting down. Every function returns None when no
leader can be chosen (the caller then leaves the partition as it is, as Kafka does).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from typing import Any

Online = Callable[[int], bool]


def offline_leader(replicas: list[int], isr: list[int], online: Online, unclean: bool
                   ) -> tuple[int, list[int], bool] | None:
    """Offline partition (leader dead or none): the first replica in assignment order that is online and in
    the ISR; new ISR = old ISR restricted to online brokers, order kept. Only when no ISR member is online and
    unclean election is enabled: the first online replica, ISR = [it], and the partition is RECOVERING.
    Returns (leader, isr, recovering)."""
    for r in replicas:
        if r in isr and online(r):
            return r, [x for x in isr if online(x)], False
    if unclean:
        for r in replicas:
            if online(r):
                return r, [r], True
    return None


def controlled_shutdown_leader(replicas: list[int], isr: list[int], registered: Collection[int],
                               shutting_down: Collection[int]) -> tuple[int, list[int]] | None:
    """Leader on a broker being shut down gracefully: the first replica in assignment order that is
    registered, in the ISR and not shutting down; new ISR = old ISR minus every shutting-down broker."""
    for r in replicas:
        if r in registered and r in isr and r not in shutting_down:
            return r, [x for x in isr if x not in shutting_down]
    return None


def reassign_leader(target: list[int], isr: list[int], online: Online) -> int | None:
    """Reassignment completion when the leader is not in the target or is dead: the first target replica that
    is online and in the ISR (ISR unchanged)."""
    for r in target:
        if online(r) and r in isr:
            return r
    return None


def preferred_leader(replicas: list[int], isr: list[int], online: Online) -> int | None:
    """Preferred election: replicas[0] if it is online and in the ISR (ISR unchanged), else nothing."""
    if replicas and online(replicas[0]) and replicas[0] in isr:
        return replicas[0]
    return None


def without_replica(replica: int, leader: int, isr: list[int]) -> tuple[int, list[int]] | None:
    """OfflineReplica (`removeReplicasFromIsr`): a replica leaves the ISR unless it is the only member (an ISR
    never becomes empty); if it was the leader the partition loses its leader (-1). None when the replica is
    not in the ISR (nothing is written then)."""
    if replica not in isr:
        return None
    new_leader = -1 if leader == replica else leader
    new_isr = isr if len(isr) == 1 else [x for x in isr if x != replica]
    return new_leader, list(new_isr)


def _improve(h: int) -> int:
    """scala.collection.Hashing.improve, in 32-bit arithmetic."""
    h = (h + ~(h << 9)) & 0xFFFFFFFF
    h ^= h >> 14
    h = (h + (h << 4)) & 0xFFFFFFFF
    return h ^ (h >> 10)


def broker_visit_order(brokers: Collection[int]) -> list[int]:
    """The order in which ZkReplicaStateMachine.handleStateChanges visits the brokers whose replicas go
    OfflineReplica together (`replicas.groupBy(_.replica).forKeyValue`): the iteration order of Scala 2.13's
    immutable.HashMap of Int keys. Built as that map is, a CHAMP trie: 5 bits of the improved hash per level,
    lowest first, a key kept in the shallowest node where its bits are its own; foreachEntry walks a node's own
    keys (by index), then its sub-nodes (by index), depth first."""
    root: dict[str, dict[int, Any]] = {"keys": {}, "nodes": {}}

    def insert(node: dict[str, dict[int, Any]], key: int, h: int, shift: int) -> None:
        i = (h >> shift) & 31
        if i in node["nodes"]:
            insert(node["nodes"][i], key, h, shift + 5)
        elif i in node["keys"]:
            other = node["keys"].pop(i)
            sub: dict[str, dict[int, Any]] = {"keys": {}, "nodes": {}}
            node["nodes"][i] = sub
            insert(sub, other[0], other[1], shift + 5)
            insert(sub, key, h, shift + 5)
        else:
            node["keys"][i] = (key, h)

    for b in dict.fromkeys(brokers):
        insert(root, b, _improve(b), 0)

    def walk(node: dict[str, dict[int, Any]]) -> Iterator[int]:
        for i in sorted(node["keys"]):
            yield node["keys"][i][0]
        for i in sorted(node["nodes"]):
            yield from walk(node["nodes"][i])

    return list(walk(root))
