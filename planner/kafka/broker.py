"""One real Kafka broker JVM (`java -cp '<jars>/*' kafka.Kafka server.properties`, docs/KAFKA_ZK.md §4).

Each broker of a sandbox has a folder `<sandbox>/kafka/broker-<id>/` with its `server.properties`,
`log4j.properties`, its log dir `data/`, `server.log` (Kafka's own log) and `stdout.log`. The JVM runs in
its own process group (so a Ctrl-C of the caller does not reach it) and is identified afterwards by its pid
*and* its command line, which names that `server.properties`: a recycled pid is never signalled.

Settings are Kafka's, chosen for several brokers on one small machine: small heaps, few threads, no log
cleaner (its 128 MiB dedupe buffer), no auto-created topics, replication factor 1 for internal topics, and
the sandbox's timing (ZooKeeper session timeout, controlled shutdown retries and backoff, auto leader
rebalance) mapped onto the broker settings of the same meaning.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from planner.zkserver import java_executable, pid_alive

MAIN_CLASS = "kafka.Kafka"


@dataclass
class BrokerSpec:
    id: int
    dir: Path
    port: int
    zk_connect: str            # host:port/chroot
    rack: str | None = None
    heap_mb: int = 256
    settings: dict[str, str] = field(default_factory=dict)  # extra / overriding server.properties
    sasl_port: int | None = None   # a second listener, SASL_PLAINTEXT with PLAIN, for clients (not inter-broker)
    sasl_users: dict[str, str] = field(default_factory=dict, repr=False)   # PLAIN users -> passwords
    ssl_port: int | None = None    # a listener named SSL (client certificates required), for clients
    ssl_settings: dict[str, str] = field(default_factory=dict, repr=False)  # its keystore etc. (planner.kafka.tls)

    @property
    def config_path(self) -> Path:
        return self.dir / "server.properties"

    @property
    def log_dir(self) -> Path:
        return self.dir / "data"

    @property
    def server_log(self) -> Path:
        return self.dir / "server.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


def broker_settings(session_timeout_s: float, shutdown_retries: int, shutdown_backoff_s: float,
                    auto_rebalance: bool, rebalance_interval_s: float, imbalance_pct: float,
                    unclean_default: bool) -> dict[str, str]:
    """The sandbox's timing as Kafka broker settings."""
    return {
        "zookeeper.session.timeout.ms": str(int(session_timeout_s * 1000)),
        "controlled.shutdown.enable": "true",
        "controlled.shutdown.max.retries": str(int(shutdown_retries)),
        "controlled.shutdown.retry.backoff.ms": str(int(shutdown_backoff_s * 1000)),
        "auto.leader.rebalance.enable": "true" if auto_rebalance else "false",
        "leader.imbalance.check.interval.seconds": str(max(1, int(round(rebalance_interval_s)))),
        "leader.imbalance.per.broker.percentage": str(int(imbalance_pct)),
        "unclean.leader.election.enable": "true" if unclean_default else "false",
    }


BASE_SETTINGS = {
    "auto.create.topics.enable": "false",
    "delete.topic.enable": "true",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "num.network.threads": "2",
    "num.io.threads": "2",
    "background.threads": "2",
    "num.replica.fetchers": "1",
    "num.recovery.threads.per.data.dir": "1",
    "log.cleaner.enable": "false",
    "log.segment.bytes": str(64 * 1024 * 1024),
    "log.index.size.max.bytes": str(1024 * 1024),
    "socket.request.max.bytes": str(100 * 1024 * 1024),
    "zookeeper.connection.timeout.ms": "30000",
}


def server_properties(spec: BrokerSpec) -> str:
    listeners = f"PLAINTEXT://127.0.0.1:{spec.port}"
    extra: dict[str, str] = {}
    if spec.sasl_port:
        # Kafka's PLAIN server: users from the listener's JAAS config (`user_<name>="<password>"`); brokers keep
        # talking to each other over PLAINTEXT (security.inter.broker.protocol / inter.broker.listener.name)
        listeners += f",SASL_PLAINTEXT://127.0.0.1:{spec.sasl_port}"
        users = " ".join(f'user_{u}="{pw}"' for u, pw in sorted(spec.sasl_users.items()))
        extra = {"inter.broker.listener.name": "PLAINTEXT", "sasl.enabled.mechanisms": "PLAIN",
                 "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                     f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"}
    if spec.ssl_port:
        # TLS with client certificates (planner/kafka/tls.py); brokers keep talking PLAINTEXT to each other
        listeners += f",SSL://127.0.0.1:{spec.ssl_port}"
        extra = {**extra, "inter.broker.listener.name": "PLAINTEXT", **spec.ssl_settings}
    props = {
        "broker.id": str(spec.id),
        "listeners": listeners,
        "advertised.listeners": listeners,
        **extra,
        "log.dirs": str(spec.log_dir),
        "zookeeper.connect": spec.zk_connect,
        **BASE_SETTINGS,
        **spec.settings,
    }
    if spec.rack:
        props["broker.rack"] = spec.rack
    return "".join(f"{k}={v}\n" for k, v in props.items())


