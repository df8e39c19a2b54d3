"""The KRaft backend's narrow cluster interface for execution (kafka-kit's `kafkazk.Handler` is the model): the
reads apply, verify and cancel need, and the only three kinds of cluster write kplan makes on KRaft, each one
Admin API request sent only after the fence's guard (planner.execution.kraftstore: the lease):

| write                                   | request (KIP)                                   |
|-----------------------------------------|-------------------------------------------------|
| a unit's targets; cancel (empty target) | AlterPartitionReassignments (KIP-455)           |
| replication throttles                   | IncrementalAlterConfigs (KIP-339), APPEND / SUBTRACT on the throttled-replica lists, SET / DELETE of the rates |
| preferred leaders                       | ElectLeaders, type PREFERRED (KIP-460)          |

Reads: DescribeTopicPartitions (leader, ISR, replicas), ListPartitionReassignments (adding / removing),
DescribeCluster (fenced brokers), DescribeConfigs. A partition's status is the ZooKeeper executor's
`PartStatus`, so election.electable and diagnosis.converged judge both backends alike.

In KRaft a reassignment's replica list is the union of the target and the replicas being removed (Kafka's
PartitionReassignmentReplicas), so `replicas` here is DescribeTopicPartitions' list and `adding`/`removing`
come from ListPartitionReassignments, exactly as ZooKeeper's topic znode keeps them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from planner.errors import KafkaUnavailable, SafetyRefusal
from planner.execution.clusterview import Key, PartStatus

log = logging.getLogger(__name__)

Guard = Callable[[], None]


class AdminCluster:
    def __init__(self, admin: Any, guard: Guard | None = None, dry_run: bool = False):
        self.admin = admin
        self.guard = guard
        self.dry_run = dry_run
        self.writes: list[str] = []          # every write, in order (what a dry run lists)

    # ------------------------------------------------------------------------------------------ reads
    def reassignments(self, keys: Iterable[Key] | None = None) -> dict[Key, dict[str, list[int]]]:
        """ListPartitionReassignments: (topic, partition) -> replicas, adding_replicas, removing_replicas."""
        from kafka import TopicPartition

        tps = None if keys is None else [TopicPartition(t, p) for t, p in keys]
        if tps is not None and not tps:
            return {}
        return {(tp.topic, tp.partition): v for tp, v in self.admin.list_partition_reassignments(tps).items()}

    def partitions(self, keys: Iterable[Key] | None = None, states: bool = True) -> dict[Key, PartStatus]:
        """Each partition (every partition of the cluster for None) as PartStatus; replicas None when the topic
        or partition does not exist."""
        from planner import kraft_admin as ka

        wanted = None if keys is None else list(dict.fromkeys(keys))
        described = ka.describe_topic_partitions(self.admin, None if wanted is None else {t for t, _ in wanted})
        moving = self.reassignments(None)
        out: dict[Key, PartStatus] = {}
        for k in wanted if wanted is not None else [k for k in described if k[1] >= 0]:
            d = described.get(k)
            if d is None or d.get("error"):
                out[k] = PartStatus(None)
                continue
            r = moving.get(k) or {}
            out[k] = PartStatus(tuple(d["replicas"]), tuple(r.get("adding_replicas", ())),
                                tuple(r.get("removing_replicas", ())), int(d["leader"]), tuple(d["isr"]), True)
        return out

    def all_partition_keys(self) -> list[Key]:
        return sorted(self.partitions(None))

    def live_brokers(self) -> set[int]:
        """Registered and unfenced brokers (DescribeCluster v2)."""
        from planner import kraft_admin as ka

        return {b for b, info in ka.brokers(self.admin).items() if not info["fenced"]}

    def configs(self, kind: str, names: Iterable[str], keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        """DescribeConfigs: name -> {key: (value, source)} for `keys`."""
        from planner import kraft_admin as ka

        names = sorted({str(n) for n in names})
        if not names:
            return {}
        got = ka.configs(self.admin, kind, names, list(keys))
        return {n: {k: (v.get("value"), v.get("source")) for k, v in got.get(n, {}).items()} for n in names}

    # ----------------------------------------------------------------------------------------- writes
    def _write(self, text: str) -> bool:
        """Before every write: the guard (the fence's lease). Returns False for a dry run (listed, not sent)."""
        self.writes.append(text)
        if self.dry_run:
            return False
        if self.guard is not None:
            self.guard()
        log.info("%s", text)
        return True

    def reassign(self, targets: Mapping[Key, tuple[int, ...] | None], what: str) -> None:
        """AlterPartitionReassignments: each partition's target (None cancels its reassignment: the controller
        puts back the replicas it had before, Kafka's ReplicationControlManager.cancelPartitionReassignment).
        Any partition-level error is a SafetyRefusal naming it."""
        from kafka import TopicPartition

        if not targets:
            return
        verb = "cancel" if all(v is None for v in targets.values()) else "reassign"
        if not self._write(f"AlterPartitionReassignments {verb} {len(targets)} partitions ({what})"):
            return
        res = self.admin.alter_partition_reassignments(
            {TopicPartition(t, p): (None if v is None else list(v)) for (t, p), v in targets.items()})
        bad = {f"{tp.topic}-{tp.partition}": e.__name__ for tp, e in res.items() if e is not None}
        if verb == "cancel":   # nothing to cancel is what a cancel wants
            bad = {k: v for k, v in bad.items() if v != "NoReassignmentInProgressError"}
        if bad:
            shown = ", ".join(f"{k} ({v})" for k, v in list(bad.items())[:20])
            raise SafetyRefusal(f"the controller refused {len(bad)} partitions of {what}: {shown}")

    def elect_preferred(self, keys: list[Key], what: str) -> dict[Key, str | None]:
        """ElectLeaders (PREFERRED): per partition None (elected, or already led by its preferred replica) or the
        error's name."""
        from kafka import errors as Errors

        if not keys or not self._write(f"ElectLeaders preferred for {len(keys)} partitions ({what})"):
            return {}
        by_topic: dict[str, list[int]] = {}
        for t, p in keys:
            by_topic.setdefault(t, []).append(p)
        resp = self.admin.elect_leaders(0, by_topic, raise_errors=False)
        out: dict[Key, str | None] = {}
        for result in getattr(resp, "replica_election_results", []):
            for part in result.partition_result:
                err = Errors.for_code(part.error_code)
                out[(result.topic, part.partition_id)] = None if err in (Errors.NoError, Errors.ElectionNotNeededError) \
                    else err.__name__
        return out

    def alter_configs(self, changes: Mapping[tuple[str, str], Mapping[str, tuple[str, str | None]]],
                      what: str) -> None:
        """IncrementalAlterConfigs: (kind "topic"|"broker", name) -> {key: (op, value)}, op SET / DELETE / APPEND /
        SUBTRACT. An error on any resource is a SafetyRefusal naming it."""
        from kafka.admin import ConfigResource, ConfigResourceType

        changes = {k: v for k, v in changes.items() if v}
        if not changes:
            return
        if not self._write(f"IncrementalAlterConfigs {len(changes)} resources ({what}): " + "; ".join(
                f"{kind} {name}: " + ", ".join(f"{op} {key}" + (f"={val}" if val is not None else "")
                                              for key, (op, val) in sorted(cfg.items()))
                for (kind, name), cfg in sorted(changes.items()))):
            return
        res = [ConfigResource(ConfigResourceType.TOPIC if kind == "topic" else ConfigResourceType.BROKER, name,
                              configs={key: (op, val) for key, (op, val) in cfg.items()})
               for (kind, name), cfg in sorted(changes.items())]
        try:
            out = self.admin.alter_configs(res, raise_on_unknown=False, incremental=True)
        except Exception as e:  # noqa: BLE001 - a broker that does not answer: retryable, named
            raise KafkaUnavailable(f"IncrementalAlterConfigs ({what}) failed: {type(e).__name__}") from None
        bad = {f"{kind} {name}": r for kind, names in out.items() for name, r in names.items() if r != "OK"}
        if bad:
            raise SafetyRefusal(f"the brokers refused the throttle configs ({what}): "
                                + "; ".join(f"{k}: {v}" for k, v in list(bad.items())[:10]))
