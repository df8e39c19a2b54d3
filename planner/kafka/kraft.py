"""One real KRaft node JVM (Kafka 3.7+ / 4.x, no ZooKeeper): its server.properties, its storage format, its command.

A KRaft sandbox has controller nodes (`process.roles=controller`, listener CONTROLLER) and broker nodes
(`process.roles=broker`), all naming the same static quorum (`controller.quorum.voters`, kraft.version 0).
Each node's folder is laid out as a ZooKeeper-mode broker's (planner/kafka/broker.py): `server.properties`,
`log4j2.properties` and `log4j.properties` (4.x and 3.x), `data/`, `server.log`, `stdout.log`; the JVM is
`kafka.Kafka server.properties` in its own session, found again by pid and command line (broker.is_broker /
find_brokers work unchanged).

Before its first start every node's log dir is formatted with the cluster id (`kafka.tools.StorageTool
format -t <id> -c server.properties`, which writes meta.properties and, on a fresh 4.x cluster, the
bootstrap checkpoint finalizing the default features: metadata.version 4.1-IV1, eligible.leader.replicas.version
1 on 4.1.1; docs/KAFKA_SANDBOX.md, "What real KRaft brokers showed").

Timing (the sandbox's knobs on Kafka's KRaft settings): the controller fences a broker whose heartbeats stop for
`broker.session.timeout.ms` (ControllerConfigs; the broker heartbeats every `broker.heartbeat.interval.ms`),
which is what `--session-timeout` maps onto; auto leader rebalance and unclean election are the controller's
settings too (QuorumController, ReplicationControlManager), so they go to every node.
"""

from __future__ import annotations

import base64
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from planner.errors import PlannerError
from planner.kafka import broker as kbroker
from planner.zkserver import java_executable

CONTROLLER_LISTENER = "CONTROLLER"
STORAGE_TOOL = "kafka.tools.StorageTool"


class KraftFormatError(PlannerError):
    """StorageTool refused to format a node's log dir."""


def new_cluster_id() -> str:
    """Kafka's Uuid.randomUuid().toString(): URL-safe base64 of 16 random bytes, without padding; Kafka never
    hands out one starting with '-' (it would read as a command-line option)."""
    while True:
        s = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not s.startswith("-"):
            return s


@dataclass
class Quorum:
    """The static controller quorum every node names."""

    voters: dict[int, int]         # controller node id -> its CONTROLLER port on 127.0.0.1

    @property
    def voters_setting(self) -> str:
        return ",".join(f"{i}@127.0.0.1:{p}" for i, p in sorted(self.voters.items()))


