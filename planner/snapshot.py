"""ZooKeeper -> snapshot folder (docs/SNAPSHOT.md): the first step of every run.

Reads brokers, controller, topics, partition states, configs and the pending admin znodes of a
ZooKeeper-mode Kafka cluster, and writes them as Parquet columns plus a manifest. Nothing is ever written to
ZooKeeper. Built for size: partition data never becomes per-partition Python objects. Znodes are read with
ZooKeeper's multiRead, 1,000 per request (planner.zkbulk), decoded in bulk into arrays (planner.zkcolumns),
optionally in worker processes with their own sessions, and the tables are built from arrays.

Consistency (docs/SNAPSHOT.md "Consistency"): reads are not atomic, so before reading anything the snapshot
puts persistent recursive watches on the subtrees it reads (one-shot watches on every znode on servers older
than 3.6), and after each round a sync() barrier tells exactly which paths changed since the previous one.
Changed topics (their topic znode, config or any partition state) and changed brokers/admin/controller
znodes are re-read, and rounds repeat until a round sees no change: then every value is the cluster's state at
that barrier's zxid (`manifest.zxid.max`).
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoAuthError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from planner import codec, logdirs, zkbulk, zkcolumns
from planner import snapshot_io as sio
from planner import zk as zkmod
from planner.errors import BadInput, CodecError, KraftMigration, PlannerError, ZkUnavailable

log = logging.getLogger(__name__)

# Subtrees whose changes matter to a snapshot (persistent recursive watches on ZooKeeper >= 3.6).
WATCH_ROOTS = ("/brokers", "/admin", "/config/topics", "/config/brokers", codec.CONTROLLER,
               codec.CONTROLLER_EPOCH, codec.MIGRATION)
MAX_ROUNDS = 10
WORKER_CHUNK = 250_000              # partition states per worker task
MIN_ISR = "min.insync.replicas"
UNCLEAN = "unclean.leader.election.enable"
LEADER_THROTTLED_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED_REPLICAS = "follower.replication.throttled.replicas"
LEADER_THROTTLE_RATE = "leader.replication.throttled.rate"
FOLLOWER_THROTTLE_RATE = "follower.replication.throttled.rate"

Progress = Callable[[str], None]


@dataclass
class SnapshotResult:
    path: Path
    manifest: dict[str, Any]
    brokers: pa.Table
    topics: pa.Table
    partitions: pa.Table


def _worker_init() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and terminates the pool
    logging.getLogger("kazoo").setLevel(logging.ERROR)


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


# -------------------------------------------------------------------------------------------- topics
@dataclass
class _TopicMeta:
    name: str
    version: int
    topic_id: str | None
    config: dict[str, str]
    block: _Block | None = None


@dataclass
class _Block:
    """Partitions of a set of topics read together. Column `_t` indexes `names`."""

    names: list[str]
    table: pa.Table


class _Snapshotter:
    """One snapshot run: the sessions, what has been read so far, and the consistency rounds."""

    def __init__(self, target: zkmod.ZkTarget, auth: tuple[str, str] | None, timeout: float, lenient: bool,
                 workers: int | None, read_mode: str, progress: Progress):
        self.target = target
        self.auth = auth
        self.timeout = timeout
        self.lenient = lenient
        self.workers = workers
        self.read_mode = read_mode
        self.say = progress
        self.client: KazooClient | None = None
        self.reader: zkbulk.BulkReader | None = None
        self.changes: zkbulk.ChangeLog | None = None
        self.mode = ""
        self.pool = None
        # What has been read.
        self.controller: dict[str, Any] = {"broker": -1, "epoch": -1, "kraft_controller_epoch": -1}
        self.migration_znode = False
        self.brokers: dict[int, tuple[codec.BrokerRegistration | None, int]] = {}
        self.broker_configs: dict[str, dict[str, str]] = {}
        self.reassignment: list[codec.ReassignEntry] = []
        self.preferred: list[tuple[str, int]] = []
        self.deleting: list[str] = []
        self.topics: dict[str, _TopicMeta] = {}
        self.blocks: list[_Block] = []
        self.warnings: dict[str, list[dict[str, str]]] = {}   # key: "topic:<name>" or a category
        self.rounds = 0
        self.rereads = 0
        self.consistent = True
        self.zxid_min = 0
        self.zxid_max = 0

    # ------------------------------------------------------------------------------------ helpers
    def _problem(self, key: str, path: str, problem: str) -> None:
        """A malformed znode: an error, or with --lenient a manifest warning (the caller skips the item)."""
        if not self.lenient:
            raise CodecError(path, problem)
        self.warnings.setdefault(key, []).append({"path": path, "problem": problem})

    def _denied(self, path: str) -> BadInput:
        how = "the digest credentials given" if self.auth else "a session without credentials"
        return BadInput(f"ZooKeeper denied {how} reading {path} (NOAUTH): the cluster's znodes are "
                        "ACL-protected; give digest credentials user:password in the environment variable "
                        f"named by --zk-auth-env (default {zkmod.DEFAULT_AUTH_ENV})")

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

    # ------------------------------------------------------------------------------------ connect
    def connect(self) -> None:
        self.client = zkmod.connect(self.target, auth=self.auth, timeout=self.timeout)
        try:
            zkmod.require_kafka(self.client, where=self.target.chroot or "/")
        except NoAuthError:
            raise self._denied(codec.BROKER_IDS) from None
        try:
            zkmod.refuse_kraft_migration(self.client)
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
        _, self.zxid_min = self.changes.barrier(self.timeout)
        self.changes.lost = False

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

    # ------------------------------------------------------------------------------------ readers
    def read_controller(self) -> None:
        self.warnings.pop("controller", None)
        ctrl: dict[str, Any] = {"broker": -1, "epoch": -1, "kraft_controller_epoch": -1}
        err, data, _ = self._get(codec.CONTROLLER)
        if not err:
            try:
                c = codec.decode_controller(data)
                ctrl["broker"], ctrl["kraft_controller_epoch"] = c.broker_id, c.kraft_controller_epoch
            except CodecError as e:
                self._problem("controller", e.path, e.problem)
        err, data, _ = self._get(codec.CONTROLLER_EPOCH)
        if not err:
            try:
                ctrl["epoch"] = codec.decode_controller_epoch(data)
            except CodecError as e:
                self._problem("controller", e.path, e.problem)
        err, _, _ = self._get(codec.MIGRATION)
        self.migration_znode = not err
        self.controller = ctrl

    def read_brokers(self) -> None:
        self.warnings.pop("brokers", None)
        ids = self._children(codec.BROKER_IDS) or []
        numeric = []
        for s in ids:
            if s.isdigit() and s.isascii():
                numeric.append(int(s))
            else:
                self._problem("brokers", f"{codec.BROKER_IDS}/{s}", "broker id is not a non-negative integer")
        numeric.sort()
        paths = [codec.broker_path(b) for b in numeric]
        reads = self.reader.get_many(paths)
        self._check_reads(reads, paths)
        brokers: dict[int, tuple[codec.BrokerRegistration | None, int]] = {}
        for i, b in enumerate(numeric):
            if reads.err[i]:
                continue  # deregistered between the listing and the read
            czxid = int(reads.stat["czxid"][i])
            try:
                reg = codec.decode_broker(b, reads.data[i], paths[i])
            except CodecError as e:
                # Still registered (alive); only its details are unknown.
                self._problem("brokers", e.path, e.problem)
                reg = None
            brokers[b] = (reg, czxid)
        self.brokers = brokers

    def read_broker_configs(self) -> None:
        self.warnings.pop("broker_configs", None)
        names = sorted(self._children(codec.CONFIG_BROKERS) or [])
        paths = [codec.broker_config_path(n) for n in names]
        reads = self.reader.get_many(paths)
        self._check_reads(reads, paths)
        configs: dict[str, dict[str, str]] = {}
        for i, n in enumerate(names):
            if reads.err[i]:
                continue
            try:
                configs[n] = codec.decode_config(reads.data[i], paths[i])
            except CodecError as e:
                self._problem("broker_configs", e.path, e.problem)
        self.broker_configs = configs

    def read_admin(self) -> None:
        self.warnings.pop("admin", None)
        err, data, _ = self._get(codec.REASSIGN)
        self.reassignment = []
        if not err:
            try:
                self.reassignment = codec.decode_reassignment(data)
            except CodecError as e:
                self._problem("admin", e.path, e.problem + " (Kafka's controller ignores this znode; no new "
                              "reassignment can start until it is deleted)")
        err, data, _ = self._get(codec.PREFERRED_ELECTION)
        self.preferred = []
        if not err:
            try:
                self.preferred = codec.decode_preferred_election(data)
            except CodecError as e:
                self._problem("admin", e.path, e.problem)
        self.deleting = sorted(self._children(codec.DELETE_TOPICS) or [])

    def list_topics(self) -> list[str]:
        names = self._children(codec.TOPICS) or []
        good = []
        for n in names:
            if codec.is_valid_topic_name(n):
                good.append(n)
            else:
                self._problem(f"topic:{n}", codec.topic_path(n), "not a legal Kafka topic name")
        return sorted(good)

    def read_topics(self, names: Sequence[str], parallel: bool = False) -> None:
        """(Re-)read whole topics: topic znode, config and every partition state. Topics that no longer
        exist are dropped."""
        names = sorted(set(names))
        for n in names:
            self.warnings.pop(f"topic:{n}", None)
        tpaths = [codec.topic_path(n) for n in names]
        cpaths = [codec.topic_config_path(n) for n in names]
        treads = self.reader.get_many(tpaths)
        self._check_reads(treads, tpaths)
        creads = self.reader.get_many(cpaths)
        self._check_reads(creads, cpaths)
        kept: list[str] = []
        metas: list[_TopicMeta | None] = []
        keys: list = []
        values: list = []
        counts_l: list[int] = []
        adding: list[tuple[int, int, list[int]]] = []    # (local topic, partition, replicas)
        removing: list[tuple[int, int, list[int]]] = []
        for i, name in enumerate(names):
            if treads.err[i]:
                self.topics.pop(name, None)   # deleted
                continue
            try:
                version, topic_id, k, v, add, rem = zkcolumns.parse_topic(name, treads.data[i], tpaths[i])
                config = {} if creads.err[i] else codec.decode_config(creads.data[i], cpaths[i])
            except CodecError as e:
                self._problem(f"topic:{name}", e.path, e.problem)
                self.topics.pop(name, None)
                continue
            t = len(kept)
            kept.append(name)
            metas.append(_TopicMeta(name, version, topic_id, config))
            keys.extend(k)
            values.extend(v)
            counts_l.append(len(k))
            adding.extend((t, p, r) for p, r in add.items())
            removing.extend((t, p, r) for p, r in rem.items())
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
                self.topics.pop(name, None)
                self._problem(f"topic:{name}", codec.topic_path(name), problem)
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
            self._problem(f"topic:{kept[t]}", codec.topic_path(kept[t]),
                          "a partition lists a replica twice, or a partition is listed twice")
            metas[t] = None
            self.topics.pop(kept[t], None)
        row_ok = np.array([metas[t] is not None for t in range(len(kept))], dtype=bool)[tidx] \
            if len(tidx) else np.zeros(0, dtype=bool)
        # Partition states (the bulk of the work).
        total = len(part)
        self.say(f"reading {total} partition states of {len(kept)} topics")
        cols = self._read_state_rows(kept, tidx, part, parallel)
        for row, problem in cols.bad:
            if not row_ok[row]:
                continue
            t = int(tidx[row])
            self._problem(f"topic:{kept[t]}", codec.state_path(kept[t], int(part[row])), problem)
            row_ok[row] = False
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
                for t, p, r in entries:
                    i = int(np.searchsorted(key, t * 2**32 + p))
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
        })
        if not row_ok.all():
            table = table.filter(pa.array(row_ok))
        block = _Block(kept, table)
        self.blocks.append(block)
        for m in metas:
            if m is not None:
                m.block = block
                self.topics[m.name] = m

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

    # ------------------------------------------------------------------------------------ rounds
    def read_all(self) -> None:
        self.say(f"reading cluster metadata from {self.target} ({self.mode})")
        self.read_controller()
        self.read_brokers()
        self.read_broker_configs()
        self.read_admin()
        names = self.list_topics()
        self.say(f"reading {len(names)} topics")
        self.read_topics(names, parallel=True)

    def settle(self, max_rounds: int = MAX_ROUNDS) -> None:
        """Re-read whatever changed since it was read until a round sees no change (module docstring)."""
        base_reads = self.reader.reads
        while True:
            if self.changes.lost:
                raise ZkUnavailable("the connection to ZooKeeper was interrupted during the snapshot, so "
                                    "changes may have been missed; run the snapshot again")
            changed, zxid = self.changes.barrier(self.timeout)
            self.zxid_max = zxid
            if not changed:
                break
            if self.rounds >= max_rounds:
                self.consistent = False
                sample = ", ".join(sorted(changed)[:5])
                self.warnings.setdefault("consistency", []).append({
                    "path": "/",
                    "problem": f"the cluster kept changing: {len(changed)} znodes changed during the last of "
                               f"{max_rounds} re-read rounds (e.g. {sample}); the snapshot may mix states "
                               "from different moments",
                })
                break
            self.rounds += 1
            self._reread(changed)
        self.rereads = self.reader.reads - base_reads

    def _reread(self, changed: set[str]) -> None:
        topics: set[str] = set()
        relist = brokers = broker_configs = admin = controller = False
        for p in changed:
            parts = p.split("/")
            if p == codec.TOPICS:
                relist = True
            elif p.startswith(codec.TOPICS + "/"):
                topics.add(parts[3])
            elif p.startswith(codec.CONFIG_TOPICS + "/"):
                topics.add(parts[3])
            elif p == codec.BROKER_IDS or p.startswith(codec.BROKER_IDS + "/"):
                brokers = True
            elif p == codec.CONFIG_BROKERS or p.startswith(codec.CONFIG_BROKERS + "/"):
                broker_configs = True
            elif p == "/admin" or p.startswith("/admin/"):
                admin = True
            elif p in (codec.CONTROLLER, codec.CONTROLLER_EPOCH, codec.MIGRATION):
                controller = True
        if controller:
            self.read_controller()
        if brokers:
            self.read_brokers()
        if broker_configs:
            self.read_broker_configs()
        if admin:
            self.read_admin()
        if relist:
            current = set(self.list_topics())
            known = set(self.topics)
            topics |= current - known
            for gone in known - current:
                self.topics.pop(gone, None)
                self.warnings.pop(f"topic:{gone}", None)
        topics = {t for t in topics if codec.is_valid_topic_name(t)}
        if topics:
            self.read_topics(sorted(topics))

    def check_kraft(self) -> None:
        if self.migration_znode:
            reason = "a /migration znode exists"
        elif self.controller["kraft_controller_epoch"] > 0:
            reason = f"/controller has kraftControllerEpoch {self.controller['kraft_controller_epoch']}"
        else:
            return
        raise KraftMigration(
            f"this cluster is migrating to KRaft ({reason}); ZooKeeper is no longer authoritative and "
            "must not be written. Use the Admin API based tools instead."
        )


# ------------------------------------------------------------------------------------------ assembly
def _compact(config: dict[str, str]) -> str:
    return json.dumps(config, separators=(",", ":"), sort_keys=True)


def _int_config(config: dict[str, str], key: str, where: str) -> int | None:
    v = config.get(key)
    if v is None:
        return None
    try:
        return int(v.strip())
    except ValueError:
        raise CodecError(where, f"{key} {v!r} is not an integer") from None


def _bool_config(config: dict[str, str], key: str, where: str) -> bool | None:
    v = config.get(key)
    if v is None:
        return None
    s = v.strip().lower()
    if s not in ("true", "false"):
        raise CodecError(where, f"{key} {v!r} is not true or false")
    return s == "true"


def _assemble(s: _Snapshotter) -> tuple[pa.Table, pa.Table, pa.Table, list[dict]]:
    """Build the three tables from what was read. Returns (brokers, topics, partitions, extra warnings)."""
    extra: list[dict] = []
    defaults = s.broker_configs.get(codec.DEFAULT_BROKER_ENTITY, {})
    default_where = codec.broker_config_path(codec.DEFAULT_BROKER_ENTITY)
    try:
        default_min_isr = _int_config(defaults, MIN_ISR, default_where) or 1
        default_unclean = bool(_bool_config(defaults, UNCLEAN, default_where))
    except CodecError as e:
        if not s.lenient:
            raise
        extra.append({"path": e.path, "problem": e.problem + " (Kafka's built-in default used)"})
        default_min_isr, default_unclean = 1, False

    # Topic settings; a malformed topic config skips the topic (its risk cannot be judged).
    names = sorted(s.topics)
    rows_t: dict[str, list] = {k: [] for k in ("min_isr", "unclean")}
    kept: list[str] = []
    for n in names:
        meta = s.topics[n]
        where = codec.topic_config_path(n)
        try:
            mi = _int_config(meta.config, MIN_ISR, where)
            ue = _bool_config(meta.config, UNCLEAN, where)
        except CodecError as e:
            if not s.lenient:
                raise
            s.warnings.setdefault(f"topic:{n}", []).append({"path": e.path, "problem": e.problem})
            continue
        kept.append(n)
        rows_t["min_isr"].append(default_min_isr if mi is None else mi)
        rows_t["unclean"].append(default_unclean if ue is None else ue)
    rank = {n: i for i, n in enumerate(kept)}

    # Partitions: the rows of each topic's current block, in (topic, partition) order.
    pieces = []
    for b in s.blocks:
        owned = np.array([rank.get(n, -1) if s.topics.get(n) is not None and s.topics[n].block is b else -1
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
        empty = {f.name: pa.array([], f.type) for f in sio.PARTITIONS_SCHEMA if f.name not in ("topic",
                                                                                            "target_replicas",
                                                                                            "size_bytes")}
        parts = pa.table({**empty, "_g": pa.array([], pa.int32())})
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
    for e in s.reassignment:
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
                  .append_column("size_bytes", pa.nulls(n_rows, pa.int64())))
    partitions = partitions.select(sio.PARTITIONS_SCHEMA.names).cast(sio.PARTITIONS_SCHEMA)

    # Topics table.
    counts = np.bincount(g, minlength=len(kept)).astype(np.int32)
    rep_len = pc.list_value_length(partitions.column("replicas")).to_numpy(zero_copy_only=False)
    add_len = pc.list_value_length(partitions.column("adding_replicas")).to_numpy(zero_copy_only=False)
    rf = np.zeros(len(kept), dtype=np.int32)
    if n_rows:
        np.maximum.at(rf, g, (rep_len - add_len).astype(np.int32))
    deleting = set(s.deleting)
    metas = [s.topics[n] for n in kept]
    topics = pa.table({
        "topic": pa.array(kept, pa.string()),
        "topic_id": pa.array([m.topic_id for m in metas], pa.string()),
        "znode_version": pa.array([m.version for m in metas], pa.int8()),
        "partitions": pa.array(counts),
        "replication_factor": pa.array(rf),
        "min_insync_replicas": pa.array(rows_t["min_isr"], pa.int32()),
        "unclean_leader_election": pa.array(rows_t["unclean"], pa.bool_()),
        "config": pa.array([_compact(m.config) for m in metas], pa.string()),
        "leader_throttled_replicas": pa.array([m.config.get(LEADER_THROTTLED_REPLICAS) for m in metas], pa.string()),
        "follower_throttled_replicas": pa.array([m.config.get(FOLLOWER_THROTTLED_REPLICAS) for m in metas],
                                                pa.string()),
        "queued_for_deletion": pa.array([n in deleting for n in kept], pa.bool_()),
    }, schema=sio.TOPICS_SCHEMA)

    # Brokers: registered ones plus every id named by an assignment, ISR, leader or reassignment target.
    named = [partitions.column(c).combine_chunks().flatten().to_numpy(zero_copy_only=False)
             for c in ("replicas", "adding_replicas", "removing_replicas", "isr")]
    named.append(partitions.column("leader").to_numpy())
    named.append(np.array([b for e in s.reassignment for b in e.replicas], dtype=np.int64))
    ids = np.unique(np.concatenate([x.astype(np.int64) for x in named] + [np.array(list(s.brokers), np.int64)]))
    ids = ids[ids >= 0]
    ctrl_id = s.controller["broker"]
    rows_b: dict[str, list] = {k: [] for k in sio.BROKERS_SCHEMA.names}
    for b in ids.tolist():
        reg, czxid = s.brokers.get(b, (None, -1))
        alive = b in s.brokers
        config = s.broker_configs.get(str(b), {})
        where = codec.broker_config_path(b)
        rates = []
        for k in (LEADER_THROTTLE_RATE, FOLLOWER_THROTTLE_RATE):
            try:
                rates.append(_int_config(config, k, where))
            except CodecError as e:
                if not s.lenient:
                    raise
                extra.append({"path": e.path, "problem": e.problem})
                rates.append(None)
        rows_b["broker"].append(b)
        rows_b["alive"].append(alive)
        rows_b["rack"].append(reg.rack if reg else None)
        rows_b["host"].append(reg.host if reg else None)
        rows_b["port"].append(reg.port if reg else -1)
        rows_b["endpoints"].append(list(reg.endpoints) if reg else [])
        rows_b["epoch"].append(czxid if alive else -1)
        rows_b["registration_version"].append(reg.version if reg else -1)
        rows_b["is_controller"].append(b == ctrl_id)
        rows_b["config"].append(_compact(config))
        rows_b["leader_throttle_rate"].append(rates[0])
        rows_b["follower_throttle_rate"].append(rates[1])
    brokers = pa.table(rows_b, schema=sio.BROKERS_SCHEMA)
    return brokers, topics, partitions, extra


# ------------------------------------------------------------------------------------------ top level
def take_snapshot(zk: str, out: Path | str, *, sizes: Path | str | None = None, lenient: bool = False,
                  timeout: float = 10.0, auth: tuple[str, str] | None = None, workers: int | None = None,
                  read_mode: str = "auto", max_rounds: int = MAX_ROUNDS,
                  progress: Progress | None = None) -> SnapshotResult:
    """Read the cluster at `zk` (HOST:PORT[/chroot]) into the snapshot folder `out`.

    Raises BadInput (exit 2) for unreachable ZooKeeper, a chroot without Kafka, denied reads, malformed
    znodes (unless `lenient`), a bad sizes file; KraftMigration (exit 1) for a cluster migrating to KRaft.
    On any error no manifest.json is written."""
    if read_mode not in ("auto", "multiread", "plain"):
        raise BadInput(f"read mode must be auto, multiread or plain, not {read_mode!r}")
    if workers is not None and workers < 1:
        raise BadInput("--workers must be at least 1")
    say = progress or (lambda msg: log.info(msg))
    target = zkmod.parse_connect(zk)
    size_data = logdirs.read_sizes(sizes) if sizes else None   # a bad file fails before ZooKeeper is touched
    started_wall = time.time()
    started = time.monotonic()
    s = _Snapshotter(target, auth, timeout, lenient, workers, read_mode, say)
    try:
        s.connect()
        s.read_all()
        s.check_kraft()
        say("checking for changes made while reading")
        s.settle(max_rounds)
        s.check_kraft()
    except NoAuthError:
        raise BadInput("ZooKeeper refused a read (NOAUTH): give digest credentials with --zk-auth-env") from None
    except NoNodeError as e:
        raise BadInput(f"a znode vanished while reading and could not be re-read: {e!r}") from None
    except (KazooTimeoutError, KazooException) as e:
        if isinstance(e, PlannerError):
            raise
        raise ZkUnavailable(f"ZooKeeper at {target.hosts} stopped answering during the snapshot: {e!r}") from None
    finally:
        s.close()
    say("building tables")
    brokers, topics, partitions, extra = _assemble(s)
    size_unmatched = 0
    if size_data is not None:
        partitions, size_unmatched = logdirs.merge_sizes(partitions, size_data)
    warnings = [w for key in sorted(s.warnings) for w in s.warnings[key]] + extra
    if size_unmatched:
        warnings.append({"path": str(sizes), "problem": f"{size_unmatched} replica sizes name partitions that are "
                                                        "not in the snapshot"})
    manifest = _manifest(s, target, brokers, topics, partitions, warnings, started_wall,
                         time.monotonic() - started, sizes is not None)
    path = sio.write_snapshot(out, manifest, brokers, topics, partitions)
    return SnapshotResult(path, manifest, brokers, topics, partitions)


def _manifest(s: _Snapshotter, target: zkmod.ZkTarget, brokers: pa.Table, topics: pa.Table,
              partitions: pa.Table, warnings: list[dict], started_wall: float, duration: float,
              with_sizes: bool) -> dict[str, Any]:
    has_state = partitions.column("has_state").to_numpy(zero_copy_only=False)
    leader = partitions.column("leader").to_numpy()
    rep_len = pc.list_value_length(partitions.column("replicas")).to_numpy(zero_copy_only=False)
    add_len = pc.list_value_length(partitions.column("adding_replicas")).to_numpy(zero_copy_only=False)
    isr_len = pc.list_value_length(partitions.column("isr")).to_numpy(zero_copy_only=False)
    alive = brokers.column("alive").to_numpy(zero_copy_only=False)
    fp = sio.assignment_fingerprint(partitions.column("topic"), partitions.column("partition").to_numpy(),
                                    partitions.column("replicas"))
    return {
        "source": {"zk": target.hosts, "chroot": target.chroot},
        "taken_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started_wall)),
        "duration_s": round(duration, 3),
        "zxid": {"min": s.zxid_min, "max": s.zxid_max},
        "controller": dict(s.controller),
        "counts": {
            "brokers": brokers.num_rows,
            "alive_brokers": int(alive.sum()),
            "topics": topics.num_rows,
            "partitions": partitions.num_rows,
            "replicas": int(rep_len.sum()),
            "offline": int((has_state & (leader < 0)).sum()),
            "under_replicated": int((has_state & (isr_len < rep_len - add_len)).sum()),
            "leaderless_new": int((~has_state).sum()),
        },
        "fingerprint": fp,
        "broker_defaults": s.broker_configs.get(codec.DEFAULT_BROKER_ENTITY, {}),
        "reassignment_in_flight": [{"topic": e.topic, "partition": e.partition, "replicas": list(e.replicas)}
                                   for e in s.reassignment],
        "preferred_election_pending": [{"topic": t, "partition": p} for t, p in s.preferred],
        "topics_queued_for_deletion": list(s.deleting),
        "consistency": {"rereads": s.rereads, "rounds": s.rounds, "consistent": s.consistent, "mode": s.mode},
        "sizes": "kafka-log-dirs" if with_sizes else None,
        "warnings": warnings,
    }
