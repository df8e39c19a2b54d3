"""The cluster description file (docs/DESIGN.md): validation and normalisation.

Tests, benchmarks, the demo and `kplan sandbox up --cluster` all describe a cluster this way:

    {"brokers": [{"id": 1, "rack": "r1"}],
     "topics": [{"name": "t", "config": {"min.insync.replicas": "2"},
                 "partitions": [{"replicas": [1, 2, 3], "leader": 1, "isr": [1, 2, 3], "size_bytes": 123}]}]}

`leader`, `isr` and `size_bytes` are optional (default: leader = replicas[0], isr = replicas). Extensions,
all optional, for the states a real cluster can be in:
- broker: `"alive": false` (named in assignments but not registered), `"host"`, `"port"`, `"config"`
  (dynamic broker overrides), `"disk_bytes"` (the emulated engine's log-dir volume size, which its
  DescribeLogDirs reports as TotalBytes; UsableBytes = that minus the bytes of the replicas it holds);
- top level: `"broker_defaults"` (`/config/brokers/<default>`), `"controller": {"id": 1, "epoch": 5}`,
  `"reassignment"`: in-flight `/admin/reassign_partitions` entries `[{"topic","partition","replicas"}]`,
  `"preferred_election"`: pending `[{"topic","partition"}]`;
- topic: `"topic_id"`, `"deleting": true` (queued in /admin/delete_topics), `"version"` (1, 2 or 3);
- partition: `"leader_epoch"`, `"no_state": true` (a new partition with no state znode yet),
  `"adding_replicas"` / `"removing_replicas"` (mid-reassignment), `"leader_recovery_state": 1`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner import codec
from planner.errors import BadInput
from planner.text import show


@dataclass
class Broker:
    id: int
    rack: str | None = None
    alive: bool = True
    host: str | None = None
    port: int = 9092
    config: dict[str, str] = field(default_factory=dict)
    disk_bytes: int | None = None    # the emulated engine's log-dir volume (TotalBytes), default DEFAULT_DISK


@dataclass
class Partition:
    replicas: list[int]
    leader: int
    isr: list[int]
    size_bytes: int | None = None
    leader_epoch: int = 0
    has_state: bool = True
    adding: list[int] = field(default_factory=list)
    removing: list[int] = field(default_factory=list)
    leader_recovery_state: int = 0


@dataclass
class Topic:
    name: str
    partitions: list[Partition]
    config: dict[str, str] = field(default_factory=dict)
    topic_id: str | None = None
    deleting: bool = False
    version: int = 3


@dataclass
class Cluster:
    brokers: list[Broker]
    topics: list[Topic]
    broker_defaults: dict[str, str] = field(default_factory=dict)
    controller_id: int | None = None
    controller_epoch: int = 1
    reassignment: list[codec.ReassignEntry] = field(default_factory=list)
    preferred_election: list[tuple[str, int]] = field(default_factory=list)

    @property
    def num_partitions(self) -> int:
        return sum(len(t.partitions) for t in self.topics)


def _where(*parts: Any) -> str:
    return "cluster description: " + "".join(str(p) for p in parts)


def _config(obj: Any, where: str) -> dict[str, str]:
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise BadInput(f"{where}: config must be an object of name -> value")
    out = {}
    for k, v in obj.items():
        if isinstance(v, bool):
            v = "true" if v else "false"
        if not isinstance(v, (str, int, float)):
            raise BadInput(f"{where}: config {k!r} must be a string, got {show(v)}")
        out[str(k)] = str(v)
    return out


def _int_list(value: Any, where: str, allow_empty: bool = False) -> list[int]:
    if not isinstance(value, list) or any(isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in value):
        raise BadInput(f"{where} must be a list of broker ids (non-negative integers), got {show(value)}")
    if not value and not allow_empty:
        raise BadInput(f"{where} must not be empty")
    if len(set(value)) != len(value):
        raise BadInput(f"{where} lists a broker twice: {value}")
    return list(value)


def parse_cluster(desc: dict[str, Any]) -> Cluster:
    """Validate a description and return the normalised cluster, or raise BadInput naming the problem."""
    if not isinstance(desc, dict):
        raise BadInput("cluster description must be a JSON object with 'brokers' and 'topics'")
    raw_brokers = desc.get("brokers")
    if not isinstance(raw_brokers, list) or not raw_brokers:
        raise BadInput(_where("'brokers' must be a non-empty list"))
    brokers: list[Broker] = []
    seen: set[int] = set()
    for i, b in enumerate(raw_brokers):
        w = _where(f"brokers[{i}]")
        if not isinstance(b, dict) or isinstance(b.get("id"), bool) or not isinstance(b.get("id"), int):
            raise BadInput(f"{w} needs an integer 'id'")
        bid = b["id"]
        if bid < 0 or bid in seen:
            raise BadInput(f"{w}: broker id {bid} is negative or duplicated")
        seen.add(bid)
        rack = b.get("rack")
        if rack is not None and (not isinstance(rack, str) or not rack):
            raise BadInput(f"{w}: rack must be a non-empty string")
        disk = b.get("disk_bytes")
        if disk is not None and (isinstance(disk, bool) or not isinstance(disk, int) or disk <= 0):
            raise BadInput(f"{w}: disk_bytes must be a positive integer")
        brokers.append(Broker(bid, rack, bool(b.get("alive", True)), b.get("host"), int(b.get("port", 9092)),
                              _config(b.get("config"), w), disk))
    raw_topics = desc.get("topics", [])
    if not isinstance(raw_topics, list):
        raise BadInput(_where("'topics' must be a list"))
    topics: list[Topic] = []
    names: set[str] = set()
    for ti, t in enumerate(raw_topics):
        w = _where(f"topics[{ti}]")
        if not isinstance(t, dict):
            raise BadInput(f"{w} must be an object")
        name = t.get("name")
        if not isinstance(name, str) or not codec.is_valid_topic_name(name):
            raise BadInput(f"{w}: {name!r} is not a legal Kafka topic name ([a-zA-Z0-9._-], 1-249 chars)")
        if name in names:
            raise BadInput(f"{w}: topic {name!r} is listed twice")
        names.add(name)
        raw_parts = t.get("partitions")
        if not isinstance(raw_parts, list) or not raw_parts:
            raise BadInput(f"{w} ({name}): 'partitions' must be a non-empty list")
        parts = []
        for pi, p in enumerate(raw_parts):
            pw = f"{w} ({name}-{pi})"
            if not isinstance(p, dict):
                raise BadInput(f"{pw} must be an object")
            reps = _int_list(p.get("replicas"), f"{pw}.replicas")
            has_state = not p.get("no_state", False)
            leader = p.get("leader", reps[0] if has_state else -1)
            if isinstance(leader, bool) or not isinstance(leader, int) or (leader != -1 and leader not in reps):
                raise BadInput(f"{pw}: leader {show(leader)} must be -1 or one of the replicas {reps}")
            isr = _int_list(p.get("isr", list(reps) if has_state else []), f"{pw}.isr", allow_empty=not has_state)
            if not set(isr) <= set(reps):
                raise BadInput(f"{pw}: isr {isr} holds brokers that are not replicas {reps}")
            if leader >= 0 and leader not in isr:
                raise BadInput(f"{pw}: leader {leader} is not in the isr {isr}")
            size = p.get("size_bytes")
            if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
                raise BadInput(f"{pw}: size_bytes must be a non-negative integer")
            adding = _int_list(p.get("adding_replicas", []), f"{pw}.adding_replicas", allow_empty=True)
            removing = _int_list(p.get("removing_replicas", []), f"{pw}.removing_replicas", allow_empty=True)
            if not (set(adding) | set(removing)) <= set(reps):
                raise BadInput(f"{pw}: adding/removing replicas must be part of the replica list {reps}")
            parts.append(Partition(reps, leader, isr, size, int(p.get("leader_epoch", 0)), has_state,
                                   adding, removing, int(p.get("leader_recovery_state", 0))))
        version = int(t.get("version", 3))
        if version not in (1, 2, 3):
            raise BadInput(f"{w}: topic znode version must be 1, 2 or 3")
        topics.append(Topic(name, parts, _config(t.get("config"), w), t.get("topic_id"),
                            bool(t.get("deleting", False)), version))
    ctrl = desc.get("controller") or {}
    alive = [b.id for b in brokers if b.alive]
    controller_id = ctrl.get("id", alive[0] if alive else None)
    reassignment = []
    if desc.get("reassignment"):
        reassignment = codec.decode_reassignment(
            codec.dumps({"version": 1, "partitions": desc["reassignment"]}), "cluster description: reassignment"
        )
    preferred = [(e["topic"], int(e["partition"])) for e in desc.get("preferred_election", [])]
    return Cluster(brokers, topics, _config(desc.get("broker_defaults"), _where("broker_defaults")),
                   controller_id, int(ctrl.get("epoch", 1)), reassignment, preferred)


def load_description(path: Path | str) -> Cluster:
    path = Path(path)
    try:
        desc = json.loads(path.read_text())
    except FileNotFoundError:
        raise BadInput(f"cluster description {path} does not exist") from None
    except json.JSONDecodeError as e:
        raise BadInput(f"cluster description {path} is not valid JSON: {e}") from None
    return parse_cluster(desc)


def log_dirs_json(cluster: Cluster, log_dir: str = "/var/lib/kafka/data") -> dict[str, Any]:
    """Partition sizes in the output format of `kafka-log-dirs.sh --describe` (one entry per replica), the
    file `kplan snapshot --sizes` reads, since ZooKeeper itself does not know partition sizes."""
    per_broker: dict[int, list[dict[str, Any]]] = {b.id: [] for b in cluster.brokers}
    for t in cluster.topics:
        for pi, p in enumerate(t.partitions):
            if p.size_bytes is None:
                continue
            for r in p.replicas:
                per_broker.setdefault(r, []).append(
                    {"partition": f"{t.name}-{pi}", "size": p.size_bytes, "offsetLag": 0, "isFuture": False}
                )
    return {
        "version": 1,
        "brokers": [
            {"broker": b, "logDirs": [{"logDir": log_dir, "error": None, "partitions": parts}]}
            for b, parts in sorted(per_broker.items())
        ],
    }