# log4j 1.2 (Kafka 3.x logs through reload4j): WARN and up into one file; the KRaft nodes use it too (kraft.py)
LOG4J_FILE = """log4j.rootLogger=WARN, F
log4j.appender.F=org.apache.log4j.FileAppender
log4j.appender.F.File={log}
log4j.appender.F.Append=true
log4j.appender.F.layout=org.apache.log4j.PatternLayout
log4j.appender.F.layout.ConversionPattern=[%d] %p %m (%c)%n
"""
LOG4J = LOG4J_FILE + """log4j.logger.kafka.server.KafkaServer=DEBUG
log4j.logger.kafka.controller=INFO
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.Kafka=INFO
"""


def write_config(spec: BrokerSpec) -> None:
    spec.dir.mkdir(parents=True, exist_ok=True)
    spec.log_dir.mkdir(exist_ok=True)
    spec.config_path.touch(mode=0o600)      # it may hold the sandbox's SASL users' and keystores' passwords
    spec.config_path.chmod(0o600)
    spec.config_path.write_text(server_properties(spec))
    (spec.dir / "log4j.properties").write_text(LOG4J.format(log=spec.server_log))


def command(spec: BrokerSpec, classpath: str) -> list[str]:
    return [
        java_executable(),
        f"-Xmx{spec.heap_mb}m", f"-Xms{min(64, spec.heap_mb)}m", "-Xss512k",
        "-XX:+UseSerialGC",
        # C1 only: a broker of a sandbox starts in about half the CPU time, and never needs peak throughput
        "-XX:TieredStopAtLevel=1",
        "-XX:MaxDirectMemorySize=128m",
        "-Djava.awt.headless=true",
        f"-Dlog4j.configuration=file:{spec.dir / 'log4j.properties'}",
        f"-Dkafka.logs.dir={spec.dir}",
        "-cp", classpath,
        MAIN_CLASS,
        str(spec.config_path),
    ]


def launch(spec: BrokerSpec, classpath: str) -> subprocess.Popen:
    """Start the broker JVM (its config already written) in its own session; returns at once."""
    with open(spec.dir / "stdout.log", "ab") as out:
        return subprocess.Popen(command(spec, classpath), stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True, cwd=str(spec.dir))


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def is_broker(pid: int, config_path: Path | str) -> bool:
    """Is `pid` a live kafka.Kafka JVM started with exactly this server.properties?"""
    cmd = cmdline(pid).split(b"\0")
    return pid_alive(pid) and MAIN_CLASS.encode() in cmd and str(config_path).encode() in cmd


def find_brokers(under: Path | str) -> dict[int, Path]:
    """Every live kafka.Kafka JVM whose server.properties lies under this folder (pid -> config path): how
    `down` finds a broker whose pid was never recorded (its starter was killed right after spawning it)."""
    prefix = str(Path(under).resolve()).rstrip("/") + "/"
    out: dict[int, Path] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        args = cmdline(int(entry.name)).split(b"\0")
        if MAIN_CLASS.encode() not in args:
            continue
        for a in args:
            s = a.decode(errors="replace")
            if s.startswith(prefix) and s.endswith("server.properties"):
                if pid_alive(int(entry.name)):
                    out[int(entry.name)] = Path(s)
                break
    return out


def signal_broker(pid: int, config_path: Path | str, sig: int) -> bool:
    """Send `sig` to the broker JVM if `pid` still is that broker; returns whether it was sent."""
    if not is_broker(pid, config_path):
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def kill_broker(pid: int, config_path: Path | str) -> bool:
    return signal_broker(pid, config_path, signal.SIGKILL)


def terminate_broker(pid: int, config_path: Path | str) -> bool:
    return signal_broker(pid, config_path, signal.SIGTERM)
