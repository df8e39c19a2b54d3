"""ZooKeeper-to-KRaft migration of a `kafka` engine sandbox (KIP-866; Kafka 3.6-3.9, the last with ZooKeeper).

`kplan sandbox migrate --dir D --to PHASE` walks a sandbox of real ZooKeeper-mode brokers through the phases of
Kafka's own procedure (Kafka 3.9 docs/ops.html "ZooKeeper to KRaft Migration"), one at a time, forward only:

| phase           | what this step does                                             | Kafka's ZkMigrationState |
|-----------------|-----------------------------------------------------------------|--------------------------|
| `pre-migration` | formats and starts a KRaft controller (node 1000, the cluster's id from `/cluster/id`) with `zookeeper.metadata.migration.enable=true`; it creates `/migration` and waits for the brokers | PRE_MIGRATION |
| `hybrid`        | restarts the ZooKeeper-mode brokers with the migration settings (`zookeeper.metadata.migration.enable`, `controller.quorum.voters`, `controller.listener.names`, the IBP); once all are registered the controller copies the metadata, claims `/controller` and writes both (dual-write) | MIGRATION |
| `dual-write`    | restarts the brokers as KRaft brokers (`process.roles=broker`, no ZooKeeper); the controller still writes ZooKeeper | MIGRATION |
| `finalized`     | restarts the controller without the migration settings and without ZooKeeper | POST_MIGRATION |

The sandbox restarts every broker of a step together, not one at a time as a production roll would: Kafka's
migration waits for all of them either way (KRaftMigrationDriver.areZkBrokersReadyForMigration), and a sandbox
needs no availability in between. Each step returns once the cluster has settled: ZooKeeper's view until the
brokers leave ZooKeeper mode, the Admin API's from then on (planner.sandbox.kraft_engine). From `dual-write`
on, kill / stop / start / status / wait go through the kraft engine's Admin API waits (`MigratedEngine`).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from planner.errors import BadInput
from planner.kafka import broker as kbroker
from planner.kafka import kraft
from planner.sandbox.kafka_engine import (
    _CHILDREN,
    KAFKA_DIR,
    RUNNING,
    STOPPED,
    KafkaEngine,
    KafkaSandboxError,
    _session,
    locked,
    pending,
    read_info,
    update_brokers,
    write_info,
)
from planner.sandbox.kraft_engine import CONTROLLER_BASE_ID, KraftEngine, kpending
from planner.zkserver import free_port

log = logging.getLogger("planner.sandbox.migration")

PHASES = ("zookeeper", "pre-migration", "hybrid", "dual-write", "finalized")
KRAFT_PHASES = ("dual-write", "finalized")      # the brokers run in KRaft mode


def phase(info: dict[str, Any]) -> str:
    return info.get("kafka", {}).get("migration", "zookeeper")


def _version(v: str) -> tuple[int, int]:
    major, minor = v.split(".")[:2]
    return int(major), int(minor)


MIGRATION_KEYS = ("zookeeper.metadata.migration.enable", "inter.broker.protocol.version", "controller.quorum.voters",
                  "controller.listener.names", "listener.security.protocol.map")


def kraft_brokers(info: dict[str, Any]) -> list[int]:
    """The brokers already restarted in KRaft mode (all of them from dual-write on)."""
    return [int(b) for b in info.get("kafka", {}).get("kraft_brokers", [])]


def _check(engine: KafkaEngine, to: str, brokers: list[int] | None = None) -> list[str]:
    if to not in PHASES[1:]:
        raise BadInput(f"unknown migration phase {to!r} (in order: {', '.join(PHASES[1:])})")
    if engine.info.get("engine") != "kafka":
        raise BadInput("migrate needs a sandbox of the kafka engine (ZooKeeper-mode brokers)")
    version = engine.kinfo["version"]
    if not (3, 6) <= _version(version) < (4, 0):
        raise BadInput(f"the sandbox runs Kafka {version}: a ZooKeeper-to-KRaft migration needs Kafka 3.6 to 3.9 "
                       "(Kafka 4 has no ZooKeeper mode)")
    if engine.kinfo.get("sasl") or engine.kinfo.get("ssl"):
        raise BadInput("migrate supports sandboxes with PLAINTEXT listeners only, for now")
    big = [b for b in engine.records() if b >= CONTROLLER_BASE_ID]
    if big:
        raise BadInput(f"broker ids {big} collide with the KRaft controller's id {CONTROLLER_BASE_ID}")
    now = phase(engine.info)
    i, j = PHASES.index(now), PHASES.index(to)
    if brokers is not None:
        if to != "dual-write" or now not in ("pre-migration", "hybrid") or not brokers:
            raise BadInput("brokers (some brokers to KRaft mode, the others left in ZooKeeper mode) go with the "
                           "step to dual-write only")
        unknown = sorted(set(brokers) - set(engine.records()))
        if unknown:
            raise BadInput(f"unknown broker id(s) {unknown}: this sandbox has brokers {sorted(engine.records())}")
    if j <= i:
        raise BadInput(f"the sandbox is already in migration phase {now}: a migration only goes forward "
                       f"({' -> '.join(PHASES)})")
    steps = list(PHASES[i + 1:j + 1])
    stopped = [b for b, r in engine.records().items() if r.state != RUNNING]
    if stopped and steps[0] != "dual-write":   # the step to KRaft mode starts a stopped broker as a KRaft broker
        raise BadInput(f"brokers {stopped} are not running: start them before a migration step")
    return steps


def migrate(engine: KafkaEngine, to: str, timeout: float = 180, brokers: list[int] | None = None) -> dict[str, Any]:
    """Walk the sandbox forward to phase `to` (module docstring); returns each step's seconds. `brokers` with
    `to="dual-write"`: restart only these brokers in KRaft mode, the others stay in ZooKeeper mode (the hybrid
    phase of a rolling migration; the sandbox stays in phase hybrid until every broker is in KRaft mode)."""
    steps = _check(engine, to, brokers)
    report: dict[str, Any] = {"from": phase(engine.info), "to": to, "steps": {}}
    for step in steps:
        started = time.monotonic()
        if step == "dual-write":
            reached = _brokers_to_kraft(engine, timeout, brokers)
        else:
            {"pre-migration": _provision_controller, "hybrid": _brokers_in_migration_mode,
             "finalized": _finalize}[step](engine, timeout)
            reached = step
        with locked(engine.directory):
            info = read_info(engine.directory)
            info["kafka"]["migration"] = reached
            write_info(engine.directory, info)
        engine.info = info
        report["steps"][step] = round(time.monotonic() - started, 2)
        report["to"] = reached
        log.info("migration phase %s reached in %.1fs", reached, report["steps"][step])
    return report


# ------------------------------------------------------------------------------------- the controller
def _controller(engine: KafkaEngine) -> dict[str, Any]:
    return engine.kinfo["controllers"][str(CONTROLLER_BASE_ID)]


def _quorum(engine: KafkaEngine) -> kraft.Quorum:
    return kraft.Quorum({CONTROLLER_BASE_ID: int(_controller(engine)["port"])})


def _controller_properties(engine: KafkaEngine, migrating: bool) -> str:
    """Kafka 3.9 docs' sample controller.properties: the migration flag, ZooKeeper's connect string and the
    brokers' inter-broker listener (the controller sends them LeaderAndIsr / UpdateMetadata while they are in
    ZooKeeper mode); without them once finalized."""
    c = _controller(engine)
    t = engine.timing
    settings = kraft.timing_settings(t.session_timeout, t.auto_rebalance, t.rebalance_interval, t.imbalance_pct,
                                     t.unclean_default)
    props = kraft.controller_properties(CONTROLLER_BASE_ID, int(c["port"]), Path(c["dir"]) / "data", _quorum(engine),
                                        settings)
    if migrating:
        props = props.replace(f"listener.security.protocol.map={kraft.CONTROLLER_LISTENER}:PLAINTEXT",
                              f"listener.security.protocol.map={kraft.CONTROLLER_LISTENER}:PLAINTEXT,"
                              "PLAINTEXT:PLAINTEXT")
        props += ("zookeeper.metadata.migration.enable=true\n"
                  f"zookeeper.connect={engine.info['connect']}\n"
                  "inter.broker.listener.name=PLAINTEXT\n")
    return props


def _write_node(node_dir: Path, properties: str) -> None:
    """A node's server.properties and, for Kafka 3.x (log4j 1 through reload4j), its log4j.properties."""
    kraft.write_node(node_dir, properties)
    (node_dir / "log4j.properties").write_text(kbroker.LOG4J.format(log=node_dir / "server.log")
                                               + "log4j.logger.org.apache.kafka.metadata.migration=INFO\n"
                                               + "log4j.logger.org.apache.kafka.controller=INFO\n")


