"""The snapshot's one narrow interface to ZooKeeper: read a part of the cluster, get frozen records back.

Modelled on kafka-kit's `kafkazk.Handler`: every ZooKeeper read the snapshot makes goes through `ZkReader`,
whose methods return immutable records (`ControllerRecord`, `BrokerRecord`, `AdminRecord`, `TopicRecord`
with its `PartitionBlock`). What to do with them (consistency rounds, assembly into tables) is elsewhere
(planner.snapshot, planner.snapshot_assembly), so this module holds only sessions, bulk reads and decoding.

Malformed znodes go to a `Problems` collector: in strict mode the first one raises CodecError (exit 2), in
lenient mode each is kept, keyed by what it affects, for the manifest's warnings. `Problems.decode` is the
one place a decode failure becomes a problem.
"""

from __future__ import annotations

import logging
import multiprocessing
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoAuthError
from kazoo.handlers.threading import KazooTimeoutError

from planner import codec, maintenance, maintenance_zk, zkbulk, zkcolumns
from planner import zk as zkmod
from planner.errors import BadInput, CodecError, PlannerError, ZkUnavailable
from planner.snapshot_io import list_to_matrix

log = logging.getLogger(__name__)

# Subtrees whose changes matter to a snapshot (persistent recursive watches on ZooKeeper >= 3.6).
WATCH_ROOTS = ("/brokers", "/admin", "/config/topics", "/config/brokers", codec.CONTROLLER,
               codec.CONTROLLER_EPOCH, codec.MIGRATION, maintenance_zk.ROOT)
WORKER_CHUNK = 250_000              # partition states per worker task

T = TypeVar("T")


# ------------------------------------------------------------------------------------------- problems
class Problems:
    """Malformed znodes found while reading, keyed by what they affect ("brokers", "topic:<name>", ...)."""

    def __init__(self, lenient: bool):
        self.lenient = lenient
        self.by_key: dict[str, list[dict[str, str]]] = {}

    def add(self, key: str, path: str, problem: str) -> None:
        if not self.lenient:
            raise CodecError(path, problem)
        self.by_key.setdefault(key, []).append({"path": path, "problem": problem})

    def decode(self, key: str, fn: Callable[..., T], *args: Any, default: T | None = None,
               note: str = "") -> T | None:
        """fn(*args), or (lenient) `default` with the codec's complaint recorded under `key`."""
        try:
            return fn(*args)
        except CodecError as e:
            self.add(key, e.path, e.problem + note)
            return default

    def reset(self, key: str) -> None:
        """Forget what was found under `key` (it is about to be read again)."""
        self.by_key.pop(key, None)

    def all(self) -> list[dict[str, str]]:
        return [w for key in sorted(self.by_key) for w in self.by_key[key]]


# -------------------------------------------------------------------------------------------- records
@dataclass(frozen=True)
class ControllerRecord:
    broker: int = -1
    epoch: int = -1
    kraft_controller_epoch: int = -1
    migration: bool = False            # a /migration znode exists
    migration_znode: bytes | None = None   # its content (planner.zk_migration reads the migration state from it)
    kraft: bool = False                # `broker` is a KRaft quorum's active controller node (not a broker)

    def as_manifest(self) -> dict[str, int]:
        return {"broker": self.broker, "epoch": self.epoch, "kraft_controller_epoch": self.kraft_controller_epoch}


@dataclass(frozen=True)
class BrokerRecord:
    id: int
    registration: codec.BrokerRegistration | None   # None: registered, but its znode is malformed
    czxid: int                                      # the broker epoch
    # KRaft only (None: not known, as in ZooKeeper mode): a fenced broker is registered but takes no
    # leadership and is in no ISR (ReplicationControlManager), so it does not count as alive
    fenced: bool | None = None
    in_controlled_shutdown: bool | None = None


