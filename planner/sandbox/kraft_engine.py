"""The `kraft` sandbox engine: real Apache Kafka KRaft nodes (4.1.1 by default), no ZooKeeper.

Default layout (`separate`): one controller node (`process.roles=controller`, node id 1000 or above, past every
broker id) plus one broker node per described broker, so any broker can be killed without losing the quorum.
Layout `combined` (Kafka's combined mode): no controller node; every broker node is also a voter
(`process.roles=broker,controller`), so killing the active controller's node moves the quorum's leadership, and
the quorum holds while a majority of the brokers runs. Every
process detail is the `kafka` engine's (planner/sandbox/kafka_engine.py): D/sandbox.json records each node's
folder, port, pid and state under a file lock, JVMs run in their own sessions and are found again by pid and
command line, `down` works after the process that ran `up` was killed.

Up: a cluster id, every node's log dir formatted (StorageTool), the controller then the brokers started, and
once every broker is registered and unfenced, each topic is created through the Admin API (CreateTopics with
the description's exact replica assignment and its config); the controller (ReplicationControlManager
.createTopic) makes the first live replica the leader and every replica the ISR. Data is then produced as
for the `kafka` engine.

Waiting reads the cluster through the Admin API only (DescribeCluster for registered and fenced brokers,
DescribeTopicPartitions for leaders, ISR and ELR, ListPartitionReassignments), with deadlines: a kill
returns once the controller fenced the killed brokers (after `broker.session.timeout.ms` without a
heartbeat) and no partition is led by them any more; `wait_settled` once every replica on an unfenced broker
is back in its ISR and no reassignment runs. Each condition must read the same twice in a row (metadata
reaches the brokers asynchronously).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.cluster import Cluster
from planner.errors import BadInput, KafkaUnavailable
from planner.kafka import broker as kbroker
from planner.kafka import kraft
from planner.kafka.tls import broker_settings as tls_settings
from planner.sandbox.kafka_engine import (
    _CHILDREN,
    KAFKA_DIR,
    RUNNING,
    STOPPED,
    KafkaEngine,
    read_info,
    write_info,
)
from planner.zkserver import free_port

log = logging.getLogger("planner.sandbox.kraft")

CONTROLLER_BASE_ID = 1000


def check_reproducible_kraft(desc: Cluster) -> None:
    """What the kafka engine refuses, and what KRaft adds: CreateTopics with a manual assignment needs every
    named broker registered (ReplicationControlManager.validateManualPartitionAssignment), so a broker
    described as not alive cannot hold replicas at creation; start it, and kill or stop it afterwards."""
    from planner.sandbox.kafka_engine import check_reproducible

    check_reproducible(desc)
    dead = sorted(b.id for b in desc.brokers if not b.alive)
    if dead:
        raise BadInput(f"the kraft engine starts every described broker (brokers {dead} are described as not "
                       "alive): KRaft creates topics only on registered brokers; kill or stop them after up")
    if any(b.disk_bytes for b in desc.brokers):
        raise BadInput("disk_bytes (a log-dir volume per broker) is an option of the kafka engine only, for now")
    big = [b.id for b in desc.brokers if b.id >= CONTROLLER_BASE_ID]
    if big:
        raise BadInput(f"broker ids {big} collide with the kraft engine's controller ids ({CONTROLLER_BASE_ID}+): "
                       f"describe brokers with ids below {CONTROLLER_BASE_ID}")


LAYOUTS = ("separate", "combined")


def node_records(directory: Path, desc: Cluster, controllers: int, sasl: bool, ssl: bool,
                 layout: str = "separate") -> dict[str, Any]:
    """Each node's folder and ports. `separate`: `controllers` controller nodes (ids 1000...) beside the
    brokers. `combined`: no controller node; every broker node is a voter too (`process.roles=broker,controller`,
    its own CONTROLLER port), so the quorum holds while a minority of the brokers is down."""
    if layout not in LAYOUTS:
        raise BadInput(f"unknown KRaft layout {layout!r} (known: {', '.join(LAYOUTS)})")
    combined = layout == "combined"
    brokers = {}
    for b in desc.brokers:
        brokers[str(b.id)] = {"dir": str(directory / KAFKA_DIR / f"broker-{b.id}"), "port": free_port(),
                              "rack": b.rack, "pid": None, "state": STOPPED,
                              "sasl_port": free_port() if sasl else None, "ssl_port": free_port() if ssl else None,
                              "disk_bytes": None, "controller_port": free_port() if combined else None}
    ctrls = {}
    for k in range(0 if combined else controllers):
        cid = CONTROLLER_BASE_ID + k
        ctrls[str(cid)] = {"dir": str(directory / KAFKA_DIR / f"controller-{cid}"), "port": free_port(),
                           "rack": None, "pid": None, "state": STOPPED}
    return {"brokers": brokers, "controllers": ctrls, "layout": layout}


# ----------------------------------------------------------------------------------------- the view
@dataclass
class KView:
    """What the Admin API shows at one moment (a few requests: not atomic, so waits re-check)."""

    brokers: dict[int, bool]                      # registered broker -> fenced
    partitions: dict[tuple[str, int], dict]       # kraft_admin.describe_topic_partitions
    reassigning: dict[tuple[str, int], dict]      # adding / removing replicas

    @property
    def live(self) -> set[int]:
        return {b for b, fenced in self.brokers.items() if not fenced}

    def fingerprint(self) -> tuple:
        return (tuple(sorted(self.brokers.items())),
                tuple(sorted((k, v.get("leader"), v.get("leader_epoch"), tuple(v.get("isr") or ()))
                             for k, v in self.partitions.items())),
                tuple(sorted(self.reassigning)))


def read_kview(admin: Any, topics: Iterable[str] | None = None) -> KView:
    from planner import kraft_admin as ka

    brokers = {b: d["fenced"] for b, d in ka.brokers(admin).items()}
    parts = ka.describe_topic_partitions(admin, topics)
    reassigning = {(tp.topic, tp.partition): r for tp, r in admin.list_partition_reassignments().items()}
    return KView(brokers, parts, reassigning)


def kpending(v: KView, catch_up: bool = True, gone: Iterable[int] = ()) -> list[str]:
    """What the controller (and, with catch_up, the replicas) still have to do, as the Admin API shows it:
    - a broker in `gone` (just killed or stopped) is fenced or unregistered;
    - no partition is led by a broker that is fenced or unregistered, and none is leaderless while a member
      of its ISR is live (an election is still to come);
    - an ISR holds a fenced broker only in a leaderless partition (ReplicationControlManager.handleBrokerFenced
      takes the broker out of every ISR it can: PartitionChangeBuilder keeps the last member of a partition
      that loses its leader, unless ELR moves it there);
    - with catch_up: every replica on an unfenced broker is in the ISR of a led partition, and no
      reassignment runs.
    Unclean elections are not waited for: KRaft runs them from a periodic task, not on the fencing event."""
    out: list[str] = []
    live = v.live
    for b in gone:
        if b in live:
            out.append(f"broker {b} still unfenced")
    if not live:
        return out
    for (t, p), st in v.partitions.items():
        if st.get("error"):
            out.append(f"{t}-{p}: {st['error']}")
            continue
        leader, isr, reps = st["leader"], st["isr"], st["replicas"]
        if leader >= 0 and leader not in live:
            out.append(f"{t}-{p}: leader {leader} is fenced")
        elif leader < 0 and any(r in live for r in isr):
            out.append(f"{t}-{p}: offline with a live ISR member")
        dead_isr = [r for r in isr if r not in live]
        if dead_isr and leader >= 0:
            out.append(f"{t}-{p}: ISR {isr} holds fenced brokers")
        if catch_up and leader >= 0:
            if any(r in live and r not in isr for r in reps):
                out.append(f"{t}-{p}: replicas catching up")
        if len(out) > 50:
            break
    if catch_up:
        out.extend(f"{t}-{p}: reassigning" for (t, p) in list(v.reassigning)[:10])
    return out


# --------------------------------------------------------------------------------------- the engine
class KraftEngine(KafkaEngine):
    """The kafka engine's process handling, with KRaft nodes and Admin API waits instead of ZooKeeper."""

    def controller_records(self) -> dict[int, Any]:
        from planner.sandbox.kafka_engine import BrokerRecord

        return {int(c): BrokerRecord.from_info(c, d) for c, d in self.kinfo.get("controllers", {}).items()}

    @property
    def combined(self) -> bool:
        return self.kinfo.get("layout") == "combined"

    @property
    def quorum(self) -> kraft.Quorum:
        if self.combined:
            return kraft.Quorum({int(b): int(d["controller_port"]) for b, d in self.kinfo["brokers"].items()})
        return kraft.Quorum({c: r.port for c, r in self.controller_records().items()})

    def broker_node_properties(self, rec: Any) -> str:
        """A broker node's server.properties: a plain broker, or broker and voter in the combined layout."""
        port = self.kinfo["brokers"][str(rec.id)].get("controller_port") if self.combined else None
        return kraft.broker_properties(self.spec(rec), self.quorum, port)

    def node_settings(self) -> dict[str, str]:
        t = self.timing
        settings = kraft.timing_settings(t.session_timeout, t.auto_rebalance, t.rebalance_interval,
                                         t.imbalance_pct, t.unclean_default)
        extra = self.kinfo.get("extra_settings", {})
        settings.update({k: v for k, v in extra.items() if not isinstance(v, dict)})
        return settings

    def spec(self, rec: Any) -> kbroker.BrokerSpec:
        settings = self.node_settings()
        settings.update(self.kinfo.get("extra_settings", {}).get(str(rec.id), {}))
        sasl = self.kinfo.get("sasl") or {}
        tls = self.kinfo.get("ssl")
        ports = self.kinfo["brokers"][str(rec.id)]
        return kbroker.BrokerSpec(rec.id, rec.dir, rec.port, "", rec.rack, int(self.kinfo.get("heap_mb", 256)),
                                  settings, sasl_port=ports.get("sasl_port"),
                                  sasl_users={sasl["username"]: sasl["password"]} if sasl else {},
                                  ssl_port=ports.get("ssl_port") if tls else None,
                                  ssl_settings=tls_settings(tls) if tls else {})

    def _write_node_configs(self) -> list[Path]:
        dirs = []
        quorum = self.quorum
        for cid, rec in self.controller_records().items():
            kraft.write_node(rec.dir, kraft.controller_properties(cid, rec.port, rec.dir / "data", quorum,
                                                                  self.node_settings()))
            dirs.append(rec.dir)
        for rec in self.records().values():
            kraft.write_node(rec.dir, self.broker_node_properties(rec))
            dirs.append(rec.dir)
        return dirs

    def _launch_nodes(self, recs: list[Any], controllers: bool = False) -> None:
        cp = self.jars().classpath
        heap = int(self.kinfo.get("heap_mb", 256))
        for rec in recs:
            if not controllers:   # a restarted broker: its config again (the quorum's ports do not change)
                kraft.write_node(rec.dir, self.broker_node_properties(rec))
            proc = kraft.launch(rec.dir, heap, cp)
            _CHILDREN[proc.pid] = proc
            key = "controllers" if controllers else "brokers"
            with _locked_info(self) as info:
                info["kafka"][key][str(rec.id)].update(pid=proc.pid, state=RUNNING)
            log.info("%s %d: JVM %d started (port %d)", key[:-1], rec.id, proc.pid, rec.port)

    def _launch(self, recs: list[Any]) -> None:
        self._launch_nodes(recs)

    def _watched(self, ids: Iterable[int]) -> list[tuple[str, Any]]:
        """The brokers a wait watches, and every controller."""
        return super()._watched(ids) + [("controller", r) for r in self.controller_records().values()]

    def _kwait(self, what: str, timeout: float, check: Callable[[KView], list[str]], stable: int = 2,
               watch: Iterable[int] = ()) -> tuple[KView, float]:
        """Poll the Admin API until `check` finds nothing left, `stable` reads in a row (KafkaEngine._settle);
        a read the Admin API does not answer is pending, with a new client for the next read."""
        from kafka.errors import KafkaError

        from planner import kraft_admin as ka

        admin: Any = None

        def look() -> tuple[KView | None, list[str], Any]:
            nonlocal admin
            try:
                if admin is None:
                    admin = ka.connect(self.bootstrap or self._any_bootstrap(), timeout=5)
                v = read_kview(admin)
                return v, check(v), v.fingerprint()
            except (KafkaError, KafkaUnavailable, OSError) as e:
                if admin is not None:
                    admin.close()
                    admin = None
                return None, [f"the Admin API did not answer ({type(e).__name__})"], None

        try:
            return self._settle(what, timeout, look, stable, watch)
        finally:
            if admin is not None:
                admin.close()

    def _any_bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{r.port}" for r in self.records().values())

    # ---------------------------------------------------------------------------------------- up
    def bring_up(self, desc: Cluster, sizes: dict[tuple[str, int], int], timeout: float) -> dict[str, Any]:
        from planner.kafka import data as kdata

        started = time.monotonic()
        dirs = self._write_node_configs()
        kraft.format_storage(dirs, self.kinfo["cluster_id"], self.jars().classpath)
        formatted_s = time.monotonic() - started
        self._launch_nodes(list(self.controller_records().values()), controllers=True)
        ids = [b.id for b in desc.brokers]
        recs = self.records()
        self._launch_nodes([recs[b] for b in ids])
        self._kwait("brokers registering", timeout,
                    lambda v: [f"broker {b} not registered and unfenced" for b in ids if b not in v.live],
                    stable=1, watch=ids)
        registered_s = time.monotonic() - started
        self._create_topics(desc, timeout)
        self._kwait("partitions created", timeout, lambda v: self._created(v, desc) + kpending(v), watch=ids)
        created_s = time.monotonic() - started
        written = kdata.produce(self.bootstrap, sizes) if any(sizes.values()) else {}
        self._kwait("replicas catching up", timeout, kpending, watch=ids)
        return {"formatted_s": round(formatted_s, 2), "registered_s": round(registered_s, 2),
                "topics_s": round(created_s, 2), "up_s": round(time.monotonic() - started, 2),
                "records": sum(written.values()), "bytes": sum(sizes.values())}

    @staticmethod
    def _created(v: KView, desc: Cluster) -> list[str]:
        return [f"{t.name}-{i} not created yet" for t in desc.topics for i in range(len(t.partitions))
                if (t.name, i) not in v.partitions][:20]

    def _create_topics(self, desc: Cluster, timeout: float) -> None:
        """CreateTopics with each topic's exact assignment and config (the Admin API's path; the controller
        validates and creates them: ReplicationControlManager.createTopic)."""
        from kafka.admin import NewTopic

        from planner import kraft_admin as ka

        if not desc.topics:
            return
        admin = ka.connect(self.bootstrap, timeout=30)
        try:
            new = [NewTopic(t.name, -1, -1, replica_assignments={i: list(p.replicas) for i, p in enumerate(t.partitions)},
                            topic_configs={k: str(v) for k, v in (t.config or {}).items()}) for t in desc.topics]
            for i in range(0, len(new), 100):
                admin.create_topics(new[i:i + 100], timeout_ms=int(timeout * 1000))
        finally:
            admin.close()
        log.info("created %d topics (%d partitions) through the Admin API", len(desc.topics), desc.num_partitions)

    # ----------------------------------------------------------------------------------- commands
    def _await_gone(self, ids: list[int], what: str, timeout: float) -> None:
        self._kwait(what, timeout, lambda v: kpending(v, catch_up=False, gone=ids), watch=self.pids())

    def _shutdown_report(self, server_log: Path, offset: int) -> dict[str, Any]:
        """SIGTERM makes a KRaft broker ask the controller for a controlled shutdown through its heartbeats
        (BrokerLifecycleManager: wantShutDown); it exits once the controller let it go."""
        return kraft_shutdown_report(server_log, offset)

    def start(self, ids: list[int], timeout: float) -> dict[str, Any]:
        ids = self._ids(ids, STOPPED)
        recs = self.records()
        self._launch([recs[b] for b in ids])
        self._kwait(f"brokers {ids} registering", timeout,
                    lambda v: [f"broker {b} not unfenced" for b in ids if b not in v.live]
                    + kpending(v, catch_up=False), watch=ids)
        return {"started": ids, "epochs": {}}

    def wait_settled(self, timeout: float) -> dict[str, Any]:
        self._kwait("settling", timeout, kpending, watch=self.pids())
        return self.status()

    # ------------------------------------------------------------------------------------- status
    def status(self, limit: int = 1000) -> dict[str, Any]:
        from planner import kraft_admin as ka

        recs = self.records()
        admin = ka.connect(self.bootstrap or self._any_bootstrap(), timeout=10)
        try:
            v = read_kview(admin)
            controller = ka.active_controller(admin)
            features = ka.finalized_features(admin)
            min_isr = _min_isr(admin, sorted({t for t, _ in v.partitions}))
        finally:
            admin.close()
        left = kpending(v, catch_up=True)
        brokers = []
        for b, r in sorted(recs.items()):
            alive = r.state == RUNNING and r.process_alive
            brokers.append({"id": b, "rack": r.rack, "running": alive,
                            "state": r.state if alive or r.state != RUNNING else "crashed", "shutting_down": False,
                            "fenced": v.brokers.get(b), "registered_for_controller": b in v.brokers,
                            "pid": r.pid if alive else None, "port": r.port})
        offline, under, under_min = [], [], []
        n_off = n_under = n_min = 0
        for (t, p), st in sorted(v.partitions.items()):
            if st.get("error"):
                continue
            leader, isr, reps = st["leader"], st["isr"], st["replicas"]
            row = {"topic": t, "partition": p, "leader": leader, "isr": isr, "elr": st["elr"],
                   "last_known_elr": st["last_known_elr"]}
            if leader < 0 or leader not in v.live:
                n_off += 1
                if len(offline) < limit:
                    offline.append(row)
            if len(isr) < len(reps):
                n_under += 1
                if len(under) < limit:
                    under.append({**row, "replicas": reps})
            if len(isr) < min(min_isr.get(t, 1), len(reps)):
                n_min += 1
                if len(under_min) < limit:
                    under_min.append(row)
        return {
            "engine": "kraft", "kafka_version": self.kinfo["version"], "bootstrap_servers": self.bootstrap,
            "layout": self.kinfo.get("layout", "separate"),
            "brokers": brokers, "settled": not left, "pending": left[:20],
            "controller": {"broker": controller, "epoch": None} if controller is not None else None,
            "controllers": {str(c): {"pid": r.pid, "port": r.port, "running": r.process_alive}
                            for c, r in self.controller_records().items()},
            "features": features, "topics": len({t for t, _ in v.partitions}), "partitions": len(v.partitions),
            "offline_count": n_off, "offline": offline, "under_replicated_count": n_under,
            "under_replicated": under, "under_min_isr_count": n_min, "under_min_isr": under_min,
            "reassigning_count": len(v.reassigning),
            "reassigning": [{"topic": t, "partition": p, **r} for (t, p), r in list(v.reassigning.items())[:limit]],
            "shutting_down": [], "replication": {}, "stats": {},
        }