def _launch_node(engine: KafkaEngine, node_dir: Path) -> int:
    """kafka.Kafka server.properties with Kafka 3.x's log4j 1 configuration (broker.command's flags)."""
    spec = kbroker.BrokerSpec(0, node_dir, 0, "", None, int(engine.kinfo.get("heap_mb", 256)), {})
    proc = kbroker.launch(spec, engine.jars().classpath)
    _CHILDREN[proc.pid] = proc
    return proc.pid


def _set_controller(engine: KafkaEngine, **changes: Any) -> None:
    with locked(engine.directory):
        info = read_info(engine.directory)
        info["kafka"]["controllers"][str(CONTROLLER_BASE_ID)].update(changes)
        write_info(engine.directory, info)
    engine.info = info


def _start_controller(engine: KafkaEngine) -> None:
    pid = _launch_node(engine, Path(_controller(engine)["dir"]))
    _set_controller(engine, pid=pid, state=RUNNING)
    log.info("KRaft controller %d: JVM %d started", CONTROLLER_BASE_ID, pid)


def _cluster_id(engine: KafkaEngine) -> str:
    with _session(engine) as client:
        data, _ = client.get("/cluster/id")
    return str(json.loads(data)["id"])


def _provision_controller(engine: KafkaEngine, timeout: float) -> None:
    """Kafka's "Provisioning the KRaft controller quorum": the same cluster id, formatted (StorageTool) with the
    latest metadata.version, started with the migration enabled. Its migration driver creates /migration
    (KRaftMigrationDriver.RecoverMigrationStateFromZKEvent: getOrCreateMigrationRecoveryState) and waits for
    the brokers (WAIT_FOR_BROKERS); the ZooKeeper controller still runs the cluster."""
    node = engine.directory / KAFKA_DIR / f"controller-{CONTROLLER_BASE_ID}"
    with locked(engine.directory):
        info = read_info(engine.directory)
        info["kafka"]["controllers"] = {str(CONTROLLER_BASE_ID): {
            "dir": str(node), "port": free_port(), "rack": None, "pid": None, "state": STOPPED}}
        write_info(engine.directory, info)
    engine.info = info
    _write_node(node, _controller_properties(engine, migrating=True))
    kraft.format_storage([node], _cluster_id(engine), engine.jars().classpath)
    _start_controller(engine)
    with _session(engine) as client:
        engine._wait(client, "the KRaft controller creating /migration", timeout,
                     lambda v: [] if client.exists("/migration") else ["no /migration yet"], stable=1,
                     watch=engine.pids())


