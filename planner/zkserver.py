"""A real ZooKeeper 3.9 server started from the jars that the pyspark wheel ships.

Tests, the sandbox and the demo need a real ZooKeeper (never a mock). PySpark's wheel carries
`zookeeper-3.9.x.jar` and everything it needs under `pyspark/jars`, so `java` + pip is all it takes.
The server runs in its own process group with its own data dir and a bounded heap, on a free loopback
port; `stop()` (or `stop_pid()` from another process, given the pid file) ends it so no JVM is left.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from planner.errors import PlannerError

MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"


class ZkServerError(PlannerError):
    """ZooKeeper could not be started or stopped."""


def pyspark_jars_dir() -> Path:
    """Where the pyspark wheel keeps its jars (found without importing pyspark)."""
    override = os.environ.get("KPLAN_ZK_JARS")
    if override:
        return Path(override)
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ZkServerError("pyspark is not installed: its jars carry the ZooKeeper server (the extra "
                            "kafka-maintenance-planner[sandbox]; or point KPLAN_ZK_JARS at a ZooKeeper's jars)")
    jars = Path(list(spec.submodule_search_locations)[0]) / "jars"
    if not any(jars.glob("zookeeper-3.*.jar")):
        raise ZkServerError(f"no zookeeper-3.*.jar under {jars}")
    return jars


def java_executable() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if not java:
        raise ZkServerError("java not found: ZooKeeper needs Java 17 (`make setup` installs it with apt)")
    return java


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def four_letter(host: str, port: int, word: str = "ruok", timeout: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command and return the answer ('' when nothing answers)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(word.encode())
            chunks = []
            while True:
                data = s.recv(4096)
                if not data:
                    break
                chunks.append(data)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


def _is_zookeeper(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return MAIN_CLASS.encode() in cmdline


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone. But a JVM's main thread can exit first: the
    # process then shows "Z" while its other threads still run (and still hold the port) until they end.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z" or len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return False


def stop_pid(pid: int, timeout: float = 15.0) -> bool:
    """Stop a ZooKeeper JVM by pid (SIGTERM, then SIGKILL). Refuses to signal a pid that is not ZooKeeper.

    Returns True when a process was stopped, False when it was already gone.
    """
    if not pid_alive(pid) or not _is_zookeeper(pid):
        return False
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return True


@dataclass
class ZooKeeperServer:
    """One standalone ZooKeeper server. Use as a context manager or call start()/stop()."""

    data_dir: Path
    port: int = 0
    host: str = "127.0.0.1"
    heap_mb: int = 1024
    force_sync: bool = False  # tests and the sandbox trade durability for speed; production ZK is not ours
    jute_maxbuffer: int = 4 * 1024 * 1024
    # ZooKeeper checks for expired sessions once a tick (SessionTrackerImpl, expirationInterval = tickTime), so
    # a dead client's ephemeral znodes go up to one tick after its session timeout: 500 ms instead of the
    # sample config's 2 s makes every broker kill and killed apply in the sandbox and tests cost ~1 s less
    # (a 4 s session: median 4.71 s -> 3.80 s from SIGKILL to its znode gone). Kafka's own test ZooKeeper
    # uses 800 ms (EmbeddedZookeeper). Session timeouts stay bounded by the explicit min/max below.
    tick_ms: int = 500
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def _write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "data").mkdir(exist_ok=True)
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text(
            "\n".join(
                [
                    f"tickTime={self.tick_ms}",
                    "initLimit=10",
                    "syncLimit=5",
                    f"dataDir={self.data_dir / 'data'}",
                    f"clientPort={self.port}",
                    f"clientPortAddress={self.host}",
                    "maxClientCnxns=0",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr,mntr,stat",
                    f"forceSync={'yes' if self.force_sync else 'no'}",
                    "autopurge.snapRetainCount=3",
                    "autopurge.purgeInterval=1",
                    "maxSessionTimeout=60000",
                    "minSessionTimeout=1000",
                    "",
                ]
            )
        )
        (self.data_dir / "log4j2.properties").write_text(
            "status = error\n"
            "appender.console.type = Console\n"
            "appender.console.name = STDOUT\n"
            "appender.console.layout.type = PatternLayout\n"
            "appender.console.layout.pattern = %d{ISO8601} %-5p [%t] %c{1}: %m%n\n"
            "rootLogger.level = warn\n"
            "rootLogger.appenderRef.stdout.ref = STDOUT\n"
        )
        return cfg

    def start(self, timeout: float = 60.0) -> ZooKeeperServer:
        if self.process is not None:
            raise ZkServerError("already started")
        if not self.port:
            self.port = free_port(self.host)
        cfg = self._write_config()
        cmd = [
            java_executable(),
            f"-Xmx{self.heap_mb}m",
            "-Xss1m",
            "-XX:+UseSerialGC",
            f"-Djute.maxbuffer={self.jute_maxbuffer}",
            "-Dzookeeper.admin.enableServer=false",
            "-Dzookeeper.jmx.log4j.disable=true",
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
            "-cp",
            f"{pyspark_jars_dir()}/*",
            MAIN_CLASS,
            str(cfg),
        ]
        log = open(self.data_dir / "zookeeper.log", "ab")  # noqa: SIM115 - handed to the child
        try:
            self.process = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        finally:
            log.close()
        (self.data_dir / "zookeeper.pid").write_text(str(self.process.pid))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ZkServerError(
                    f"ZooKeeper exited with code {self.process.returncode}; log tail:\n{self.log_tail()}"
                )
            if four_letter(self.host, self.port, "ruok", timeout=0.5) == "imok" and "Mode:" in four_letter(
                self.host, self.port, "srvr", timeout=0.5
            ):
                return self
            time.sleep(0.1)
        self.stop()
        raise ZkServerError(f"ZooKeeper did not answer on {self.connect_string} within {timeout:.0f}s")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join((self.data_dir / "zookeeper.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 15.0) -> None:
        if self.process is None:
            return
        pid = self.process.pid
        if self.process.poll() is None:
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(pid, signal.SIGKILL)
                self.process.wait(timeout)
        self.process = None
        try:
            (self.data_dir / "zookeeper.pid").unlink()
        except FileNotFoundError:
            pass

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