def _min_isr(admin: Any, topics: list[str]) -> dict[str, int]:
    """min.insync.replicas of each topic as Kafka resolves it (DescribeConfigs)."""
    from planner import kraft_admin as ka

    cfg = ka.configs(admin, "topic", topics, ["min.insync.replicas"])
    return {t: int((c.get("min.insync.replicas") or {}).get("value") or 1) for t, c in cfg.items()}


def kraft_shutdown_report(server_log: Path, offset: int = 0) -> dict[str, Any]:
    """What a KRaft broker's own log says about its controlled shutdown since `offset`: BrokerLifecycleManager
    logs "Beginning controlled shutdown", then, once the controller moved its leaders and let it go, "The
    controller has asked us to exit controlled shutdown"; a broker that gave up waiting (its
    `controlled.shutdown` timeout) never logs the second line."""
    try:
        with open(server_log, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        text = ""
    began = "Beginning controlled shutdown" in text
    ok = "The controller has asked us to exit controlled shutdown" in text
    return {"attempts": 1 if began else 0, "succeeded": ok, "still_leading": [], "unclean_shutdown": not ok}


@contextmanager
def _locked_info(engine: KraftEngine):  # type: ignore[no-untyped-def]
    from planner.sandbox.kafka_engine import locked

    with locked(engine.directory):
        info = read_info(engine.directory)
        yield info
        write_info(engine.directory, info)
    engine.info = info
