"""ZooKeeper -> snapshot folder (docs/SNAPSHOT.md): the first step of every run.

Reads brokers, controller, topics, partition states, configs and the pending admin znodes of a
ZooKeeper-mode Kafka cluster, and writes them as Parquet columns plus a manifest. Nothing is ever written to
ZooKeeper. Built for size: partition data never becomes per-partition Python objects. Znodes are read with
ZooKeeper's multiRead, 1,000 per request (planner.zkbulk), decoded in bulk into arrays (planner.zkcolumns),
optionally in worker processes with their own sessions, and the tables are built from arrays.

Three parts: planner.snapshot_reader (the one interface to ZooKeeper: frozen records back),
planner.snapshot_assembly (pure: records -> tables and manifest), and this module, which runs the
consistency rounds between them.

Consistency (docs/SNAPSHOT.md "Consistency"): reads are not atomic, so before reading anything the snapshot
puts persistent recursive watches on the subtrees it reads (one-shot watches on every znode on servers older
than 3.6), and after each round a sync() barrier tells exactly which paths changed since the previous one.
Changed topics (their topic znode, config or any partition state) and changed brokers/admin/controller
znodes are re-read, and rounds repeat until a round sees no change: then every value is the cluster's state at
that barrier's zxid (`manifest.zxid.max`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from kazoo.exceptions import KazooException, NoAuthError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from planner import codec, kafka_admin, logdirs, maintenance_zk
from planner import maintenance as mt
from planner import snapshot_io as sio
from planner import zk as zkmod
from planner.cluster_reader import ClusterReader
from planner.errors import BadInput, KraftMigration, NextStep, PlannerError, SafetyRefusal, ZkUnavailable
from planner.snapshot_assembly import ClusterRead, Consistency, assemble, health, manifest
from planner.snapshot_reader import Problems, TopicRecord, ZkReader
from planner.zk_migration import Migration, classify

log = logging.getLogger(__name__)

MAX_ROUNDS = 10

Progress = Callable[[str], None]


class _Rounds:
    """The snapshot's view of the cluster, updated round by round from the reader's records."""

    def __init__(self, reader: ZkReader, problems: Problems):
        self.reader = reader
        self.problems = problems
        self.topics: dict[str, TopicRecord] = {}
        self.read: ClusterRead | None = None

    def read_all(self, say: Progress) -> None:
        r = self.reader
        say(f"reading cluster metadata from {r.target} ({r.mode})")
        controller, brokers, configs, admin = r.controller(), r.brokers(), r.broker_configs(), r.admin()
        in_maintenance = r.maintenance()
        names = r.topic_names()
        say(f"reading {len(names)} topics")
        self._apply_topics(names, parallel=True)
        self.read = ClusterRead(controller, brokers, configs, admin, dict(self.topics), maintenance=in_maintenance)

    def _apply_topics(self, names: list[str], parallel: bool = False) -> None:
        got = self.reader.topics(names, parallel=parallel)
        for name in got.gone:
            self.topics.pop(name, None)
        for rec in got.topics:
            self.topics[rec.name] = rec

    def settle(self, zxid_min: int, max_rounds: int) -> None:
        """Re-read whatever changed since it was read until a round sees no change (module docstring)."""
        base_reads = self.reader.reads
        rounds, consistent = 0, True
        while True:
            changed, zxid = self.reader.barrier()
            if not changed:
                break
            if rounds >= max_rounds:
                consistent = False
                sample = ", ".join(sorted(changed)[:5])
                self.problems.by_key.setdefault("consistency", []).append({
                    "path": "/",
                    "problem": f"the cluster kept changing: {len(changed)} znodes changed during the last of "
                               f"{max_rounds} re-read rounds (e.g. {sample}); the snapshot may mix states "
                               "from different moments",
                })
                break
            rounds += 1
            self._reread(changed)
        self.read = replace(self.read, topics=dict(self.topics), consistency=Consistency(
            rounds, self.reader.reads - base_reads, consistent, self.reader.mode, zxid_min, zxid))

    def _reread(self, changed: set[str]) -> None:
        topics: set[str] = set()
        relist = brokers = broker_configs = admin = controller = in_maintenance = False
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
            elif p == maintenance_zk.ROOT or p.startswith(maintenance_zk.ROOT + "/"):
                in_maintenance = True
        r, read = self.reader, self.read
        if controller:
            read = replace(read, controller=r.controller())
        if brokers:
            read = replace(read, brokers=r.brokers())
        if broker_configs:
            read = replace(read, broker_configs=r.broker_configs())
        if admin:
            read = replace(read, admin=r.admin())
        if in_maintenance:
            read = replace(read, maintenance=r.maintenance())
        if relist:
            current = set(r.topic_names())
            known = set(self.topics)
            topics |= current - known
            for gone in known - current:
                self.topics.pop(gone, None)
                self.problems.reset(f"topic:{gone}")
        topics = {t for t in topics if codec.is_valid_topic_name(t)}
        if topics:
            self._apply_topics(sorted(topics))
        self.read = read
        self.check_kraft()

    def check_kraft(self) -> Migration | None:
        """The migration state as read; refused (KraftMigration, naming it) once the KRaft controller leads."""
        c = self.read.controller
        m = classify(c.migration_znode if c.migration else None, c.broker, c.kraft_controller_epoch,
                     len(self.read.brokers))
        if m is not None and m.authoritative != "zookeeper":
            raise KraftMigration(m.read_refusal(), migration=m)
        return m


# ------------------------------------------------------------------------------------------ top level
SIZES_FROM = ("brokers", "none")


class ZkClusterReader:
    """ClusterReader (planner.cluster_reader) of a ZooKeeper-mode cluster: ZkReader's sessions and bulk reads,
    with the consistency rounds above. A cluster in ZooKeeper-to-KRaft migration (planner.zk_migration) is read
    through whichever side is authoritative: ZooKeeper in PRE_MIGRATION (the manifest's source says the
    state); in the hybrid phase, where the KRaft controller leads brokers still in ZooKeeper mode, through the
    Admin API of those brokers (planner.admin_reader, its source says so: backend kraft); refused, naming the
    state, during the initial metadata load and once no broker is left in ZooKeeper mode (dual-write or
    finalized: ZooKeeper knows no broker to ask; read through the bootstrap servers)."""

    backend = "zookeeper"

    def __init__(self, target: zkmod.ZkTarget, auth: tuple[str, str] | None, timeout: float, problems: Problems,
                 workers: int | None, read_mode: str, max_rounds: int,
                 kafka: kafka_admin.KafkaSecurity | None = None, kafka_timeout: float = 10.0):
        self.target, self.auth, self.timeout, self.problems = target, auth, timeout, problems
        self.workers, self.read_mode, self.max_rounds = workers, read_mode, max_rounds
        self.kafka, self.kafka_timeout = kafka or kafka_admin.KafkaSecurity(), kafka_timeout
        self.migration: Migration | None = None
        self.through: Any = None          # the Admin API reader a hybrid migration is read through

    def source(self) -> dict[str, Any]:
        if self.through is not None:
            return {**self.through.source(), "zk": self.target.hosts, "chroot": self.target.chroot}
        out: dict[str, Any] = {"zk": self.target.hosts, "chroot": self.target.chroot}
        if self.migration is not None:     # PRE_MIGRATION: ZooKeeper still authoritative (planner.zk_migration)
            out["migration"] = self.migration.as_manifest()
        return out

    def _hybrid(self, reader: ZkReader, e: KraftMigration) -> str | None:
        """The bootstrap servers of the brokers still registered in ZooKeeper when the KRaft controller leads a
        hybrid migration (those answer the Admin API with its metadata), else None."""
        m = e.migration
        if m is None or m.phase != "hybrid" or reader.client is None:
            return None
        servers = []
        for b in sorted(reader.client.get_children(codec.BROKER_IDS), key=lambda x: (len(x), x)):
            try:
                reg = codec.decode_broker(int(b), reader.client.get(codec.broker_path(int(b)))[0])
            except (NoNodeError, ValueError, PlannerError):
                continue
            ep = kafka_admin.pick_endpoint(list(reg.endpoints), reg.listener_security_protocol_map, self.kafka)
            if ep:
                servers.append(ep)
        return ",".join(servers) or None

    def read_cluster(self, say: Progress) -> ClusterRead:
        reader = ZkReader(self.target, self.auth, self.timeout, self.problems, self.workers, self.read_mode, say)
        rounds = _Rounds(reader, self.problems)
        hybrid: tuple[KraftMigration, str] | None = None
        znodes: dict[int, mt.Entry] = {}
        try:
            try:
                zxid_min = reader.connect()
            except ZkUnavailable:
                self._refuse_kafka_address()
                raise
            except KraftMigration as e:
                servers = self._hybrid(reader, e)
                if servers is None:
                    self._refuse_with_maintenance(reader, e)
                    raise
                hybrid = (e, servers)
                assert reader.client is not None
                # kplan's own state stays in ZooKeeper: the ZooKeeper-mode apply, verify and roll wrote it there
                znodes = dict(maintenance_zk.read_all(reader.client).entries)
            if hybrid is None:
                self._read_zookeeper(reader, rounds, zxid_min, say)
        except NoAuthError:
            raise BadInput("ZooKeeper refused a read (NOAUTH): give digest credentials (auth)") from None
        except NoNodeError as e:
            raise ZkUnavailable(f"a znode vanished while reading and could not be re-read ({e!r}); run the "
                                "snapshot again") from None
        except (KazooTimeoutError, KazooException) as e:
            if isinstance(e, PlannerError):
                raise
            raise ZkUnavailable(f"ZooKeeper at {self.target.hosts} stopped answering during the snapshot: "
                                f"{e!r}") from None
        finally:
            reader.close()
        if hybrid is not None:
            return self._read_hybrid(*hybrid, znodes, say)
        assert rounds.read is not None
        return rounds.read

    def _read_zookeeper(self, reader: ZkReader, rounds: _Rounds, zxid_min: int, say: Progress) -> None:
        rounds.read_all(say)
        rounds.check_kraft()
        say("checking for changes made while reading")
        rounds.settle(zxid_min, self.max_rounds)
        self.migration = rounds.check_kraft()

    def _refuse_with_maintenance(self, reader: ZkReader, e: KraftMigration) -> None:
        """ZooKeeper is not read (e's refusal): when it holds brokers' maintenance state, the refusal says so and
        how to carry it into __kplan, where a read through the bootstrap servers finds it."""
        if reader.client is None:
            return
        entries = maintenance_zk.read_all(reader.client).entries
        if entries:
            named = ", ".join(f"broker {b} {x.state}" for b, x in sorted(entries.items()))
            raise KraftMigration(
                f"{e}; ZooKeeper also holds kplan's maintenance state ({named}), which a read through the "
                "bootstrap servers shows only once carried into __kplan",
                migration=e.migration, next_steps=(*e.next_steps, NextStep("maintenance carry", "copies it"))
                ) from None

    def _read_hybrid(self, e: KraftMigration, servers: str, znodes: dict[int, mt.Entry],
                     say: Progress) -> ClusterRead:
        from planner.admin_reader import AdminClusterReader

        self.migration = e.migration
        say(f"this cluster is in {e.migration.describe()}: reading it through the Admin API at {servers}")
        self.through = AdminClusterReader(servers, self.kafka, self.kafka_timeout, self.problems,
                                          migration=e.migration)
        try:
            read = self.through.read_cluster(say)
        finally:
            self.through.close()
        in_maintenance = migration_maintenance(znodes, read.maintenance)
        missing = sorted(b for b in in_maintenance if b not in read.maintenance)
        if missing:
            self.problems.by_key.setdefault("maintenance", []).append({
                "path": maintenance_zk.ROOT, "problem": f"brokers {missing} are in maintenance in ZooKeeper only: "
                "once the brokers leave ZooKeeper mode the cluster is read through its bootstrap servers, which "
                "see only the __kplan topic; as soon as they run in KRaft mode (dual-write), before planning, "
                f"carry the states into __kplan (the maintenance carry step, from ZooKeeper {self.target.hosts} "
                f"to the brokers' bootstrap servers, e.g. {servers})"})
        return replace(read, maintenance=in_maintenance)

    def close(self) -> None:
        pass

    def _refuse_kafka_address(self) -> None:
        """ZooKeeper did not answer: if a Kafka broker answers there, say so in one line (planner.probe)."""
        from planner import probe

        for hostport in self.target.hosts.split(","):
            addr = probe.split(hostport)
            if addr and probe.is_kafka(*addr):
                raise BadInput(f"ZooKeeper connect string {hostport} names a Kafka broker, not ZooKeeper: read a KRaft "
                               "cluster through its bootstrap servers")


def migration_maintenance(znodes: dict[int, mt.Entry], records: dict[int, mt.Entry]) -> dict[int, mt.Entry]:
    """The brokers' maintenance state of a cluster in ZooKeeper-to-KRaft migration read with `--zk`: the znodes
    (planner.maintenance_zk), where every ZooKeeper-mode apply, verify and roll wrote it and which nothing can
    change during the migration (maintenance_zk refuses). `__kplan` records (planner.maintenance_kraft) only
    exist there once carried (`kplan maintenance carry`, a copy of the znodes) or written through the bootstrap
    servers since: equal to the znodes (same state and plan, broker by broker) they are the same state; a record
    that differs (a broker in service in ZooKeeper included) is refused, naming the brokers, rather than guessed:
    either side may be the newer one. A znode without a record is the state not carried yet: the znode's."""
    differ = [b for b in sorted(records) if _key(znodes.get(b)) != _key(records[b])]   # none carried: the znodes
    if differ:
        sides = "; ".join(f"broker {b}: {_said(znodes.get(b))} in ZooKeeper, {_said(records.get(b))} in __kplan"
                          for b in differ)
        raise SafetyRefusal(
            f"the brokers' maintenance state differs between ZooKeeper (/kplan/maintenance) and the __kplan "
            f"topic ({sides}); a plan made from either could refill a drained broker or keep a returned one "
            "empty: make them agree and take the snapshot again; nothing was written",
            next_steps=(NextStep("maintenance clear", "clears a broker's state on the side it is run on",
                                 tuple(differ)), NextStep("brokers", "shows each side's states")))
    return dict(znodes)


def _key(e: mt.Entry | None) -> tuple[str, str | None] | None:
    return None if e is None else (e.state, e.plan_id)


def _said(e: mt.Entry | None) -> str:
    return "in service" if e is None else e.state + (f" (plan {e.plan_id[:19]}…)" if e.plan_id else "")


def take_snapshot(zk: str | None, out: Path | str, *, sizes: Path | str | None = None, lenient: bool = False,
                  timeout: float = 10.0, auth: tuple[str, str] | None = None, workers: int | None = None,
                  read_mode: str = "auto", max_rounds: int = MAX_ROUNDS,
                  progress: Progress | None = None, sizes_from: str = "brokers",
                  kafka: kafka_admin.KafkaSecurity | None = None, partial_sizes: bool = False,
                  kafka_timeout: float = 10.0, bootstrap: str | None = None) -> sio.Snapshot:
    """Read the cluster at `zk` (HOST:PORT[/chroot], ZooKeeper mode) or at `bootstrap` (HOST:PORT[,...], a
    KRaft cluster read through the Admin API only: planner.admin_reader) into the snapshot folder `out`, with
    every replica's size and each broker's disk capacity read from the brokers themselves (DescribeLogDirs at
    the endpoints their registrations give, with `kafka`'s security settings: docs/SNAPSHOT.md "Sizes"),
    unless `sizes` (a kafka-log-dirs.sh --describe file: the override) or `sizes_from="none"` (count-only,
    said so). Both backends go through one ClusterReader (planner.cluster_reader) into the same assembly.

    Raises BadInput (exit 2) for a chroot without Kafka, denied reads, malformed znodes (unless `lenient`),
    a bad sizes file, a registered broker whose sizes cannot be read or a log dir in error (unless
    `partial_sizes`: then named in the warnings), rejected Kafka credentials; ZkUnavailable / KafkaUnavailable
    (retryable) for an unreachable ZooKeeper or Kafka, or a lost session; KraftMigration (exit 1) for a
    cluster migrating to KRaft. On any error no manifest.json is written."""
    if (zk is None) == (bootstrap is None):
        raise BadInput("give either a ZooKeeper connect string or Kafka bootstrap servers, not both")
    if sizes_from not in SIZES_FROM:
        raise BadInput(f"sizes_from must be one of {', '.join(SIZES_FROM)}, not {sizes_from!r}")
    if read_mode not in ("auto", "multiread", "plain"):
        raise BadInput(f"read_mode must be auto, multiread or plain, not {read_mode!r}")
    if workers is not None and workers < 1:
        raise BadInput(f"workers must be at least 1, got {workers}")
    say = progress or (lambda msg: log.info("%s", msg))
    reader: ClusterReader
    problems = Problems(lenient)
    if zk is not None:
        reader = ZkClusterReader(zkmod.parse_connect(zk), auth, timeout, problems, workers, read_mode, max_rounds,
                                 kafka, kafka_timeout)
    else:
        from planner.admin_reader import AdminClusterReader

        reader = AdminClusterReader(check_bootstrap(bootstrap), kafka, kafka_timeout, problems)
    size_data = logdirs.read_sizes(sizes) if sizes else None   # a bad file fails before the cluster is asked
    if kafka is not None and kafka.protocol.endswith("SSL") and (bootstrap or (size_data is None and sizes_from == "brokers")):
        kafka.ssl_context()           # so do missing or unreadable TLS files, and a wrong key password
    started_wall = time.time()
    started = time.monotonic()
    try:
        read = reader.read_cluster(say)
    finally:
        reader.close()
    say("building tables")
    tables = assemble(read, lenient)
    partitions = tables.partitions
    size_unmatched = 0
    foreign: dict[int, int] = {}
    if size_data is not None:
        foreign = logdirs.foreign_brokers(size_data, set(tables.brokers.column("broker").to_pylist()))
        partitions, size_unmatched = logdirs.merge_sizes(partitions, size_data, set(foreign))
        used = len(size_data.topic) - sum(foreign.values())
        if len(size_data.topic) and (used == 0 or size_unmatched == used):
            raise BadInput(f"sizes file {sizes} names none of the cluster's partitions"
                           + (f" on its brokers (it has sizes from broker(s) {sorted(foreign)} only)" if foreign
                              else "") + " (from another cluster?)")
        tables = replace(tables, partitions=partitions)
    from_brokers = None
    if size_data is None and sizes_from == "brokers":
        tables, from_brokers, size_warnings = _sizes_from_brokers(read, tables, kafka or kafka_admin.KafkaSecurity(),
                                                                  partial_sizes, kafka_timeout, say)
        partitions = tables.partitions
    state = health(read, tables)
    warnings = problems.all() + list(tables.warnings) + list(state.warnings)
    if from_brokers is not None:
        warnings.extend(size_warnings)
    if foreign:
        warnings.append({"path": str(sizes), "problem": "sizes from broker(s) the cluster does not know, not used: "
                         + ", ".join(f"{b} ({n} replica sizes)" for b, n in sorted(foreign.items()))
                         + " (a file from another cluster, or an old one?)"})
    if size_unmatched:
        warnings.append({"path": str(sizes), "problem": f"{size_unmatched} replica sizes name partitions that are "
                                                        "not in the snapshot"})
    m = manifest(read, reader.source(), tables, state, warnings, started_wall, time.monotonic() - started,
                 sizes is not None)
    if from_brokers is not None:
        m["sizes"] = "brokers"
        m["log_dirs"] = from_brokers
    path = sio.write_snapshot(out, m, tables.brokers, tables.topics, partitions)
    return sio.Snapshot(path, m, tables.brokers, tables.topics, partitions)


def check_bootstrap(bootstrap: str | None) -> str:
    """HOST:PORT[,HOST:PORT...]: each entry a host and a port; a ZooKeeper chroot (`/kafka`) is refused
    here, before anything is asked (the other address mix-ups are told by what answers: admin_reader)."""
    text = (bootstrap or "").strip()
    servers = [x.strip() for x in text.split(",") if x.strip()]
    if not servers:
        raise BadInput("Kafka bootstrap servers are HOST:PORT[,HOST:PORT...]; none was given")
    for sv in servers:
        host, sep, port = sv.rpartition(":")
        if "/" in sv:
            raise BadInput(f"bootstrap server {sv!r} has a path: a ZooKeeper connect string with a chroot? Kafka "
                           "bootstrap servers are HOST:PORT")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise BadInput(f"bootstrap server {sv!r} is not HOST:PORT")
    return ",".join(servers)


def _sizes_from_brokers(read: ClusterRead, tables, security: kafka_admin.KafkaSecurity, partial: bool,
                        timeout: float, say: Progress) -> tuple[Any, dict[str, Any], list[dict[str, str]]]:
    """DescribeLogDirs from every registered broker (docs/SNAPSHOT.md "Sizes"): the tables with replica sizes
    and disk figures, the manifest's `log_dirs` section, and warnings naming every gap."""
    endpoints: dict[int, str | None] = {}
    for b in read.brokers:
        if b.fenced:         # KRaft: registered but fenced (down): not asked, like an unregistered broker
            continue
        reg = b.registration
        endpoints[b.id] = kafka_admin.pick_endpoint(list(reg.endpoints), reg.listener_security_protocol_map,
                                                    security) if reg is not None else None
    say(f"reading log dirs (sizes, capacity) from {len(endpoints)} brokers over {security.describe()}")
    report = kafka_admin.describe_log_dirs(endpoints, security, timeout)
    denied = [r for r in report.values() if r.status == "auth-failed"]
    if denied:
        # the broker whose answer carries Kafka's own reason, if one does (the others closed before it was read)
        r = next((x for x in denied if not (x.error or "").startswith("the broker closed")), denied[0])
        raise BadInput(f"Kafka broker {r.broker} at {r.endpoint} refused {security.describe()}: {r.error}"
                       + (f" (and {len(denied) - 1} more brokers)" if len(denied) > 1 else "")
                       + "; check the Kafka credentials (kafka security settings)")
    tls = [r for r in report.values() if r.status == "tls-failed"]
    if tls:
        r = tls[0]
        raise BadInput(f"TLS with Kafka broker {r.broker} at {r.endpoint} failed over {security.describe()}: "
                       f"{r.error}" + (f" (and {len(tls) - 1} more brokers)" if len(tls) > 1 else ""))
    unread = [r for r in report.values() if r.status != "ok"]
    in_error = [(r.broker, d) for r in report.values() for d in r.dirs if d["error"]]
    answered = [r for r in report.values() if r.status == "ok"]
    if endpoints and not answered:
        first = unread[0]
        raise BadInput(f"no registered broker answered DescribeLogDirs over {security.describe()} (broker "
                       f"{first.broker} at {first.endpoint or 'no endpoint'}: {first.error}"
                       + (f"; {len(unread) - 1} more" if len(unread) > 1 else "") + "): check the security "
                       "protocol / listener, or snapshot with a sizes file (sizes) or sizes_from=\"none\"")
    gaps = [f"broker {r.broker} ({r.endpoint or 'no endpoint'}): {r.status}, {r.error}" for r in unread]
    gaps += [f"broker {b} log dir {d['dir']}: {d['error']}" for b, d in in_error]
    if gaps and not partial:
        raise BadInput(f"sizes from the brokers are incomplete: {'; '.join(gaps[:8])}"
                       + (f"; and {len(gaps) - 8} more" if len(gaps) > 8 else "")
                       + ". Snapshot anyway with partial_sizes (each replica there then takes its size from "
                         "another replica of the partition, and those brokers' capacity is unknown)")
    partitions, figures = logdirs.replica_sizes_from_brokers(tables.partitions, report)
    brokers = logdirs.disk_from_brokers(tables.brokers, report)
    warnings = [{"path": "DescribeLogDirs", "problem": g} for g in gaps]
    registered = {b.id for b in read.brokers if not b.fenced}
    dead = [int(b) for b in brokers.column("broker").to_pylist() if b not in registered]
    if dead:
        warnings.append({"path": "DescribeLogDirs", "problem": f"brokers {dead[:20]} are not registered: their "
                         "replicas take their sizes from other replicas of the same partitions"})
    if figures["partitions_size_unknown"]:
        warnings.append({"path": "DescribeLogDirs", "problem": f"{figures['partitions_size_unknown']} partitions "
                         "have no replica whose size could be read: their size is unknown"})
    old = sorted(r.broker for r in answered if (r.api_version or 0) < 4)
    if old:
        warnings.append({"path": "DescribeLogDirs", "problem": f"brokers {old[:20]} answer DescribeLogDirs below "
                         "v4 (Kafka older than 3.3): their disk capacity is unknown"})
    section = {
        "source": "DescribeLogDirs", "security_protocol": security.protocol,
        "api_versions": sorted({r.api_version for r in answered if r.api_version is not None}),
        "brokers_answered": len(answered),
        "unanswered": [{"broker": r.broker, "endpoint": r.endpoint, "status": r.status, "error": r.error}
                       for r in unread],
        "dirs_in_error": [{"broker": b, "dir": d["dir"], "error": d["error"]} for b, d in in_error],
        **figures,
    }
    return replace(tables, partitions=partitions, brokers=brokers), section, warnings