def _migration_znode(client: Any) -> dict[str, Any]:
    """/migration as Kafka writes it (ZkData.scala MigrationZNode), or {} while it does not exist."""
    if client.exists("/migration") is None:
        return {}
    data, _ = client.get("/migration")
    return dict(json.loads(data))


def _restart_brokers(engine: KafkaEngine, launch: Any, ids: list[int] | None = None) -> list[int]:
    """SIGTERM these brokers (default: all) together (each asks for its controlled shutdown), wait for their
    exit, launch each again with `launch(rec)`."""
    recs = engine.records()
    ids = sorted(recs) if ids is None else sorted(ids)
    for b in ids:
        kbroker.terminate_broker(int(recs[b].pid or 0), recs[b].config_path)
    engine._wait_exit([recs[b] for b in ids], 120)
    engine.info = update_brokers(engine.directory, {b: {"state": STOPPED, "pid": None} for b in ids})
    for b in ids:
        pid = launch(engine.records()[b])
        engine.info = update_brokers(engine.directory, {b: {"pid": pid, "state": RUNNING}})
    return ids


def _brokers_in_migration_mode(engine: KafkaEngine, timeout: float) -> None:
    """Kafka's "Enter Migration Mode on the Brokers": each ZooKeeper-mode broker with the migration flag, the
    quorum and the IBP. Once all are registered, the controller migrates the metadata (MigrateMetadataEvent),
    records the offset in /migration (kraft_metadata_offset > 0), claims /controller with its
    kraftControllerEpoch (claimControllerLeadership) and enters DUAL_WRITE."""
    major, minor = _version(engine.kinfo["version"])
    extra = dict(engine.kinfo.get("extra_settings", {}))
    extra.update({
        "zookeeper.metadata.migration.enable": "true",
        "controller.quorum.voters": _quorum(engine).voters_setting,
        "controller.listener.names": kraft.CONTROLLER_LISTENER,
        "listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,{kraft.CONTROLLER_LISTENER}:PLAINTEXT",
        "inter.broker.protocol.version": f"{major}.{minor}",
    })
    with locked(engine.directory):
        info = read_info(engine.directory)
        info["kafka"]["extra_settings"] = extra
        write_info(engine.directory, info)
    engine.info = info

    def launch(rec: Any) -> int:
        spec = engine.spec(rec)
        kbroker.write_config(spec)
        proc = kbroker.launch(spec, engine.jars().classpath)
        _CHILDREN[proc.pid] = proc
        return proc.pid

    ids = _restart_brokers(engine, launch)

    with _session(engine) as client:
        def left(v: Any) -> list[str]:
            out = [f"broker {b} not registered" for b in ids if b not in v.registered]
            if int(_migration_znode(client).get("kraft_metadata_offset", -1)) <= 0:
                out.append("the controller has not migrated the metadata yet (/migration kraft_metadata_offset)")
            if not v.kraft_controller:
                out.append("/controller does not name the KRaft controller yet")
            return out + pending(v, catch_up=True)

        engine._wait(client, "the migration of the metadata into KRaft", timeout, left, watch=engine.pids())