@dataclass(frozen=True)
class AdminRecord:
    reassignment: tuple[codec.ReassignEntry, ...] = ()
    preferred: tuple[tuple[str, int], ...] = ()
    deleting: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class PartitionBlock:
    """Partition rows of the topics read together. Column `_t` indexes `names`."""

    names: tuple[str, ...]
    table: pa.Table


@dataclass(frozen=True, eq=False)
class TopicRecord:
    name: str
    version: int
    topic_id: str | None
    config: Mapping[str, str]
    block: PartitionBlock


@dataclass(frozen=True, eq=False)
class TopicsRead:
    topics: tuple[TopicRecord, ...]     # readable topics (malformed ones are problems, not records)
    gone: tuple[str, ...]               # asked for, but no longer exist or were malformed


def _worker_init() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and terminates the pool
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    zkmod.SESSION_LOG.setLevel(logging.ERROR)


def _state_task(args: tuple) -> zkcolumns.StateColumns:
    """Worker process: own session, sync (so it reads no older state than the parent's watches cover), read."""
    connect, auth, timeout, names, tidx, part = args
    client = zkmod.connect(connect, auth=auth, timeout=timeout)
    try:
        client.sync("/")
        reader = zkbulk.BulkReader(client, "multiread", timeout=max(60.0, timeout))
        return zkcolumns.read_states(reader, zkcolumns.state_paths(names, tidx, part))
    finally:
        client.stop()
        client.close()


def _sparse_strings(n: int, values: dict[int, str]) -> pa.Array:
    out: list[str | None] = [None] * n
    for i, v in values.items():
        out[i] = v
    return pa.array(out, pa.string()) if values else pa.nulls(n, pa.string())


def state_violations(replicas: pa.ListArray, cols: zkcolumns.StateColumns) -> list[tuple[int, str]]:
    """Rows whose (well-formed) state Kafka's own rules rule out: negative epochs, a leader that is not a
    replica, an ISR member that is not a replica or is listed twice, an unknown leader_recovery_state.
    Checked with arrays: nearly every row passes, and only failing rows are looked at one by one."""
    n = len(cols.has_state)
    if n == 0:
        return []
    known = cols.has_state.copy()
    for row, _ in cols.bad:
        known[row] = False
    rep = list_to_matrix(replicas)
    isr = list_to_matrix(zkcolumns.list_array(cols.isr_len, cols.isr_values))
    leader = cols.leader
    in_rep = (rep == leader[:, None]).any(axis=1) if rep.shape[1] else np.zeros(n, dtype=bool)
    isr_in = (isr < 0) | ((isr[:, :, None] == rep[:, None, :]).any(axis=2) if rep.shape[1]
                          else np.zeros(isr.shape, dtype=bool))
    dup = np.zeros(n, dtype=bool)
    for i in range(isr.shape[1]):            # ISRs are short: compare the pairs of columns
        for j in range(i + 1, isr.shape[1]):
            dup |= (isr[:, i] == isr[:, j]) & (isr[:, i] >= 0)
    bad = known & ((leader < -1) | (cols.leader_epoch < 0) | (cols.controller_epoch < 0)
                   | ((cols.leader_recovery_state != 0) & (cols.leader_recovery_state != 1))
                   | ((leader >= 0) & ~in_rep) | ~isr_in.all(axis=1) | dup)
    out = []
    for r in np.flatnonzero(bad).tolist():
        reps = [int(b) for b in rep[r] if b >= 0]
        members = [int(b) for b in isr[r] if b >= 0]
        if cols.leader_epoch[r] < 0 or cols.controller_epoch[r] < 0 or leader[r] < -1:
            what = ("leader_epoch", cols.leader_epoch[r]) if cols.leader_epoch[r] < 0 else \
                ("controller_epoch", cols.controller_epoch[r]) if cols.controller_epoch[r] < 0 else ("leader", leader[r])
            out.append((r, f"{what[0]} {int(what[1])} is out of range"))
        elif cols.leader_recovery_state[r] not in (0, 1):
            out.append((r, f"leader_recovery_state {int(cols.leader_recovery_state[r])} is not 0 or 1"))
        elif leader[r] >= 0 and not in_rep[r]:
            out.append((r, f"leader {int(leader[r])} is not a replica {reps}"))
        elif dup[r]:
            out.append((r, f"isr {members} lists a broker twice"))
        else:
            outside = [b for b in members if b not in reps]
            out.append((r, f"isr {members} names brokers {outside} that are not replicas {reps}"))
    return out