def timing_settings(session_timeout_s: float, auto_rebalance: bool, rebalance_interval_s: float,
                    imbalance_pct: float, unclean_default: bool) -> dict[str, str]:
    """The sandbox's timing as KRaft settings (given to every node; each reads the ones of its role)."""
    session_ms = int(session_timeout_s * 1000)
    return {
        "broker.session.timeout.ms": str(session_ms),
        # Kafka's default heartbeat is 2 s against a 9 s session; keep at least three beats per session
        "broker.heartbeat.interval.ms": str(max(100, min(2000, session_ms // 3))),
        "auto.leader.rebalance.enable": "true" if auto_rebalance else "false",
        "leader.imbalance.check.interval.seconds": str(max(1, int(round(rebalance_interval_s)))),
        "leader.imbalance.per.broker.percentage": str(int(imbalance_pct)),
        "unclean.leader.election.enable": "true" if unclean_default else "false",
    }


_ZK_ONLY = ("broker.id", "zookeeper.connect", "zookeeper.connection.timeout.ms", "zookeeper.session.timeout.ms",
            "controlled.shutdown.max.retries", "controlled.shutdown.retry.backoff.ms")
KRAFT_BASE = {
    # share groups (4.x) keep their state in an internal topic of RF 3 by default
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
}


def broker_properties(spec: kbroker.BrokerSpec, quorum: Quorum, controller_port: int | None = None) -> str:
    """A broker node: the ZooKeeper-mode broker's listeners, security and small-machine settings
    (broker.server_properties), with the ZooKeeper keys replaced by KRaft's. With `controller_port`, a combined
    node (`process.roles=broker,controller`, Kafka's "combined mode"): it also listens as a voter of the quorum
    on CONTROLLER://127.0.0.1:<controller_port>, which is not advertised to clients."""
    props: dict[str, str] = {}
    for line in kbroker.server_properties(spec).splitlines():
        k, _, v = line.partition("=")
        if k not in _ZK_ONLY:
            props[k] = v
    listener_names = [u.split("://", 1)[0] for u in props["listeners"].split(",")]
    kraft = {
        "process.roles": "broker",
        "node.id": str(spec.id),
        "controller.quorum.voters": quorum.voters_setting,
        "controller.listener.names": CONTROLLER_LISTENER,
        "listener.security.protocol.map": ",".join([f"{n}:{n}" for n in listener_names]
                                                   + [f"{CONTROLLER_LISTENER}:PLAINTEXT"]),
        "inter.broker.listener.name": "PLAINTEXT",
    }
    if controller_port is not None:
        kraft["process.roles"] = "broker,controller"
        props["listeners"] = f"{props['listeners']},{CONTROLLER_LISTENER}://127.0.0.1:{controller_port}"
    out = {**kraft, **{k: v for k, v in props.items() if k not in kraft}, **KRAFT_BASE}
    out.update({k: v for k, v in spec.settings.items() if k not in _ZK_ONLY})
    return "".join(f"{k}={v}\n" for k, v in out.items())


def controller_properties(node_id: int, port: int, log_dir: Path, quorum: Quorum, settings: dict[str, str]) -> str:
    props = {
        "process.roles": "controller",
        "node.id": str(node_id),
        "controller.quorum.voters": quorum.voters_setting,
        "listeners": f"{CONTROLLER_LISTENER}://127.0.0.1:{port}",
        "controller.listener.names": CONTROLLER_LISTENER,
        "listener.security.protocol.map": f"{CONTROLLER_LISTENER}:PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.io.threads": "2",
        "num.network.threads": "2",
        "background.threads": "2",
        **{k: v for k, v in settings.items() if k not in _ZK_ONLY},
    }
    return "".join(f"{k}={v}\n" for k, v in props.items())


LOG4J2 = """status = warn
appender.f.type = File
appender.f.name = F
appender.f.fileName = {log}
appender.f.append = true
appender.f.layout.type = PatternLayout
appender.f.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.f.ref = F
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.controller.name = org.apache.kafka.controller
logger.controller.level = INFO
logger.lifecycle.name = kafka.server.BrokerLifecycleManager
logger.lifecycle.level = INFO
logger.raft.name = org.apache.kafka.raft
logger.raft.level = WARN
logger.log.name = kafka.log
logger.log.level = WARN
logger.state.name = state.change.logger
logger.state.level = WARN
"""


# Kafka 3.x logs through reload4j (log4j 1.2's API) and reads log4j.configuration; 4.x through log4j 2. Every
# node gets both files and both flags (each library ignores the other's), so server.log is written on every
# version the engine takes (3.7 and later): on 3.9.2 with log4j 2's file alone a node logged nothing
LOG4J1 = kbroker.LOG4J_FILE + """log4j.logger.kafka=INFO
log4j.logger.org.apache.kafka.controller=INFO
log4j.logger.kafka.server.BrokerLifecycleManager=INFO
log4j.logger.org.apache.kafka.raft=WARN
log4j.logger.kafka.log=WARN
log4j.logger.state.change.logger=WARN
"""


def write_node(node_dir: Path, properties: str) -> Path:
    """Write a node's server.properties (0600: it may hold the SASL users' and keystores' passwords) and
    its log4j files (LOG4J2, LOG4J1); returns the server.properties path."""
    node_dir.mkdir(parents=True, exist_ok=True)
    (node_dir / "data").mkdir(exist_ok=True)
    cfg = node_dir / "server.properties"
    cfg.touch(mode=0o600)
    cfg.chmod(0o600)
    cfg.write_text(properties)
    (node_dir / "log4j2.properties").write_text(LOG4J2.format(log=node_dir / "server.log"))
    (node_dir / "log4j.properties").write_text(LOG4J1.format(log=node_dir / "server.log"))
    return cfg


def command(node_dir: Path, heap_mb: int, classpath: str) -> list[str]:
    """The node's JVM: the ZooKeeper-mode broker's flags (broker.command), with both log4j configurations."""
    return [
        java_executable(),
        f"-Xmx{heap_mb}m", f"-Xms{min(64, heap_mb)}m", "-Xss512k",
        "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:MaxDirectMemorySize=128m",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={node_dir / 'log4j2.properties'}",
        f"-Dlog4j.configuration=file:{node_dir / 'log4j.properties'}",
        f"-Dkafka.logs.dir={node_dir}",
        "-cp", classpath,
        kbroker.MAIN_CLASS,
        str(node_dir / "server.properties"),
    ]


def launch(node_dir: Path, heap_mb: int, classpath: str) -> subprocess.Popen:
    with open(node_dir / "stdout.log", "ab") as out:
        return subprocess.Popen(command(node_dir, heap_mb, classpath), stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True, cwd=str(node_dir))


def format_storage(node_dirs: list[Path], cluster_id: str, classpath: str, timeout: float = 120) -> None:
    """StorageTool format of every node's log dir, all at once (a JVM each); raises naming the node and
    StorageTool's own output when one fails."""
    procs = []
    for d in node_dirs:
        cmd = [java_executable(), "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               f"-Dlog4j2.configurationFile={d / 'log4j2.properties'}", "-cp", classpath, STORAGE_TOOL,
               "format", "-t", cluster_id, "-c", str(d / "server.properties")]
        procs.append((d, subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True, cwd=str(d))))
    failed = []
    for d, p in procs:
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            failed.append(f"{d.name}: StorageTool did not finish within {timeout:.0f}s")
            continue
        if p.returncode != 0:
            failed.append(f"{d.name}: StorageTool format exited {p.returncode}: {out.strip()[-800:]}")
    if failed:
        raise KraftFormatError("formatting the KRaft log dirs failed: " + "; ".join(failed))