def _brokers_to_kraft(engine: KafkaEngine, timeout: float, only: list[int] | None = None) -> str:
    """Kafka's "Migrating brokers to KRaft": node.id for broker.id, process.roles=broker, the ZooKeeper and
    migration settings removed, the quorum kept; the controller keeps writing ZooKeeper (dual-write). `only`:
    just these brokers (the others stay in ZooKeeper mode: still the hybrid phase). Returns the phase reached."""
    done = set(kraft_brokers(engine.info))
    ids = sorted(set(only if only is not None else engine.records()) - done)
    if not ids:
        raise BadInput(f"brokers {sorted(only or [])} already run in KRaft mode")
    mig = MigratedEngine(engine.directory, engine.info)
    _restart_brokers(engine, mig.launch_broker, ids)
    everyone = done | set(ids) >= set(engine.records())
    with locked(engine.directory):
        info = read_info(engine.directory)
        info["kafka"]["kraft_brokers"] = sorted(done | set(ids))
        if everyone:
            info["kafka"]["extra_settings"] = {k: v for k, v in info["kafka"].get("extra_settings", {}).items()
                                               if k not in MIGRATION_KEYS}
        write_info(engine.directory, info)
    engine.info = info
    mig.reload()
    mig._kwait("brokers in KRaft mode", timeout,
               lambda v: [f"broker {b} not unfenced" for b in ids if b not in v.live] + kpending(v), watch=ids)
    return "dual-write" if everyone else "hybrid"


def _finalize(engine: KafkaEngine, timeout: float) -> None:
    """Kafka's "Finalizing the migration": the controller restarted without the migration flag and ZooKeeper;
    its metadata log records ZkMigrationState POST_MIGRATION and ZooKeeper is written no more."""
    c = _controller(engine)
    node = Path(c["dir"])
    _write_node(node, _controller_properties(engine, migrating=False))
    cfg = node / "server.properties"
    if c.get("pid"):
        kbroker.terminate_broker(int(c["pid"]), cfg)
        deadline = time.monotonic() + 60
        while kbroker.is_broker(int(c["pid"]), cfg):
            if time.monotonic() > deadline:
                raise KafkaSandboxError(f"the KRaft controller (pid {c['pid']}) did not exit within 60s")
            time.sleep(0.1)
    _start_controller(engine)
    mig = MigratedEngine(engine.directory, engine.info)
    mig._kwait("the finalized KRaft controller", timeout, kpending, watch=mig.pids())


# ------------------------------------------------------------------------------------------ the engine
class MigratedEngine(KraftEngine):
    """A sandbox with brokers in KRaft mode (phases dual-write and finalized, or hybrid half way through the
    roll): the kraft engine's Admin API waits and commands, asked of the brokers in KRaft mode, with Kafka 3.x's
    log4j 1 configuration; a broker still in ZooKeeper mode is started again as one."""

    @property
    def bootstrap(self) -> str:
        """The running brokers in KRaft mode (in a mixed hybrid phase the others answer no DescribeTopicPartitions)."""
        kr = set(kraft_brokers(self.info)) or set(self.records())
        return ",".join(f"127.0.0.1:{r.port}" for b, r in self.records().items() if r.state == RUNNING and b in kr)

    def launch_broker(self, rec: Any) -> int:
        spec = self.spec(rec)
        spec.settings = {k: v for k, v in spec.settings.items() if k not in MIGRATION_KEYS}
        _write_node(rec.dir, kraft.broker_properties(spec, self.quorum))
        return _launch_node(self, rec.dir)

    def _launch(self, recs: list[Any]) -> None:
        kr = set(kraft_brokers(self.info))
        for rec in recs:
            if rec.id in kr:
                pid = self.launch_broker(rec)
            else:                                 # still in ZooKeeper mode, with the migration settings
                spec = KafkaEngine.spec(self, rec)
                kbroker.write_config(spec)
                pid = _launch_node(self, rec.dir)
            self.info = update_brokers(self.directory, {rec.id: {"pid": pid, "state": RUNNING}})
            log.info("broker %d: JVM %d started (KRaft mode)", rec.id, pid)
