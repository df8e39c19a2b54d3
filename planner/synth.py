"""Synthetic clusters for tests, benchmarks and the demo, built from numpy arrays (no per-partition objects).

`synth_cluster` makes the arrays; `to_snapshot` writes them as a snapshot folder directly (so million-
partition benchmarks of the risk job and the optimizer do not need to load ZooKeeper first);
`to_description` turns them into the cluster description format of docs/DESIGN.md, which the loader and the
sandbox take.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from planner import snapshot_io as sio


@dataclass
class SynthCluster:
    broker_ids: np.ndarray          # int32 (B,)
    racks: list[str | None]         # per broker
    topic_names: list[str]          # (T,)
    topic_of: np.ndarray            # int32 (P,) index into topic_names
    partition: np.ndarray           # int32 (P,)
    replicas: np.ndarray            # int32 (P, R) padded with -1
    leader: np.ndarray              # int32 (P,)
    isr: np.ndarray                 # int32 (P, R) padded with -1
    size_bytes: np.ndarray | None   # int64 (P,)
    topic_min_isr: np.ndarray       # int32 (T,)
    topic_unclean: np.ndarray       # bool (T,)
    alive: np.ndarray = field(default=None)  # bool (B,)
    capacity_bytes: np.ndarray | None = None   # int64 (B,) log dirs' TotalBytes summed, -1 unknown
    disk_used_bytes: np.ndarray | None = None  # int64 (B,) TotalBytes - UsableBytes, -1 unknown

    def __post_init__(self) -> None:
        if self.alive is None:
            self.alive = np.ones(len(self.broker_ids), dtype=bool)

    @property
    def num_partitions(self) -> int:
        return len(self.partition)


def synth_cluster(
    brokers: int = 6,
    partitions: int = 300,
    rf: int | list[int] = 3,
    racks: int = 3,
    partitions_per_topic: int = 50,
    seed: int = 0,
    empty_brokers: int = 0,
    shrunk_isr_fraction: float = 0.0,
    moved_leader_fraction: float = 0.0,
    sizes: bool = True,
    min_isr: int = 2,
    rack_aware: bool = False,
) -> SynthCluster:
    """A random cluster. `rf` may be a list to mix replication factors across topics.

    Replica lists are distinct brokers drawn by random strides, so every partition is valid; the last
    `empty_brokers` brokers hold nothing (new brokers for a rebalance). `rack_aware`: the replicas of a
    partition go to successive racks from a random first one (distinct racks while RF <= racks), a random
    broker within each rack, as Kafka's rack-aware assignment spreads them.
    """
    rng = np.random.default_rng(seed)
    b_ids = np.arange(1, brokers + 1, dtype=np.int32)
    rack_names = [f"r{(i % racks) + 1}" if racks else None for i in range(brokers)]
    n_topics = max(1, -(-partitions // partitions_per_topic))
    topic_names = [f"topic-{i:05d}" for i in range(n_topics)]
    topic_of = np.minimum(np.arange(partitions) // partitions_per_topic, n_topics - 1).astype(np.int32)
    starts = np.searchsorted(topic_of, np.arange(n_topics))
    part = (np.arange(partitions) - starts[topic_of]).astype(np.int32)

    rfs = np.asarray(rf if isinstance(rf, list) else [rf])
    topic_rf = rfs[rng.integers(0, len(rfs), n_topics)] if len(rfs) > 1 else np.full(n_topics, rfs[0])
    usable = brokers - empty_brokers
    if usable < int(topic_rf.max()):
        raise ValueError(f"rf {int(topic_rf.max())} needs at least that many non-empty brokers, got {usable}")
    width = int(topic_rf.max())
    p_rf = topic_rf[topic_of]
    first = rng.integers(0, usable, partitions)
    max_step = max(1, (usable - 1) // max(1, width - 1))
    steps = rng.integers(1, max_step + 1, (partitions, max(0, width - 1)))
    offs = np.concatenate([np.zeros((partitions, 1), dtype=np.int64), np.cumsum(steps, axis=1)], axis=1)
    idx = (first[:, None] + offs) % usable
    if rack_aware and racks:
        idx = _rack_aware_indexes(rng, usable, racks, partitions, width)
    reps = b_ids[idx].astype(np.int32)
    reps[np.arange(width)[None, :] >= p_rf[:, None]] = -1

    isr = reps.copy()
    if shrunk_isr_fraction:
        shrink = (rng.random(partitions) < shrunk_isr_fraction) & (p_rf > 1)
        last = p_rf - 1
        isr[np.where(shrink)[0], last[shrink]] = -1
    leader = reps[:, 0].copy()
    if moved_leader_fraction and width > 1:  # with width 1 no partition has a second replica
        move = (rng.random(partitions) < moved_leader_fraction) & (p_rf > 1) & (isr[:, 1] >= 0)
        leader[move] = isr[move, 1]
    size = rng.lognormal(20, 1.5, partitions).astype(np.int64) if sizes else None
    t_min = np.where(topic_rf >= 3, min_isr, 1).astype(np.int32)
    return SynthCluster(b_ids, rack_names, topic_names, topic_of, part, reps, leader, isr, size, t_min,
                        np.zeros(n_topics, dtype=bool))


def _rack_aware_indexes(rng: np.random.Generator, usable: int, racks: int, partitions: int,
                        width: int) -> np.ndarray:
    """Broker indexes (broker i is on rack i % racks) for `width` replicas per partition: replica j on rack
    (r0 + j) % racks from a random r0; within a rack a random start, the next member each time the rack comes
    round again (RF > racks), so a partition never holds a broker twice."""
    rack_of = np.arange(usable) % racks
    members = [np.flatnonzero(rack_of == r) for r in range(racks)]
    if min(len(m) for m in members) * racks < width:
        raise ValueError(f"rf {width} needs more brokers per rack")
    r0 = rng.integers(0, racks, partitions)
    start = np.stack([rng.integers(0, len(m), partitions) for m in members], axis=1)
    idx = np.empty((partitions, width), dtype=np.int64)
    for j in range(width):
        rack = (r0 + j) % racks
        turn = j // racks
        for r, m in enumerate(members):
            hit = rack == r
            idx[hit, j] = m[(start[hit, r] + turn) % len(m)]
    return idx


def _nullable(values: np.ndarray | None, n: int) -> pa.Array:
    if values is None:
        return pa.nulls(n, pa.int64())
    v = np.asarray(values, dtype=np.int64)
    return pa.array(v, pa.int64(), mask=v < 0)


def to_snapshot(c: SynthCluster, out: Path | str, source: str = "synth") -> Path:
    """Write the cluster as a snapshot folder (docs/SNAPSHOT.md), as if `kplan snapshot` had read it."""
    started = time.time()
    n = c.num_partitions
    topic_dict = pa.DictionaryArray.from_arrays(pa.array(c.topic_of, pa.int32()), pa.array(c.topic_names))
    empty = pa.array([[]] * n, type=sio.INT_LIST) if n else pa.array([], type=sio.INT_LIST)
    replicas = sio.matrix_to_list(c.replicas)
    parts = pa.table(
        {
            "topic": topic_dict,
            "partition": pa.array(c.partition, pa.int32()),
            "replicas": replicas,
            "adding_replicas": empty,
            "removing_replicas": empty,
            "target_replicas": pa.nulls(n, sio.INT_LIST),
            "has_state": pa.array(np.ones(n, dtype=bool)),
            "leader": pa.array(c.leader, pa.int32()),
            "leader_epoch": pa.array(np.zeros(n, dtype=np.int32)),
            "isr": sio.matrix_to_list(c.isr),
            "controller_epoch": pa.array(np.ones(n, dtype=np.int32)),
            "leader_recovery_state": pa.array(np.zeros(n, dtype=np.int8)),
            "state_version": pa.array(np.zeros(n, dtype=np.int32)),
            "size_bytes": pa.array(c.size_bytes, pa.int64()) if c.size_bytes is not None else pa.nulls(n, pa.int64()),
        }
    )
    counts_per_topic = np.bincount(c.topic_of, minlength=len(c.topic_names)).astype(np.int32)
    rf_per_topic = np.zeros(len(c.topic_names), dtype=np.int32)
    np.maximum.at(rf_per_topic, c.topic_of, (c.replicas >= 0).sum(axis=1).astype(np.int32))
    topics = pa.table(
        {
            "topic": pa.array(c.topic_names),
            "topic_id": pa.nulls(len(c.topic_names), pa.string()),
            "znode_version": pa.array(np.full(len(c.topic_names), 3, dtype=np.int8)),
            "partitions": pa.array(counts_per_topic),
            "replication_factor": pa.array(rf_per_topic),
            "min_insync_replicas": pa.array(c.topic_min_isr, pa.int32()),
            "unclean_leader_election": pa.array(c.topic_unclean),
            "config": pa.array([
                f'{{"min.insync.replicas":"{m}"}}' for m in c.topic_min_isr.tolist()
            ]),
            "leader_throttled_replicas": pa.nulls(len(c.topic_names), pa.string()),
            "follower_throttled_replicas": pa.nulls(len(c.topic_names), pa.string()),
            "queued_for_deletion": pa.array(np.zeros(len(c.topic_names), dtype=bool)),
        }
    )
    nb = len(c.broker_ids)
    brokers = pa.table(
        {
            "broker": pa.array(c.broker_ids, pa.int32()),
            "alive": pa.array(c.alive),
            "rack": pa.array(c.racks, pa.string()),
            "host": pa.array([f"broker-{b}" for b in c.broker_ids.tolist()]),
            "port": pa.array(np.full(nb, 9092, dtype=np.int32)),
            "endpoints": pa.array([[f"PLAINTEXT://broker-{b}:9092"] for b in c.broker_ids.tolist()]),
            "epoch": pa.array(np.arange(nb, dtype=np.int64) + 100),
            "registration_version": pa.array(np.full(nb, 5, dtype=np.int8)),
            "is_controller": pa.array(np.arange(nb) == 0),
            "config": pa.array(["{}"] * nb),
            "leader_throttle_rate": pa.nulls(nb, pa.int64()),
            "follower_throttle_rate": pa.nulls(nb, pa.int64()),
            "capacity_bytes": _nullable(c.capacity_bytes, nb),
            "disk_used_bytes": _nullable(c.disk_used_bytes, nb),
        }
    )
    fp = sio.assignment_fingerprint(topic_dict, c.partition, replicas)
    valid = c.replicas >= 0
    isr_len = (c.isr >= 0).sum(axis=1)
    manifest = {
        "source": {"zk": source, "chroot": None},
        "taken_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "duration_s": round(time.time() - started, 3),
        "zxid": {"min": 0, "max": 0},
        "controller": {"broker": int(c.broker_ids[0]), "epoch": 1, "kraft_controller_epoch": -1},
        "counts": {
            "brokers": nb,
            "alive_brokers": int(c.alive.sum()),
            "topics": len(c.topic_names),
            "partitions": n,
            "replicas": int(valid.sum()),
            "offline": int((c.leader < 0).sum()),
            "under_replicated": int((isr_len < valid.sum(axis=1)).sum()),
            "leaderless_new": 0,
        },
        "fingerprint": fp,
        "broker_defaults": {},
        "reassignment_in_flight": [],
        "preferred_election_pending": [],
        "topics_queued_for_deletion": [],
        "consistency": {"rereads": 0, "rounds": 0},
        "warnings": [],
    }
    return sio.write_snapshot(out, manifest, brokers, topics, parts)


def to_description(c: SynthCluster) -> dict[str, Any]:
    """The cluster description format of docs/DESIGN.md (what the loader and `kplan sandbox up --cluster` take)."""
    brokers = [{"id": int(b), "rack": r} if r is not None else {"id": int(b)}
               for b, r in zip(c.broker_ids.tolist(), c.racks, strict=True)]
    reps = c.replicas.tolist()
    isr = c.isr.tolist()
    lead = c.leader.tolist()
    size = c.size_bytes.tolist() if c.size_bytes is not None else None
    order = np.argsort(c.topic_of, kind="stable")
    topics: list[dict[str, Any]] = [
        {"name": name, "config": {"min.insync.replicas": str(int(m))}, "partitions": []}
        for name, m in zip(c.topic_names, c.topic_min_isr.tolist(), strict=True)
    ]
    for i in order.tolist():
        p: dict[str, Any] = {
            "replicas": [x for x in reps[i] if x >= 0],
            "leader": lead[i],
            "isr": [x for x in isr[i] if x >= 0],
        }
        if size is not None:
            p["size_bytes"] = size[i]
        topics[c.topic_of[i]]["partitions"].append(p)
    return {"brokers": brokers, "topics": topics}
