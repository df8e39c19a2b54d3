"""Pure assembly of a snapshot: the records read from ZooKeeper in, the three tables and the manifest out.

No I/O and no mutable reader state: `assemble` takes a `ClusterRead` (frozen records from
planner.snapshot_reader) and returns the tables docs/SNAPSHOT.md describes, so it can be tested and reasoned
about without a ZooKeeper. Topic settings resolve through planner.kafka_config (the one rule).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from planner import codec, zkcolumns
from planner import kafka_config as kc
from planner import snapshot_io as sio
from planner.maintenance import Entry, manifest_section
from planner.snapshot_reader import (
    AdminRecord,
    BrokerRecord,
    ControllerRecord,
    PartitionBlock,
    Problems,
    TopicRecord,
)


@dataclass(frozen=True)
class Consistency:
    rounds: int = 0
    rereads: int = 0
    consistent: bool = True
    mode: str = ""
    zxid_min: int = 0
    zxid_max: int = 0


@dataclass(frozen=True, eq=False)
class ClusterRead:
    """Everything a snapshot read, as of the last consistency round."""

    controller: ControllerRecord
    brokers: tuple[BrokerRecord, ...]
    broker_configs: Mapping[str, Mapping[str, str]]
    admin: AdminRecord
    topics: Mapping[str, TopicRecord]
    consistency: Consistency = field(default_factory=Consistency)
    maintenance: Mapping[int, Entry] = field(default_factory=dict)   # planner/maintenance.py, by broker id


@dataclass(frozen=True, eq=False)
class Assembled:
    brokers: pa.Table
    topics: pa.Table
    partitions: pa.Table
    warnings: tuple[dict[str, str], ...]        # found while assembling (lenient mode)


def _compact(config: Mapping[str, str]) -> str:
    return json.dumps(dict(config), separators=(",", ":"), sort_keys=True)


def assemble(read: ClusterRead, lenient: bool) -> Assembled:
    """Build the three tables from what was read. Strict mode raises CodecError on a bad setting."""
    found = Problems(lenient)   # bad settings: an error, or (lenient) a warning
    extra: list[dict[str, str]] = []   # facts about the read that are always listed

    defaults_cfg = read.broker_configs.get(codec.DEFAULT_BROKER_ENTITY, {})
    defaults = found.decode("settings", kc.broker_default_settings, defaults_cfg,
                            codec.broker_config_path(codec.DEFAULT_BROKER_ENTITY),
                            default=kc.TopicSettings(kc.DEFAULT_MIN_ISR, kc.DEFAULT_UNCLEAN),
                            note=" (Kafka's built-in default used)")

    # Topic settings; a malformed topic config skips the topic (its risk cannot be judged).
    kept: list[str] = []
    settings: list[kc.TopicSettings] = []
    for n in sorted(read.topics):
        got = found.decode("settings", kc.topic_settings, read.topics[n].config, defaults,
                           codec.topic_config_path(n))
        if got is None:
            continue
        settings.append(got)
        kept.append(n)
    rank = {n: i for i, n in enumerate(kept)}

    # Partitions: the rows of each topic's current block, in (topic, partition) order.
    blocks: list[PartitionBlock] = []
    for rec in read.topics.values():
        if not any(rec.block is b for b in blocks):
            blocks.append(rec.block)
    pieces = []
    for b in blocks:
        owned = np.array([rank.get(n, -1) if n in read.topics and read.topics[n].block is b else -1
                          for n in b.names], dtype=np.int32)
        if not (owned >= 0).any():
            continue
        local = b.table.column("_t").to_numpy()
        g = owned[local] if len(local) else np.zeros(0, np.int32)
        t = b.table.drop_columns(["_t"]).append_column("_g", pa.array(g, pa.int32()))
        pieces.append(t.filter(pa.array(g >= 0)))
    if pieces:
        parts = pa.concat_tables(pieces).combine_chunks()
    else:
        empty = {f.name: pa.array([], f.type) for f in sio.SCHEMAS["partitions"]
                 if f.name not in ("topic", "target_replicas", "size_bytes", "replica_sizes", "elr", "last_known_elr")}
        parts = pa.table({**empty, "_g": pa.array([], pa.int32())})
    for col in ("elr", "last_known_elr"):     # read by the KRaft backend only; null (unknown) from ZooKeeper
        if col not in parts.column_names:
            parts = parts.append_column(col, pa.nulls(parts.num_rows, sio.INT_LIST))
    g = parts.column("_g").to_numpy()
    p = parts.column("partition").to_numpy()
    order = np.lexsort((p, g))
    if not np.array_equal(order, np.arange(len(order))):
        parts = parts.take(pa.array(order))
        g, p = g[order], p[order]
    n_rows = parts.num_rows

    # In-flight reassignment targets.
    key = g.astype(np.int64) * 2**32 + p
    tgt_rows: dict[int, tuple[int, ...]] = {}
    for e in read.admin.reassignment:
        t = rank.get(e.topic)
        i = int(np.searchsorted(key, t * 2**32 + e.partition)) if t is not None else n_rows
        if i < n_rows and key[i] == t * 2**32 + e.partition:
            tgt_rows[i] = e.replicas
        else:
            extra.append({"path": codec.REASSIGN,
                          "problem": f"names {e.topic}-{e.partition}, which is not in the snapshot"})
    tgt_len = np.zeros(n_rows, dtype=np.int32)
    for i, r in tgt_rows.items():
        tgt_len[i] = len(r)
    target = zkcolumns.list_array(tgt_len, np.array([b for i in sorted(tgt_rows) for b in tgt_rows[i]], np.int32))
    if n_rows:
        valid = np.zeros(n_rows, dtype=bool)
        valid[list(tgt_rows)] = True
        target = pa.ListArray.from_arrays(target.offsets, target.values, mask=pa.array(~valid))
    topic_col = pa.DictionaryArray.from_arrays(pa.array(g, pa.int32()), pa.array(kept, pa.string()))
    partitions = (parts.drop_columns(["_g"])
                  .append_column("topic", topic_col)
                  .append_column("target_replicas", target)
                  .append_column("size_bytes", pa.nulls(n_rows, pa.int64()))
                  .append_column("replica_sizes", pa.nulls(n_rows, pa.list_(pa.int64()))))
    partitions = partitions.select(sio.SCHEMAS["partitions"].names).cast(sio.SCHEMAS["partitions"])

    # Topics table.
    counts = np.bincount(g, minlength=len(kept)).astype(np.int32)
    rep_len = pc.list_value_length(partitions.column("replicas")).to_numpy(zero_copy_only=False)
    add_len = pc.list_value_length(partitions.column("adding_replicas")).to_numpy(zero_copy_only=False)
    rf = np.zeros(len(kept), dtype=np.int32)
    if n_rows:
        np.maximum.at(rf, g, (rep_len - add_len).astype(np.int32))
    deleting = set(read.admin.deleting)
    metas = [read.topics[n] for n in kept]
    topics = pa.table({
        "topic": pa.array(kept, pa.string()),
        "topic_id": pa.array([m.topic_id for m in metas], pa.string()),
        "znode_version": pa.array([m.version for m in metas], pa.int8()),
        "partitions": pa.array(counts),
        "replication_factor": pa.array(rf),
        "min_insync_replicas": pa.array([s.min_insync_replicas for s in settings], pa.int32()),
        "unclean_leader_election": pa.array([s.unclean_leader_election for s in settings], pa.bool_()),
        "config": pa.array([_compact(m.config) for m in metas], pa.string()),
        "leader_throttled_replicas": pa.array([m.config.get(kc.LEADER_THROTTLED_REPLICAS) for m in metas],
                                              pa.string()),
        "follower_throttled_replicas": pa.array([m.config.get(kc.FOLLOWER_THROTTLED_REPLICAS) for m in metas],
                                                pa.string()),
        "queued_for_deletion": pa.array([n in deleting for n in kept], pa.bool_()),
    }, schema=sio.TOPICS_SCHEMA)

    # Brokers: registered ones plus every id named by an assignment, ISR, leader or reassignment target.
    registered = {b.id: b for b in read.brokers}
    named = [partitions.column(c).combine_chunks().flatten().to_numpy(zero_copy_only=False)
             for c in ("replicas", "adding_replicas", "removing_replicas", "isr")]
    named.append(partitions.column("leader").to_numpy())
    named.append(np.array([b for e in read.admin.reassignment for b in e.replicas], dtype=np.int64))
    ids = np.unique(np.concatenate([x.astype(np.int64) for x in named] + [np.array(list(registered), np.int64)]))
    ids = ids[ids >= 0]
    ctrl_id = read.controller.broker
    rows_b: dict[str, list] = {k: [] for k in sio.SCHEMAS["brokers"].names}
    for b in ids.tolist():
        rec = registered.get(b)
        reg = rec.registration if rec else None
        config = read.broker_configs.get(str(b), {})
        where = codec.broker_config_path(b)
        rates = [found.decode("settings", kc.long_config, config, k, where)
                 for k in (kc.LEADER_THROTTLE_RATE, kc.FOLLOWER_THROTTLE_RATE)]
        rows_b["broker"].append(b)
        rows_b["alive"].append(rec is not None and not rec.fenced)
        rows_b["fenced"].append(rec.fenced if rec else None)
        rows_b["in_controlled_shutdown"].append(rec.in_controlled_shutdown if rec else None)
        rows_b["rack"].append(reg.rack if reg else None)
        rows_b["host"].append(reg.host if reg else None)
        rows_b["port"].append(reg.port if reg else -1)
        rows_b["endpoints"].append(list(reg.endpoints) if reg else [])
        rows_b["epoch"].append(rec.czxid if rec else -1)
        rows_b["registration_version"].append(reg.version if reg else -1)
        rows_b["is_controller"].append(b == ctrl_id)
        rows_b["config"].append(_compact(config))
        rows_b["leader_throttle_rate"].append(rates[0])
        rows_b["follower_throttle_rate"].append(rates[1])
        for col in ("capacity_bytes", "disk_used_bytes", "log_dirs", "log_dir_errors"):
            rows_b[col].append(None)        # filled from DescribeLogDirs (planner.logdirs.merge_log_dirs)
        m = read.maintenance.get(b)
        rows_b["maintenance"].append(m.state if m else None)
    brokers = pa.table(rows_b, schema=sio.SCHEMAS["brokers"])
    return Assembled(brokers, topics, partitions, tuple(found.all() + extra))


@dataclass(frozen=True)
class Health:
    """The cluster as it is, counted the way Kafka's controller would see it: a partition whose leader is
    not registered is offline, and ISR members that are not registered do not count as in sync."""

    offline: np.ndarray            # bool (P,)
    under_replicated: np.ndarray   # bool (P,), online partitions only (as Kafka's URP metric)
    unknown: np.ndarray            # bool (P,), state unknown (lenient snapshots)
    warnings: tuple[dict[str, str], ...]


def health(read: ClusterRead, tables: Assembled) -> Health:
    partitions, brokers = tables.partitions, tables.brokers
    n = partitions.num_rows
    has_state = partitions.column("has_state").to_numpy(zero_copy_only=False)
    unknown = partitions.column("state_error").is_valid().to_numpy(zero_copy_only=False) if n else \
        np.zeros(0, dtype=bool)
    leader = partitions.column("leader").to_numpy()
    alive_ids = brokers.filter(brokers.column("alive")).column("broker").to_numpy()
    all_ids = brokers.column("broker").to_numpy()
    lut = np.zeros(int(all_ids.max(initial=0)) + 2, dtype=bool)   # broker id -> registered
    lut[alive_ids] = True

    def registered(ids: np.ndarray) -> np.ndarray:
        ids = ids.astype(np.int64, copy=False)
        return (ids >= 0) & (ids < len(lut)) & lut[np.clip(ids, 0, len(lut) - 1)]

    rep_len = pc.list_value_length(partitions.column("replicas")).to_numpy(zero_copy_only=False)
    add_len = pc.list_value_length(partitions.column("adding_replicas")).to_numpy(zero_copy_only=False)
    isr = partitions.column("isr").combine_chunks()
    live_isr = np.zeros(n, dtype=np.int64)
    if len(isr.values):
        parent = pc.list_parent_indices(isr).to_numpy()
        member_alive = registered(isr.values.to_numpy(zero_copy_only=False))
        live_isr = np.bincount(parent[member_alive], minlength=n)
    reps = partitions.column("replicas").combine_chunks()
    on_dead = np.zeros(n, dtype=bool)
    if len(reps.values):
        dead_member = ~registered(reps.values.to_numpy(zero_copy_only=False))
        on_dead[pc.list_parent_indices(reps).to_numpy()[dead_member]] = True
    known = has_state & ~unknown
    leader_alive = registered(leader)
    offline = known & ~leader_alive
    under = known & leader_alive & (live_isr < rep_len - add_len)
    warnings: list[dict[str, str]] = []
    if len(alive_ids) == 0:
        warnings.append({"path": codec.BROKER_IDS, "problem": "no broker is registered: every partition with a "
                                                               "leader is offline"})
    ctrl = read.controller.broker
    if ctrl < 0:
        warnings.append({"path": codec.CONTROLLER, "problem": "no controller is registered: no leader is elected "
                                                              "and no reassignment progresses until one is"})
    elif read.controller.kraft:
        pass          # a KRaft controller is a quorum node, not one of the brokers
    elif ctrl not in set(alive_ids.tolist()):
        warnings.append({"path": codec.CONTROLLER, "problem": f"the controller, broker {ctrl}, is not registered "
                                                              "in /brokers/ids"})
    gone = "not registered or fenced" if read.controller.kraft else "not registered"
    gone_leader = known & (leader >= 0) & ~leader_alive
    if gone_leader.any():
        warnings.append({"path": codec.TOPICS, "problem": f"{_count(int(gone_leader.sum()), 'partition')} led by "
                         f"brokers that are {gone}: offline now"})
    if on_dead.any():
        dead = sorted(set(reps.values.to_numpy(zero_copy_only=False)[dead_member].tolist()))
        shown = ", ".join(map(str, dead[:10])) + (" ..." if len(dead) > 10 else "")
        warnings.append({"path": codec.TOPICS, "problem": f"{_count(int(on_dead.sum()), 'partition')} "
                         f"{'has' if on_dead.sum() == 1 else 'have'} replicas on brokers that are {gone} "
                         f"({shown})"})
    if unknown.any():
        warnings.append({"path": codec.TOPICS, "problem": f"{_count(int(unknown.sum()), 'partition')} with an "
                         "unknown state (see the warnings above): plans leave them alone, risk does not score "
                         "them"})
    return Health(offline, under, unknown, tuple(warnings))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def manifest(read: ClusterRead, source: Mapping[str, Any], tables: Assembled, state: Health,
             warnings: list[dict[str, str]], started_wall: float, duration: float,
             with_sizes: bool) -> dict[str, Any]:
    """manifest.json (docs/SNAPSHOT.md) from the assembled tables and the consistency figures."""
    partitions, brokers = tables.partitions, tables.brokers
    has_state = partitions.column("has_state").to_numpy(zero_copy_only=False)
    rep_len = pc.list_value_length(partitions.column("replicas")).to_numpy(zero_copy_only=False)
    alive = brokers.column("alive").to_numpy(zero_copy_only=False)
    fp = sio.assignment_fingerprint(partitions.column("topic"), partitions.column("partition").to_numpy(),
                                    partitions.column("replicas"))
    c = read.consistency
    return {
        "source": dict(source),          # the ClusterReader's: never credentials
        "taken_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started_wall)),
        "duration_s": round(duration, 3),
        "zxid": {"min": c.zxid_min, "max": c.zxid_max} if not read.controller.kraft else None,
        "controller": read.controller.as_manifest(),
        "counts": {
            "brokers": brokers.num_rows,
            "alive_brokers": int(alive.sum()),
            "topics": tables.topics.num_rows,
            "partitions": partitions.num_rows,
            "replicas": int(rep_len.sum()),
            "offline": int(state.offline.sum()),
            "under_replicated": int(state.under_replicated.sum()),
            "leaderless_new": int((~has_state).sum()),
            "state_unknown": int(state.unknown.sum()),
        },
        "fingerprint": fp,
        "broker_defaults": dict(read.broker_configs.get(codec.DEFAULT_BROKER_ENTITY, {})),
        "reassignment_in_flight": [{"topic": e.topic, "partition": e.partition, "replicas": list(e.replicas)}
                                   for e in read.admin.reassignment],
        "preferred_election_pending": [{"topic": t, "partition": p} for t, p in read.admin.preferred],
        "topics_queued_for_deletion": list(read.admin.deleting),
        "consistency": {"rereads": c.rereads, "rounds": c.rounds, "consistent": c.consistent, "mode": c.mode},
        "sizes": "kafka-log-dirs" if with_sizes else None,
        "maintenance": manifest_section(read.maintenance),
        "warnings": warnings,
    }
