"""The sandbox's Python API, used by tests, benchmarks, the demo and `kplan sandbox`.

    sb = Sandbox.up("run/sandbox", preset="demo", catch_up_delay=0.5)            # emulated engine
    sb = Sandbox.up("run/real", cluster=desc, engine="kafka", session_timeout=6)  # real Kafka brokers
    sb.kill([1]); sb.wait_settled(30); sb.start([1]); sb.down()

Both engines share this one interface (up, kill, stop, start, status, wait_settled, down, connect_string,
broker_ids). `up` starts a real ZooKeeper (its data dir under D; or uses `zk=` an existing one, in a fresh
chroot), then:
- engine "emulated": writes the cluster into it in Kafka's formats with no broker registered and starts the
  daemon whose emulated brokers register themselves and elect a controller;
- engine "kafka": starts real Kafka broker JVMs and creates the topics through Kafka's admin path
  (planner.sandbox.kafka_engine); `bootstrap_servers`, `broker_pids`, `produce` and `log_end_offsets` then
  reach the real brokers.
It writes D/sandbox.json and D/logdirs.json and returns once the cluster has settled. `down` stops, by pid,
everything `up` started, even after the process that ran `up` (or the daemon) was killed.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from planner import codec, loader
from planner import zk as zkmod
from planner.cluster import Cluster, load_description, log_dirs_json, parse_cluster
from planner.errors import BadInput, PlannerError
from planner.kafka import DEFAULT_VERSION as KAFKA_VERSION
from planner.sandbox.daemon import CONTROL_FILE, DAEMON_CONFIG, LOG_FILE
from planner.sandbox.files import SANDBOX_FILE, write_json
from planner.sandbox.presets import DEMO_TIMING, generated_description, preset_description
from planner.sandbox.settings import Timing
from planner.zkserver import ZooKeeperServer, pid_alive, stop_pid

log = logging.getLogger("planner.sandbox")

LOGDIRS_FILE = "logdirs.json"
ENGINES = ("emulated", "kafka", "kraft")
REAL_ENGINES = ("kafka", "kraft")   # real Apache Kafka JVMs: ZooKeeper mode, KRaft
_CHILDREN: dict[int, subprocess.Popen] = {}  # processes started by this process, reaped on down()


class SandboxError(PlannerError):
    """The sandbox could not do what was asked (daemon gone, did not settle in time...)."""


def _daemon_cmdline_matches(pid: int, directory: Path) -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"planner.sandbox.daemon" in cmd and str(directory).encode() in cmd


def _reap(pid: int | None) -> None:
    proc = _CHILDREN.pop(pid, None) if pid else None
    if proc is not None:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def _log_tail(directory: Path, lines: int = 25) -> str:
    try:
        return "\n".join((directory / LOG_FILE).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _resolve_cluster(cluster: Any, brokers: int | None, racks: int | None, partitions: int | None,
                     rf: int | None, preset: str | None, seed: int) -> Cluster:
    if cluster is not None:
        if brokers is not None or preset is not None:
            raise BadInput("give either a cluster description or --brokers/--preset, not both")
        if isinstance(cluster, Cluster):
            return cluster
        if isinstance(cluster, dict):
            return parse_cluster(cluster)
        return load_description(cluster)
    if brokers is not None and preset in (None, "generated"):
        return parse_cluster(generated_description(brokers, racks, partitions, rf, seed))
    return parse_cluster(preset_description(preset or "demo", brokers, racks, partitions, rf, seed))


def _explicit_controller(cluster: Any, desc: Cluster) -> int | None:
    """The controller id the description names (a Cluster object always names one)."""
    if isinstance(cluster, Cluster):
        return desc.controller_id
    raw = cluster
    if isinstance(cluster, (str, Path)):
        try:
            raw = json.loads(Path(cluster).read_text())
        except (OSError, ValueError):
            return None
    ctrl = raw.get("controller") if isinstance(raw, dict) else None
    return desc.controller_id if isinstance(ctrl, dict) and "id" in ctrl else None


def _sizes(cluster: Cluster) -> dict[str, list[int]]:
    return {t.name: [p.size_bytes or 0 for p in t.partitions] for t in cluster.topics}


class Sandbox:
    """A running sandbox, attached by directory."""

    def __init__(self, directory: str | Path):
        self.dir = Path(directory).resolve()
        path = self.dir / SANDBOX_FILE
        if not path.exists():
            raise BadInput(f"no sandbox in {self.dir} (no {SANDBOX_FILE}; start one with `kplan sandbox up`)")
        try:
            self.info: dict[str, Any] = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise BadInput(f"{path} is not readable: {e}") from None

    # --------------------------------------------------------------------------------------- basics
    @property
    def connect_string(self) -> str:
        if self.engine == "kraft":
            raise SandboxError(f"the sandbox in {self.dir} is a KRaft cluster: it has no ZooKeeper (its bootstrap "
                               "servers are `bootstrap_servers`)")
        return self.info["connect"]

    @property
    def engine(self) -> str:
        return self.info.get("engine", "emulated")

    def _kafka(self) -> Any:
        if self.engine not in REAL_ENGINES:
            raise SandboxError(f"the sandbox in {self.dir} runs the {self.engine} engine: it has no Kafka brokers "
                               "(start one with engine='kafka' / --engine kafka, or engine='kraft')")
        from planner.sandbox.kafka_engine import KafkaEngine, read_info

        self.info = read_info(self.dir)
        from planner.sandbox import migration

        if migration.phase(self.info) in migration.KRAFT_PHASES or migration.kraft_brokers(self.info):
            return migration.MigratedEngine(self.dir, self.info)
        if self.engine == "kraft":
            from planner.sandbox.kraft_engine import KraftEngine

            return KraftEngine(self.dir, self.info)
        return KafkaEngine(self.dir, self.info)

    @property
    def bootstrap_servers(self) -> str:
        """The running real brokers' listeners, `127.0.0.1:PORT,...` (kafka engine only)."""
        return self._kafka().bootstrap

    @property
    def broker_pids(self) -> dict[int, int]:
        """Broker id -> JVM pid of every running real broker (kafka engine only)."""
        return self._kafka().pids()

    @property
    def kafka_version(self) -> str | None:
        return self.info.get("kafka", {}).get("version")

    def kafka_jars(self) -> Any:
        """The planner.kafka.jars.KafkaJars this sandbox runs (kafka engine only)."""
        return self._kafka().jars()

    def produce(self, sizes: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Write sizes[(topic, partition)] payload bytes into each partition (acks=all); kafka engine only."""
        return self._kafka().produce(sizes)

    def log_end_offsets(self, partitions: Any) -> dict[tuple[str, int], int]:
        """Log-end offsets of (topic, partition)s from their leaders; kafka engine only."""
        return self._kafka().log_end_offsets(partitions)

    @property
    def kafka_sasl(self) -> dict[str, str] | None:
        """The SASL_PLAINTEXT listener's PLAIN user of a kafka sandbox started with sasl=True (its password is
        the sandbox's own, in the private sandbox.json): mechanism, username, password."""
        return self._kafka().kinfo.get("sasl")

    @property
    def kafka_ssl(self) -> dict[str, str] | None:
        """The SSL listener's client settings of a kafka sandbox started with ssl=True, as librdkafka keys (an
        Airflow Kafka connection's extra): security.protocol, ssl.ca.location, ssl.certificate.location,
        ssl.key.location and ssl.key.password (the sandbox's own throwaway material, planner/kafka/tls.py)."""
        from planner.kafka.tls import client_config

        tls = self._kafka().kinfo.get("ssl")
        return client_config(tls) if tls else None

    def kafka_endpoints(self, protocol: str = "PLAINTEXT") -> dict[int, str]:
        return self._kafka().endpoints(protocol)

    def log_dirs(self) -> dict[str, Any]:
        """Partition sizes on the brokers' disks, in `kafka-log-dirs --describe` format; kafka engine only."""
        return self._kafka().log_dirs()

    @property
    def broker_ids(self) -> list[int]:
        return list(self.info.get("brokers", []))

    @property
    def daemon_pid(self) -> int | None:
        return self.info.get("daemon_pid")

    @property
    def zookeeper_pid(self) -> int | None:
        return self.info.get("zookeeper_pid")

    def daemon_alive(self) -> bool:
        pid = self.daemon_pid
        return bool(pid) and pid_alive(pid) and _daemon_cmdline_matches(pid, self.dir)

    def _call(self, cmd: str, args: dict[str, Any] | None = None, timeout: float = 60.0) -> Any:
        args = dict(args or {})
        args.setdefault("timeout", timeout)
        try:
            port = json.loads((self.dir / CONTROL_FILE).read_text())["port"]
        except (OSError, ValueError, KeyError):
            port = None
        if port is None or not self.daemon_alive():
            raise SandboxError(f"the sandbox daemon of {self.dir} is not running (see {self.dir / LOG_FILE}); "
                               f"`kplan sandbox down --dir {self.dir}` cleans up")
        request = json.dumps({"token": self.info["token"], "cmd": cmd, "args": args}) + "\n"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.settimeout(float(args["timeout"]) + 60)
                s.sendall(request.encode())
                data = b""
                while not data.endswith(b"\n"):
                    chunk = s.recv(1 << 20)
                    if not chunk:
                        break
                    data += chunk
        except OSError as e:
            raise SandboxError(f"could not talk to the sandbox daemon of {self.dir}: {e}") from None
        try:
            answer = json.loads(data)
        except ValueError:
            raise SandboxError(f"the sandbox daemon of {self.dir} closed the connection without answering") from None
        if answer.get("ok"):
            return answer.get("result")
        if answer.get("kind") == "bad_input":
            raise BadInput(answer.get("error", "bad request"))
        raise SandboxError(answer.get("error", "the sandbox daemon refused the request"))

    @staticmethod
    def _ids(ids: Any) -> list[int]:
        if isinstance(ids, int):
            ids = [ids]
        try:
            out = [int(i) for i in ids]
        except (TypeError, ValueError):
            raise BadInput(f"broker ids must be integers, got {ids!r}") from None
        if not out:
            raise BadInput("give at least one broker id")
        return out

    # ------------------------------------------------------------------------------------- commands
    def kill(self, ids: Any, timeout: float = 120) -> dict[str, Any]:
        """Hard failure (emulated: the brokers' sessions are closed; kafka: SIGKILL of the JVMs); returns once
        the controller has reacted (on real brokers: after their ZooKeeper sessions expired)."""
        if self.engine in REAL_ENGINES:
            return self._kafka().kill(self._ids(ids), timeout)
        return self._call("kill", {"brokers": self._ids(ids)}, timeout)

    def stop(self, ids: Any, timeout: float | None = None) -> dict[str, Any]:
        """Controlled shutdown (kafka: SIGTERM, in the order given); returns once the brokers have stopped
        (after their retries, if any) and the controller has reacted."""
        t = self.info.get("timing", {})
        timeout = timeout or t.get("shutdown_retries", 3) * (t.get("shutdown_retry_interval", 5) + 30) + 120
        if self.engine in REAL_ENGINES:
            return self._kafka().stop(self._ids(ids), timeout)
        return self._call("stop", {"brokers": self._ids(ids)}, timeout)

    def start(self, ids: Any, timeout: float = 120) -> dict[str, Any]:
        """Restart stopped or killed brokers (new sessions, new broker epochs)."""
        if self.engine in REAL_ENGINES:
            return self._kafka().start(self._ids(ids), timeout)
        return self._call("start", {"brokers": self._ids(ids)}, timeout)

    def migrate(self, to: str, timeout: float = 180, brokers: Any = None) -> dict[str, Any]:
        """kafka engine: walk the ZooKeeper-to-KRaft migration forward to phase `to` (pre-migration, hybrid,
        dual-write, finalized; planner.sandbox.migration). `brokers` with to="dual-write": only these brokers
        to KRaft mode (a rolling migration half way: still the hybrid phase)."""
        from planner.sandbox import migration

        if self.engine != "kafka":
            raise BadInput(f"migrate needs a sandbox of the kafka engine (ZooKeeper-mode brokers), not {self.engine}")
        from planner.sandbox.kafka_engine import KafkaEngine, read_info

        self.info = read_info(self.dir)
        report = migration.migrate(KafkaEngine(self.dir, self.info), to, timeout,
                                   None if brokers is None else self._ids(brokers))
        self.info = read_info(self.dir)
        return report

    @property
    def migration_phase(self) -> str:
        """zookeeper (no migration begun), pre-migration, hybrid, dual-write or finalized."""
        from planner.sandbox import migration

        return migration.phase(self.info)

    def status(self, limit: int = 1000) -> dict[str, Any]:
        if self.engine in REAL_ENGINES:
            return self._kafka().status(limit)
        return self._call("status", {"limit": limit}, 30)

    def fault(self, ids: Any, *, unreachable: bool | None = None, logdir_error: bool | None = None
              ) -> dict[str, Any]:
        """Emulated engine: make brokers' Kafka endpoints stop answering (`unreachable`, while they stay
        registered in ZooKeeper) or report their log dir in error (`logdir_error`); False undoes it."""
        if self.engine in REAL_ENGINES:
            raise SandboxError("fault() is the emulated engine's; on real brokers stop a JVM or fill its disk")
        args: dict[str, Any] = {"brokers": self._ids(ids)}
        if unreachable is not None:
            args["unreachable"] = bool(unreachable)
        if logdir_error is not None:
            args["logdir_error"] = bool(logdir_error)
        return self._call("fault", args, 30)

    def wait_settled(self, timeout: float = 60) -> dict[str, Any]:
        """Wait until nothing is left to happen (no pending election, shutdown or catch-up); returns status."""
        if self.engine in REAL_ENGINES:
            return self._kafka().wait_settled(timeout)
        return self._call("wait_settled", {}, timeout)

    # ------------------------------------------------------------------------------------- up / down
    @classmethod
    def up(cls, directory: str | Path, cluster: Any = None, *, brokers: int | None = None,
           racks: int | None = None, partitions: int | None = None, rf: int | None = None,
           preset: str | None = None, seed: int = 0, zk: str | None = None, chroot: str | None = None,
           timeout: float = 600, zk_heap_mb: int = 1024, engine: str = "emulated",
           kafka_version: str | None = None, broker_heap_mb: int = 256, data_bytes: int | None = None,
           data_scale: float | None = None, kafka_settings: dict[str, Any] | None = None, sasl: bool = False,
           ssl: bool = False, kraft_layout: str = "separate", **timing: Any) -> Sandbox:
        """Start a sandbox in `directory`. Real brokers (engine="kafka"): `kafka_version` (jars fetched once
        from Maven Central), `broker_heap_mb` per JVM, data produced = described sizes x `data_scale`, or
        scaled down so the total stays under `data_bytes` (default 64 MiB); `kafka_settings` adds or
        overrides server.properties entries (under a broker id as key: a dict of that broker's own entries);
        `sasl` adds a SASL_PLAINTEXT listener (PLAIN), `ssl` an SSL listener that requires client certificates
        (throwaway CA and keys made with keytool, `kafka_ssl`). engine="kraft": `kraft_layout` "separate" (a
        controller node beside the brokers) or "combined" (every broker node a voter too). Timing keywords (session_timeout,
        shutdown_retries, ...) apply to both engines (settings.Timing)."""
        directory = Path(directory).resolve()
        if preset == "demo":
            timing = {**DEMO_TIMING, **{k: v for k, v in timing.items() if v is not None}}
        settings = Timing.from_kwargs(**timing)
        if engine not in ENGINES:
            raise BadInput(f"unknown sandbox engine {engine!r} (known: {', '.join(ENGINES)})")
        if sasl and engine not in REAL_ENGINES:
            raise BadInput("sasl (a SASL_PLAINTEXT listener) is an option of the kafka and kraft engines")
        if ssl and engine not in REAL_ENGINES:
            raise BadInput("ssl (an SSL listener) is an option of the kafka and kraft engines")
        if kraft_layout != "separate" and engine != "kraft":
            raise BadInput("kraft_layout (separate or combined controllers) is an option of the kraft engine")
        if engine == "kraft" and (zk is not None or chroot is not None):
            raise BadInput("the kraft engine runs no ZooKeeper: --zk and --chroot do not apply")
        if (directory / SANDBOX_FILE).exists():
            existing = Sandbox(directory)
            if existing.daemon_alive() or existing._kafka_alive():
                raise BadInput(f"{directory} already has a running sandbox; `kplan sandbox down --dir {directory}` "
                               "first")
            # Its daemon (or every broker) is gone, so it cannot be running: clean up what is left (its
            # ZooKeeper, if this sandbox started one) and start afresh.
            log.warning("the sandbox in %s had stopped (its %s gone); cleaning up what was left before starting",
                        directory, "brokers are" if existing.engine in REAL_ENGINES else "daemon is")
            existing.down()
        desc = _resolve_cluster(cluster, brokers, racks, partitions, rf, preset, seed)
        jars = None
        if engine == "kraft":
            from planner.kafka import KRAFT_VERSION
            from planner.kafka.jars import ensure_jars, parse_version
            from planner.sandbox.kraft_engine import check_reproducible_kraft

            kafka_version = kafka_version or KRAFT_VERSION
            parse_version(kafka_version, "kraft")
            check_reproducible_kraft(desc)
            if broker_heap_mb < 128:
                raise BadInput("broker_heap_mb must be at least 128 (a Kafka broker does not start in less)")
            if data_scale is not None and data_scale < 0:
                raise BadInput("data_scale must not be negative")
            jars = ensure_jars(kafka_version)
            return cls._up_kraft(directory, desc, settings, jars, broker_heap_mb, data_bytes, data_scale,
                                 kafka_settings, timeout, sasl, ssl, kraft_layout)
        kafka_version = kafka_version or KAFKA_VERSION
        if engine == "kafka":
            from planner.kafka.jars import ensure_jars, parse_version
            from planner.sandbox.kafka_engine import check_can_mount, check_reproducible

            parse_version(kafka_version)
            check_reproducible(desc)
            if any(b.disk_bytes for b in desc.brokers):
                check_can_mount()          # before anything starts: no ZooKeeper or JVM to clean up after
            if broker_heap_mb < 128:
                raise BadInput("broker_heap_mb must be at least 128 (a Kafka broker does not start in less)")
            if data_scale is not None and data_scale < 0:
                raise BadInput("data_scale must not be negative")
            jars = ensure_jars(kafka_version)
        if chroot is not None:
            chroot = "/" + chroot.strip("/")
            if chroot == "/":
                chroot = None
        if zk is not None:
            target = zkmod.parse_connect(zk)
            if target.chroot and chroot and target.chroot != chroot:
                raise BadInput("give the chroot either in --zk or with --chroot, not both")
            chroot = target.chroot or chroot
            hosts = target.hosts
        else:
            hosts = None
        directory.mkdir(parents=True, exist_ok=True)
        info: dict[str, Any] = {"dir": str(directory), "engine": engine, "token": secrets.token_hex(16),
                                "brokers": [b.id for b in desc.brokers], "timing": settings.to_dict(),
                                "chroot": chroot, "zookeeper_pid": None, "zookeeper_started": False,
                                "daemon_pid": None, "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        sandbox_file = directory / SANDBOX_FILE
        try:
            if hosts is None:
                zk_dir = directory / "zookeeper"
                shutil.rmtree(zk_dir, ignore_errors=True)
                server = ZooKeeperServer(zk_dir, heap_mb=zk_heap_mb)
                log.info("starting ZooKeeper in %s", zk_dir)
                server.start()
                assert server.process is not None
                _CHILDREN[server.process.pid] = server.process
                hosts = server.connect_string
                info.update(zookeeper_pid=server.process.pid, zookeeper_started=True)
            info["zk_hosts"] = hosts
            info["connect"] = hosts + (chroot or "")
            write_json(sandbox_file, info, private=True)
            if chroot:
                with zkmod.session(hosts) as root:
                    root.ensure_path(chroot)
            log.info("writing %d brokers' cluster (%d partitions) to %s", len(desc.brokers), desc.num_partitions,
                     info["connect"])
            with zkmod.session(info["connect"]) as client:
                if client.exists(codec.TOPICS) is not None or client.exists(codec.BROKER_IDS) is not None:
                    raise BadInput(f"ZooKeeper {info['connect']} already holds a Kafka cluster; give a fresh chroot")
                if engine == "kafka":
                    return cls._up_kafka(directory, info, desc, jars, broker_heap_mb, data_bytes, data_scale,
                                         kafka_settings, timeout, sasl, ssl)
                loader.load_cluster(client, desc, brokers=False, controller=False)
                if client.exists(codec.CONTROLLER_EPOCH) is None:
                    client.create(codec.CONTROLLER_EPOCH, codec.encode_controller_epoch(desc.controller_epoch))
            write_json(directory / LOGDIRS_FILE, log_dirs_json(desc), compact=True)
            write_json(directory / DAEMON_CONFIG, {
                "connect": info["connect"], "token": info["token"], "timing": settings.to_dict(),
                "brokers": [{"id": b.id, "rack": b.rack, "host": b.host, "port": b.port, "alive": b.alive,
                             "disk_bytes": b.disk_bytes} for b in desc.brokers],
                "sizes": _sizes(desc),
                "first_controller": _explicit_controller(cluster, desc),
            }, private=True, compact=True)
            try:
                (directory / CONTROL_FILE).unlink()
            except FileNotFoundError:
                pass
            env = dict(os.environ)
            root = str(Path(__file__).resolve().parents[2])
            env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
            with open(directory / LOG_FILE, "ab") as logf:
                proc = subprocess.Popen([sys.executable, "-m", "planner.sandbox.daemon", "--dir", str(directory)],
                                        stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                        start_new_session=True, env=env, cwd=str(directory))
            _CHILDREN[proc.pid] = proc
            info["daemon_pid"] = proc.pid
            write_json(sandbox_file, info, private=True)
            deadline = time.monotonic() + 60
            while not (directory / CONTROL_FILE).exists():
                if proc.poll() is not None:
                    raise SandboxError(f"the sandbox daemon exited with code {proc.returncode}:\n{_log_tail(directory)}")
                if time.monotonic() > deadline:
                    raise SandboxError(f"the sandbox daemon did not start within 60s:\n{_log_tail(directory)}")
                time.sleep(0.05)
            log.info("sandbox daemon started (pid %d); waiting for the cluster to settle", proc.pid)
            sb = cls(directory)
            sb.wait_settled(timeout)
            return sb
        except BaseException:
            if sandbox_file.exists():
                try:
                    Sandbox(directory).down()
                except Exception:
                    pass
            raise

    @classmethod
    def _up_kafka(cls, directory: Path, info: dict[str, Any], desc: Cluster, jars: Any, heap_mb: int,
                  data_bytes: int | None, data_scale: float | None, settings: dict[str, Any] | None,
                  timeout: float, sasl: bool = False, ssl: bool = False) -> Sandbox:
        from planner.kafka import tls
        from planner.sandbox import kafka_engine as ke

        sizes, scale = ke.scaled_sizes(desc, data_bytes, data_scale)
        info["kafka"] = {"version": jars.version, "lib": str(jars.lib), "heap_mb": heap_mb,
                         "extra_settings": dict(settings or {}),
                         "brokers": ke.broker_records(directory, desc, sasl, ssl),
                         "sasl": {"mechanism": "PLAIN", "username": "kplan", "password": secrets.token_hex(12)}
                         if sasl else None,
                         "ssl": tls.make(directory / ke.KAFKA_DIR / "tls") if ssl else None,
                         "data": {"scale": scale, "bytes": sum(sizes.values())}}
        ke.write_info(directory, info)
        engine = ke.KafkaEngine(directory, info)
        figures = engine.bring_up(desc, sizes, timeout)
        engine.reload()
        engine.info["kafka"]["up"] = figures
        ke.write_info(directory, engine.info)
        write_json(directory / LOGDIRS_FILE, engine.log_dirs(), compact=True)
        log.info("kafka sandbox up in %.1fs: %s", figures["up_s"], engine.bootstrap)
        return cls(directory)

    @classmethod
    def _up_kraft(cls, directory: Path, desc: Cluster, settings: Timing, jars: Any, heap_mb: int,
                  data_bytes: int | None, data_scale: float | None, extra: dict[str, Any] | None, timeout: float,
                  sasl: bool, ssl: bool, layout: str = "separate") -> Sandbox:
        """KRaft nodes only (planner.sandbox.kraft_engine): no ZooKeeper, no daemon."""
        from planner.kafka import kraft, tls
        from planner.sandbox import kafka_engine as ke
        from planner.sandbox import kraft_engine as kre

        sizes, scale = ke.scaled_sizes(desc, data_bytes, data_scale)
        directory.mkdir(parents=True, exist_ok=True)
        nodes = kre.node_records(directory, desc, 1, sasl, ssl, layout)
        info: dict[str, Any] = {
            "dir": str(directory), "engine": "kraft", "token": secrets.token_hex(16),
            "brokers": [b.id for b in desc.brokers], "timing": settings.to_dict(), "chroot": None,
            "zookeeper_pid": None, "zookeeper_started": False, "daemon_pid": None,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "kafka": {"version": jars.version, "lib": str(jars.lib), "heap_mb": heap_mb, "mode": "kraft",
                      "cluster_id": kraft.new_cluster_id(), "extra_settings": dict(extra or {}), **nodes,
                      "sasl": {"mechanism": "PLAIN", "username": "kplan", "password": secrets.token_hex(12)}
                      if sasl else None,
                      "ssl": tls.make(directory / ke.KAFKA_DIR / "tls") if ssl else None,
                      "data": {"scale": scale, "bytes": sum(sizes.values())}}}
        ke.write_info(directory, info)
        try:
            engine = kre.KraftEngine(directory, info)
            figures = engine.bring_up(desc, sizes, timeout)
            engine.reload()
            engine.info["kafka"]["up"] = figures
            engine.info["bootstrap_servers"] = engine.bootstrap
            ke.write_info(directory, engine.info)
            write_json(directory / LOGDIRS_FILE, engine.log_dirs(), compact=True)
        except BaseException:
            try:
                Sandbox(directory).down()
            except Exception:
                pass
            raise
        log.info("kraft sandbox up in %.1fs: %s", figures["up_s"], engine.bootstrap)
        return cls(directory)

    def _kafka_alive(self) -> bool:
        if self.engine not in REAL_ENGINES:
            return False
        from planner.kafka.broker import find_brokers

        return bool(find_brokers(self.dir / "kafka"))

    def down(self, timeout: float = 20) -> dict[str, Any]:
        """Stop the brokers (kafka engine: SIGKILL of every broker JVM of this sandbox), the daemon and the
        ZooKeeper this sandbox started (by pid) and forget the sandbox."""
        report: dict[str, Any] = {"daemon_stopped": False, "zookeeper_stopped": False}
        if self.engine in REAL_ENGINES:
            from planner.sandbox.kafka_engine import KafkaEngine, read_info

            try:
                self.info = read_info(self.dir)  # another process may have recorded pids since we read it
            except (OSError, ValueError):
                pass
            report.update(KafkaEngine(self.dir, self.info).down())
        pid = self.daemon_pid
        if pid and self.daemon_alive():
            try:
                self._call("shutdown", {}, 10)
                answered = True
            except PlannerError:   # its loop is stuck (e.g. on a ZooKeeper that is gone): straight to SIGTERM
                answered = False
            deadline = time.monotonic() + (timeout if answered else 0.0)
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            for sig in (signal.SIGTERM, signal.SIGKILL):
                if not (pid_alive(pid) and _daemon_cmdline_matches(pid, self.dir)):
                    break
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    break
                deadline = time.monotonic() + 5
                while pid_alive(pid) and time.monotonic() < deadline:
                    time.sleep(0.05)
            report["daemon_stopped"] = True
        _reap(pid)
        zk_pid = self.zookeeper_pid
        if zk_pid and self.info.get("zookeeper_started"):
            report["zookeeper_stopped"] = stop_pid(zk_pid)
            _reap(zk_pid)
        for name in (SANDBOX_FILE, CONTROL_FILE):
            try:
                (self.dir / name).unlink()
            except FileNotFoundError:
                pass
        return report