# --------------------------------------------------------------------------------------------- reader
class ZkReader:
    """Sessions and reads of one snapshot run (module docstring)."""

    def __init__(self, target: zkmod.ZkTarget, auth: tuple[str, str] | None, timeout: float,
                 problems: Problems, workers: int | None = None, read_mode: str = "auto",
                 progress: Callable[[str], None] = lambda m: None):
        self.target = target
        self.auth = auth
        self.timeout = timeout
        self.problems = problems
        self.workers = workers
        self.read_mode = read_mode
        self.say = progress
        self.client: KazooClient | None = None
        self.reader: zkbulk.BulkReader | None = None
        self.changes: zkbulk.ChangeLog | None = None
        self.mode = ""
        self.pool = None

    # ------------------------------------------------------------------------------------ helpers
    def _denied(self, path: str) -> BadInput:
        how = "the digest credentials given" if self.auth else "a session without credentials"
        return BadInput(f"ZooKeeper denied {how} reading {path} (NOAUTH): the cluster's znodes are "
                        "ACL-protected; give digest credentials user:password in the environment (auth, "
                        f"default variable {zkmod.DEFAULT_AUTH_ENV})")

    def _children(self, path: str) -> list[str] | None:
        try:
            return self.reader.children(path)
        except NoAuthError:
            raise self._denied(path) from None

    def _get(self, path: str) -> tuple[int, bytes | None, np.void | None]:
        r = self.reader.get_many([path])
        err = int(r.err[0])
        if err == zkbulk.ERR_NOAUTH:
            raise self._denied(path)
        if err == zkbulk.ERR_NONODE:
            return err, None, None
        if err:
            raise ZkUnavailable(f"reading {path} failed with ZooKeeper error {err}")
        return 0, r.data[0], r.stat[0]

    def _check_reads(self, reads: zkbulk.Reads, paths: Sequence[str]) -> None:
        denied = np.flatnonzero(reads.err == zkbulk.ERR_NOAUTH)
        if len(denied):
            raise self._denied(paths[int(denied[0])])
        other = np.flatnonzero((reads.err != 0) & (reads.err != zkbulk.ERR_NONODE))
        if len(other):
            i = int(other[0])
            raise ZkUnavailable(f"reading {paths[i]} failed with ZooKeeper error {int(reads.err[i])}")

    # ------------------------------------------------------------------------------------ session
    def connect(self) -> int:
        """Open the session, check the chroot holds Kafka (not migrating to KRaft), choose the read mode,
        watch the subtrees. Returns the zxid of the first barrier."""
        self.client = zkmod.connect(self.target, auth=self.auth, timeout=self.timeout)
        try:
            zkmod.require_kafka(self.client, where=self.target.chroot or "/")
        except NoAuthError:
            raise self._denied(codec.BROKER_IDS) from None
        try:
            zkmod.refuse_kraft_read(self.client)
        except NoAuthError:
            raise self._denied(codec.CONTROLLER) from None
        mode = self.read_mode
        if mode == "auto":
            mode = "multiread" if zkbulk.supports_multiread(self.client, self.timeout) else "plain"
            if mode == "plain":
                log.warning("ZooKeeper does not support multiRead (< 3.6): reading znode by znode")
                self.client.sync("/")  # wait for the reconnect an old server forces after the probe
        self.mode = mode
        self.changes = zkbulk.ChangeLog(self.client)
        self.reader = zkbulk.BulkReader(self.client, mode, timeout=max(60.0, self.timeout))
        if mode == "multiread":
            try:
                self.changes.watch_recursive(WATCH_ROOTS, timeout=self.timeout)
            except NoAuthError:
                raise self._denied(WATCH_ROOTS[0]) from None
        _, zxid = self.changes.barrier(self.timeout)
        self.changes.lost = False
        return zxid

    def barrier(self) -> tuple[set[str], int]:
        """(paths changed since the previous barrier, the zxid of this one)."""
        if self.changes.lost:
            raise ZkUnavailable("the connection to ZooKeeper was interrupted during the snapshot, so "
                                "changes may have been missed; run the snapshot again")
        return self.changes.barrier(self.timeout)

    @property
    def reads(self) -> int:
        return self.reader.reads if self.reader is not None else 0

    def close(self) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()
            self.pool = None
        if self.client is not None:
            try:
                self.client.stop()
            finally:
                self.client.close()
            self.client = None

    # ------------------------------------------------------------------------------------ reads
    def controller(self) -> ControllerRecord:
        p = self.problems
        p.reset("controller")
        broker = kraft = epoch = -1
        err, data, _ = self._get(codec.CONTROLLER)
        if not err:
            c = p.decode("controller", codec.decode_controller, data)
            if c is not None:
                broker, kraft = c.broker_id, c.kraft_controller_epoch
        err, data, _ = self._get(codec.CONTROLLER_EPOCH)
        if not err:
            epoch = p.decode("controller", codec.decode_controller_epoch, data, default=-1)
        err, data, _ = self._get(codec.MIGRATION)
        return ControllerRecord(broker, epoch, kraft, migration=not err, migration_znode=None if err else data)

    def brokers(self) -> tuple[BrokerRecord, ...]:
        p = self.problems
        p.reset("brokers")
        ids = self._children(codec.BROKER_IDS) or []
        numeric = []
        for s in ids:
            if s.isdigit() and s.isascii() and int(s) < 2**31:
                numeric.append(int(s))
            else:
                p.add("brokers", f"{codec.BROKER_IDS}/{s}", "broker id is not an integer from 0 to 2147483647")
        numeric.sort()
        paths = [codec.broker_path(b) for b in numeric]
        reads = self.reader.get_many(paths)
        self._check_reads(reads, paths)
        out = []
        for i, b in enumerate(numeric):
            if reads.err[i]:
                continue  # deregistered between the listing and the read
            # Still registered (alive) when its details are malformed; only those are unknown.
            reg = p.decode("brokers", codec.decode_broker, b, reads.data[i], paths[i])
            out.append(BrokerRecord(b, reg, int(reads.stat["czxid"][i])))
        return tuple(out)

    def broker_configs(self) -> Mapping[str, Mapping[str, str]]:
        p = self.problems
        p.reset("broker_configs")
        names = sorted(self._children(codec.CONFIG_BROKERS) or [])
        paths = [codec.broker_config_path(n) for n in names]
        reads = self.reader.get_many(paths)
        self._check_reads(reads, paths)
        configs: dict[str, Mapping[str, str]] = {}
        for i, n in enumerate(names):
            if reads.err[i]:
                continue
            c = p.decode("broker_configs", codec.decode_config, reads.data[i], paths[i])
            if c is not None:
                configs[n] = MappingProxyType(c)
        return MappingProxyType(configs)

    def admin(self) -> AdminRecord:
        p = self.problems
        p.reset("admin")
        reassignment: list[codec.ReassignEntry] = []
        preferred: list[tuple[str, int]] = []
        err, data, _ = self._get(codec.REASSIGN)
        if not err:
            reassignment = p.decode("admin", codec.decode_reassignment, data, default=[],
                                    note=" (Kafka's controller ignores this znode; no new reassignment can "
                                         "start until it is deleted)")
        err, data, _ = self._get(codec.PREFERRED_ELECTION)
        if not err:
            preferred = p.decode("admin", codec.decode_preferred_election, data, default=[])
        deleting = sorted(self._children(codec.DELETE_TOPICS) or [])
        return AdminRecord(tuple(reassignment), tuple(preferred), tuple(deleting))

    def maintenance(self) -> Mapping[int, maintenance.Entry]:
        """The planner's per-broker maintenance state (planner/maintenance.py; its znodes:
        planner/maintenance_zk.py), empty when none."""
        names = sorted(self._children(maintenance_zk.ROOT) or [])
        paths = [f"{maintenance_zk.ROOT}/{n}" for n in names]
        reads = self.reader.get_many(paths)
        self._check_reads(reads, paths)
        out: dict[int, maintenance.Entry] = {}
        for i, n in enumerate(names):
            if reads.err[i]:
                continue
            e = maintenance_zk.decode(n, reads.data[i])
            if e is not None:
                out[e.broker] = e
        return MappingProxyType(out)

    def topic_names(self) -> list[str]:
        names = self._children(codec.TOPICS) or []
        good = []
        for n in names:
            if codec.is_valid_topic_name(n):
                good.append(n)
            else:
                self.problems.add(f"topic:{n}", codec.topic_path(n), "not a legal Kafka topic name")
        return sorted(good)

    def topics(self, names: Sequence[str], parallel: bool = False) -> TopicsRead:
        """Whole topics: topic znode, config and every partition state. Topics that no longer exist, and
        (lenient) malformed ones, are listed in `gone`."""
        p = self.problems
        names = sorted(set(names))
        for n in names:
            p.reset(f"topic:{n}")
        tpaths = [codec.topic_path(n) for n in names]
        cpaths = [codec.topic_config_path(n) for n in names]
        treads = self.reader.get_many(tpaths)
        self._check_reads(treads, tpaths)
        creads = self.reader.get_many(cpaths)
        self._check_reads(creads, cpaths)
        kept: list[str] = []
        metas: list[tuple[str, int, str | None, dict[str, str]] | None] = []
        gone: list[str] = []
        keys: list = []
        values: list = []
        counts_l: list[int] = []
        adding: list[tuple[int, int, list[int]]] = []    # (local topic, partition, replicas)
        removing: list[tuple[int, int, list[int]]] = []
        for i, name in enumerate(names):
            if treads.err[i]:
                gone.append(name)   # deleted
                continue
            key = f"topic:{name}"
            parsed = p.decode(key, zkcolumns.parse_topic, name, treads.data[i], tpaths[i])
            config = {} if creads.err[i] else p.decode(key, codec.decode_config, creads.data[i], cpaths[i])
            if parsed is None or config is None:
                gone.append(name)
                continue
            version, topic_id, k, v, add, rem = parsed
            t = len(kept)
            kept.append(name)
            metas.append((name, version, topic_id, config))
            keys.extend(k)
            values.extend(v)
            counts_l.append(len(k))
            adding.extend((t, q, r) for q, r in add.items())
            removing.extend((t, q, r) for q, r in rem.items())
        counts = np.array(counts_l, dtype=np.int64)
        rows = zkcolumns.topic_rows(keys, values)
        if rows is None:
            # Something is malformed: find the topics one by one, let the codec name the problem.
            starts = np.concatenate([[0], np.cumsum(counts)])
            keep = np.ones(len(keys), dtype=bool)
            for t, name in enumerate(kept):
                a, b = int(starts[t]), int(starts[t + 1])
                if zkcolumns.topic_rows(keys[a:b], values[a:b]) is not None:
                    continue
                keep[a:b] = False
                try:
                    codec.decode_topic(name, treads.data[names.index(name)], codec.topic_path(name))
                    problem = "a partition or broker id is out of range"
                except CodecError as e:
                    problem = e.problem
                metas[t] = None
                counts[t] = 0
                p.add(f"topic:{name}", codec.topic_path(name), problem)
            keys = [k for k, ok in zip(keys, keep.tolist(), strict=True) if ok]
            values = [v for v, ok in zip(values, keep.tolist(), strict=True) if ok]
            rows = zkcolumns.topic_rows(keys, values)
            assert rows is not None
        ids, lengths, flat = rows
        tidx = np.repeat(np.arange(len(kept), dtype=np.int32), counts)
        part = ids.astype(np.int32)
        del keys, values
        # Sort rows by (topic, partition); topics are already in name order.
        order = np.lexsort((part, tidx))
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        replicas = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(flat, pa.int32()))
        if not np.array_equal(order, np.arange(len(order))):
            replicas = replicas.take(pa.array(order))
            tidx, part, lengths = tidx[order], part[order], lengths[order]
        # Malformed: a replica listed twice, a partition listed twice.
        dup_rows = zkcolumns.duplicate_rows(lengths, replicas.flatten().to_numpy().astype(np.int64))
        bad_topics = {int(tidx[r]) for r in dup_rows}
        dup_part = np.flatnonzero((tidx[1:] == tidx[:-1]) & (part[1:] == part[:-1]))
        bad_topics |= {int(tidx[r]) for r in dup_part}
        for t in sorted(bad_topics):
            if metas[t] is None:
                continue
            p.add(f"topic:{kept[t]}", codec.topic_path(kept[t]),
                  "a partition lists a replica twice, or a partition is listed twice")
            metas[t] = None
        row_ok = np.array([metas[t] is not None for t in range(len(kept))], dtype=bool)[tidx] \
            if len(tidx) else np.zeros(0, dtype=bool)
        # Kafka numbers a topic's partitions 0..N-1; a gap means the znode was edited by hand.
        if len(tidx):
            starts = np.searchsorted(tidx, np.arange(len(kept)))
            gap = row_ok & (part != np.arange(len(tidx)) - starts[tidx])
            for t in np.unique(tidx[gap]).tolist():
                ids = set(part[tidx == t].tolist())
                missing = sorted(set(range(len(ids))) - ids)
                p.add(f"topic:{kept[t]}", codec.topic_path(kept[t]), f"partition ids are not 0..{len(ids) - 1} "
                      f"(missing {', '.join(map(str, missing[:5]))}{' ...' if len(missing) > 5 else ''})")
        # Partition states (the bulk of the work).
        total = len(part)
        self.say(f"reading {total} partition states of {len(kept)} topics")
        cols = self._read_state_rows(kept, tidx, part, parallel)
        # A state znode that is malformed, or that Kafka's rules say cannot be (an ISR member that is not a
        # replica, ...), leaves the partition's state unknown. Its assignment is known, so (lenient) the
        # partition is kept, with the problem in `state_error`.
        state_error: dict[int, str] = {}
        for row, problem in [*cols.bad, *state_violations(replicas, cols)]:
            if not row_ok[row] or row in state_error:
                continue
            t = int(tidx[row])
            p.add(f"topic:{kept[t]}", codec.state_path(kept[t], int(part[row])), problem)
            state_error[row] = problem
        if cols.denied:
            r = cols.denied[0]
            raise self._denied(codec.state_path(kept[int(tidx[r])], int(part[r])))
        # Adding/removing replica lists (only during reassignments: few rows).
        add_len = np.zeros(total, dtype=np.int32)
        rem_len = np.zeros(total, dtype=np.int32)
        add_vals: dict[int, list[int]] = {}
        rem_vals: dict[int, list[int]] = {}
        if adding or removing:
            key = tidx.astype(np.int64) * 2**32 + part

            def rows_of(entries):
                out = {}
                for t, q, r in entries:
                    i = int(np.searchsorted(key, t * 2**32 + q))
                    out[i] = r
                return out

            add_vals, rem_vals = rows_of(adding), rows_of(removing)
            for i, r in add_vals.items():
                add_len[i] = len(r)
            for i, r in rem_vals.items():
                rem_len[i] = len(r)

        def sparse_list(lens: np.ndarray, vals: dict[int, list[int]]) -> pa.ListArray:
            flat_v = np.array([b for i in sorted(vals) for b in vals[i]], dtype=np.int32)
            return zkcolumns.list_array(lens, flat_v)

        table = pa.table({
            "_t": pa.array(tidx, pa.int32()),
            "partition": pa.array(part, pa.int32()),
            "replicas": replicas,
            "adding_replicas": sparse_list(add_len, add_vals),
            "removing_replicas": sparse_list(rem_len, rem_vals),
            "has_state": pa.array(cols.has_state),
            "leader": pa.array(cols.leader),
            "leader_epoch": pa.array(cols.leader_epoch),
            "isr": zkcolumns.list_array(cols.isr_len, cols.isr_values),
            "controller_epoch": pa.array(cols.controller_epoch),
            "leader_recovery_state": pa.array(cols.leader_recovery_state),
            "state_version": pa.array(cols.state_version),
            "state_error": _sparse_strings(total, state_error),
        })
        if not row_ok.all():
            table = table.filter(pa.array(row_ok))
        block = PartitionBlock(tuple(kept), table)
        records = []
        for m in metas:
            if m is None:
                continue
            name, version, topic_id, config = m
            records.append(TopicRecord(name, version, topic_id, MappingProxyType(config), block))
        gone.extend(kept[t] for t in range(len(kept)) if metas[t] is None)
        return TopicsRead(tuple(records), tuple(sorted(gone)))

    def _read_state_rows(self, names: list[str], tidx: np.ndarray, part: np.ndarray, parallel: bool
                         ) -> zkcolumns.StateColumns:
        n = len(part)
        # One process by default: with multiRead the reads cost the server about as much CPU as decoding
        # costs here, and on 2 cores next to a local ZooKeeper worker processes measured slower (bench/).
        workers = self.workers or 1
        if parallel and workers > 1 and self.mode != "multiread":
            self.say("  reading in one process: worker sessions need multiRead (ZooKeeper >= 3.6)")
        if not parallel or workers <= 1 or self.mode != "multiread" or n == 0:
            started = time.monotonic()
            last = [started]

            def tick(done: int) -> None:
                now = time.monotonic()
                if now - last[0] >= 1.0:
                    last[0] = now
                    self.say(f"  {done}/{n} partition states read ({now - started:.1f} s)")

            self.reader.progress = tick
            try:
                return zkcolumns.read_states(self.reader, zkcolumns.state_paths(names, tidx, part))
            finally:
                self.reader.progress = None
        # Worker processes, each with its own session: decoding is CPU-bound and one process's GIL caps it.
        chunks = max(workers, -(-n // WORKER_CHUNK))
        bounds = np.linspace(0, n, chunks + 1).astype(np.int64)
        ctx = multiprocessing.get_context("spawn")
        self.pool = ctx.Pool(workers, initializer=_worker_init)
        tasks = [(self.target.connect_string, self.auth, self.timeout, names, tidx[a:b], part[a:b])
                 for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        results: list[zkcolumns.StateColumns] = []
        started = time.monotonic()
        done = 0
        try:
            for res in self.pool.imap(_state_task, tasks):
                results.append(res)
                done += len(res.has_state)
                self.say(f"  {done}/{n} partition states read ({time.monotonic() - started:.1f} s, "
                         f"{workers} workers)")
        except PlannerError:
            raise
        except (KazooException, KazooTimeoutError, OSError) as e:
            raise ZkUnavailable(f"a snapshot worker lost ZooKeeper: {e!r}") from None
        finally:
            self.pool.terminate()
            self.pool.join()
            self.pool = None
        return zkcolumns.StateColumns.concat(results)
