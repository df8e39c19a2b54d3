"""The `kafka` sandbox engine: real Apache Kafka broker JVMs (ZooKeeper mode) on the sandbox's real ZooKeeper.

There is no daemon: the broker JVMs are the long-running processes, ZooKeeper holds the state, and
D/sandbox.json records each broker's folder, port, pid and state (running, killed, stopped). Every command
works from that file and from what ZooKeeper shows, so any process can run it, and `down` works after the
process that ran `up` was killed (it also finds, by command line, a broker JVM whose pid never got recorded).

Up: the cluster's configs are written first (topic, per-broker and default-broker overrides, as
`kafka-configs` stores them), the broker JVMs start (racks, loopback listeners, log dirs under D), and once
every broker is registered and a controller elected, each topic is created the way Kafka's AdminZkClient
creates one: its config znode, then `/brokers/topics/<t>` with the description's exact replica assignment
and a fresh topic id. Kafka's controller then creates the partitions itself (leader = first live replica,
ISR = the live replicas). Data is produced into every partition, scaled to the described sizes under a cap,
and D/logdirs.json reports the sizes found on disk.

What a description can ask that real brokers cannot be told to be (a shrunk ISR, a leader other than the
first replica, a partition without state, a reassignment or preferred election in flight, a topic queued
for deletion) is refused before anything starts: use the emulated engine for those states, or reach them
with kill/stop/start, as on a real cluster.

Waiting is on conditions read from ZooKeeper, with deadlines (see `pending`): a kill returns once the
broker's session expired and the controller re-elected and shrank ISRs; `wait_settled` once no election is
pending and every replica on a live broker is back in its ISR.
"""

from __future__ import annotations

import base64
import fcntl
import json
import logging
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError

from planner import codec
from planner import zk as zkmod
from planner.cluster import Cluster
from planner.errors import BadInput, PlannerError
from planner.kafka import broker as kbroker
from planner.kafka import data as kdata
from planner.kafka.jars import KafkaJars, cached, ensure_jars
from planner.kafka.tls import broker_settings as tls_settings
from planner.sandbox.files import SANDBOX_FILE, write_json
from planner.sandbox.settings import Timing
from planner.sandbox.zkio import multi_read
from planner.zkserver import free_port, pid_alive

log = logging.getLogger("planner.sandbox.kafka")

KAFKA_DIR = "kafka"
LOCK_FILE = "sandbox.lock"
RUNNING, KILLED, STOPPED = "running", "killed", "stopped"
DEFAULT_DATA_BYTES = 64 * 1024 * 1024  # total payload produced by `up` unless told otherwise
POLL = 0.1


class KafkaSandboxError(PlannerError):
    """A real broker did not do what was asked in time (or died)."""


# ---------------------------------------------------------------------------------------- the file
@contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Serialise read-modify-write of sandbox.json between processes."""
    with open(directory / LOCK_FILE, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def read_info(directory: Path) -> dict[str, Any]:
    return json.loads((directory / SANDBOX_FILE).read_text())


def write_info(directory: Path, info: dict[str, Any]) -> None:
    write_json(directory / SANDBOX_FILE, info, private=True)


def update_brokers(directory: Path, changes: dict[int, dict[str, Any]]) -> dict[str, Any]:
    with locked(directory):
        info = read_info(directory)
        for b, ch in changes.items():
            info["kafka"]["brokers"][str(b)].update(ch)
        write_info(directory, info)
    return info


# ------------------------------------------------------------------------------------ description
def check_reproducible(desc: Cluster) -> None:
    """Refuse (BadInput, nothing started) what real brokers cannot be put into by creating topics."""
    problems: list[str] = []
    if desc.reassignment:
        problems.append("a reassignment in flight")
    if desc.preferred_election:
        problems.append("a pending preferred election")
    for t in desc.topics:
        if len({len(p.replicas) for p in t.partitions}) > 1:
            problems.append(f"topic {t.name} with partitions of different replication factors (Kafka's admin "
                            "path refuses that)")
        if t.deleting:
            problems.append(f"topic {t.name} queued for deletion")
        for i, p in enumerate(t.partitions):
            name = f"{t.name}-{i}"
            if not p.has_state:
                problems.append(f"{name} without a state znode")
            elif p.adding or p.removing:
                problems.append(f"{name} mid-reassignment")
            elif p.leader != p.replicas[0] or list(p.isr) != list(p.replicas):
                problems.append(f"{name} with leader {p.leader} / isr {p.isr} (real brokers start with "
                                f"leader {p.replicas[0]}, isr {p.replicas})")
            elif p.leader_recovery_state:
                problems.append(f"{name} recovering from an unclean election")
        if len(problems) > 12:
            break
    if problems:
        raise BadInput("the kafka engine creates topics as Kafka's admin tools do and cannot reproduce: "
                       + "; ".join(problems[:12]) + (" ..." if len(problems) > 12 else "")
                       + ". Use --engine emulated for such states, or reach them with kill/stop/start.")
    known = {b.id for b in desc.brokers}
    for t in desc.topics:
        for i, p in enumerate(t.partitions):
            unknown = [r for r in p.replicas if r not in known]
            if unknown:
                raise BadInput(f"{t.name}-{i} names brokers {unknown} that the description does not list")


def new_topic_id() -> str:
    """Kafka's Uuid.randomUuid().toString(): URL-safe base64 of 16 random bytes, no padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def scaled_sizes(desc: Cluster, data_bytes: int | None, data_scale: float | None) -> tuple[dict[tuple[str, int], int], float]:
    """Payload bytes to produce per partition: described size x scale, where the scale is given, or the
    largest <= 1 that keeps the total under `data_bytes`."""
    described = {(t.name, i): int(p.size_bytes or 0) for t in desc.topics for i, p in enumerate(t.partitions)}
    total = sum(described.values())
    if data_scale is None:
        cap = DEFAULT_DATA_BYTES if data_bytes is None else int(data_bytes)
        data_scale = min(1.0, cap / total) if total else 1.0
    return {k: int(v * data_scale) for k, v in described.items()}, float(data_scale)


# ------------------------------------------------------------------------------------ ZooKeeper view
@dataclass
class View:
    """What ZooKeeper shows at one moment (read in a few multi-reads; not atomic, so waits re-check)."""

    registered: dict[int, int]                 # broker -> czxid of its registration
    controller: int | None
    controller_epoch: int | None
    topics: dict[str, codec.TopicAssignment]
    states: dict[tuple[str, int], tuple[int, list[int], int, int]]  # leader, isr, leader_epoch, version
    unclean: dict[str, bool]
    min_isr: dict[str, int]
    reassign_znode: bool
    preferred_znode: bool
    kraft_controller: bool = False             # /controller names a KRaft controller (a migration, KIP-866)

    def fingerprint(self) -> tuple:
        return (tuple(sorted(self.registered.items())), self.controller, self.controller_epoch,
                tuple(sorted((k, v[3]) for k, v in self.states.items())))


def _cfg(res: Any, path: str) -> dict[str, str]:
    if isinstance(res, Exception):
        return {}
    try:
        return codec.decode_config(res[0], path)
    except PlannerError:
        return {}


def read_view(client: KazooClient, unclean_default: bool, topics_only: Iterable[str] | None = None) -> View:
    ids = [i for i in (client.get_children(codec.BROKER_IDS) if client.exists(codec.BROKER_IDS) else []) if i.isdigit()]
    reg = {}
    for i, res in zip(ids, multi_read(client, [codec.broker_path(int(i)) for i in ids]), strict=True):
        if not isinstance(res, Exception):
            reg[int(i)] = res[1].czxid
    ctrl = None
    epoch = None
    kraft_ctrl = False
    res = multi_read(client, [codec.CONTROLLER, codec.CONTROLLER_EPOCH, codec.REASSIGN, codec.PREFERRED_ELECTION,
                              codec.broker_config_path(codec.DEFAULT_BROKER_ENTITY)])
    if not isinstance(res[0], Exception):
        c = codec.decode_controller(res[0][0])
        ctrl, kraft_ctrl = c.broker_id, c.migrating_to_kraft
    if not isinstance(res[1], Exception):
        epoch = codec.decode_controller_epoch(res[1][0])
    default_cfg = _cfg(res[4], codec.broker_config_path(codec.DEFAULT_BROKER_ENTITY))
    names = sorted(client.get_children(codec.TOPICS)) if client.exists(codec.TOPICS) else []
    if topics_only is not None:
        wanted = set(topics_only)
        names = [t for t in names if t in wanted]
    topics: dict[str, codec.TopicAssignment] = {}
    for t, r in zip(names, multi_read(client, [codec.topic_path(t) for t in names]), strict=True):
        if not isinstance(r, Exception):
            topics[t] = codec.decode_topic(t, r[0])
    keys = [(t, p) for t, ta in topics.items() for p in sorted(ta.partitions)]
    states = {}
    for k, r in zip(keys, multi_read(client, [codec.state_path(t, p) for t, p in keys]), strict=True):
        if not isinstance(r, Exception):
            st = codec.decode_partition_state(r[0], codec.state_path(*k))
            states[k] = (st.leader, list(st.isr), st.leader_epoch, r[1].version)
    cfgs = multi_read(client, [codec.topic_config_path(t) for t in topics])
    base_unclean = default_cfg.get("unclean.leader.election.enable")
    base = unclean_default if base_unclean is None else base_unclean.strip().lower() == "true"
    unclean, min_isr = {}, {}
    for t, r in zip(topics, cfgs, strict=True):
        c = _cfg(r, codec.topic_config_path(t))
        u = c.get("unclean.leader.election.enable")
        unclean[t] = base if u is None else u.strip().lower() == "true"
        min_isr[t] = int(c.get("min.insync.replicas", default_cfg.get("min.insync.replicas", "1")))
    return View(reg, ctrl, epoch, topics, states, unclean, min_isr,
                not isinstance(res[2], Exception), not isinstance(res[3], Exception), kraft_ctrl)


def pending(view: View, catch_up: bool = True, gone: Iterable[int] = ()) -> list[str]:
    """What the controller (and, with catch_up, the replicas) still have to do, as far as ZooKeeper shows;
    empty when nothing is left. Kafka's rules (docs/KAFKA_ZK.md §2) in the form of end conditions:
    - a leader is a registered broker, or -1 only when no ISR member (and, where unclean election is on, no
      replica) is registered: otherwise an election is still to come;
    - an ISR holds an unregistered broker only as its last member of a leaderless partition;
    - no broker in `gone` (just killed or stopped) is registered any more;
    - with catch_up: every replica of the target on a registered broker is in the ISR of a led partition,
      and no reassignment whose targets are all registered is running."""
    out: list[str] = []
    live = view.registered
    for b in gone:
        if b in live:
            out.append(f"broker {b} still registered")
    if not live:
        return out
    if view.controller is None or (view.controller not in live and not view.kraft_controller):
        out.append("no controller")
        return out
    if view.preferred_znode:
        out.append("preferred election pending")
    for t, ta in view.topics.items():
        for p, reps in ta.partitions.items():
            st = view.states.get((t, p))
            if st is None:
                if any(r in live for r in reps):
                    out.append(f"{t}-{p}: no state yet")
                continue
            leader, isr, _, _ = st
            dead_isr = [r for r in isr if r not in live]
            if leader >= 0 and leader not in live:
                out.append(f"{t}-{p}: leader {leader} is gone")
            elif leader < 0 and any(r in live for r in isr):
                out.append(f"{t}-{p}: offline with a live ISR member")
            elif leader < 0 and view.unclean.get(t) and any(r in live for r in reps):
                out.append(f"{t}-{p}: offline, unclean election allowed")
            if dead_isr and not (leader < 0 and len(isr) == 1):
                out.append(f"{t}-{p}: ISR {isr} holds dead brokers")
            if catch_up:
                removing = set(ta.removing_replicas.get(p, []))
                target = [r for r in reps if r not in removing]
                if leader >= 0 and any(r in live and r not in isr for r in target):
                    out.append(f"{t}-{p}: replicas catching up")
                if (ta.adding_replicas.get(p) or removing) and all(r in live for r in target):
                    out.append(f"{t}-{p}: reassigning")
        if len(out) > 50:
            break
    return out


# --------------------------------------------------------------------------------------- the engine
@dataclass
class BrokerRecord:
    id: int
    dir: Path
    port: int
    rack: str | None
    pid: int | None
    state: str

    @classmethod
    def from_info(cls, b: str, d: dict[str, Any]) -> BrokerRecord:
        return cls(int(b), Path(d["dir"]), int(d["port"]), d.get("rack"), d.get("pid"), d["state"])

    @property
    def config_path(self) -> Path:
        return self.dir / "server.properties"

    @property
    def process_alive(self) -> bool:
        return bool(self.pid) and kbroker.is_broker(int(self.pid), self.config_path)


EXEC_GRACE = 2.0   # seconds a live pid may take to show its broker's command line again


def _still_running(r: Any) -> bool:
    """Is the node of record `r` (state running) still running? Its pid alive and naming its server.properties.
    /proc/<pid>/cmdline does not always say so at once: a JVM launched a moment ago reads empty while its exec
    completes (seen 3 ms after Popen returned), and a broker that ran on (its log said `started`, nothing
    stopped it) was once judged gone during test_kafka_sandbox's set-up, the misread's cause not found. So a
    live pid gets EXEC_GRACE to show it again; a pid that is gone is gone at once."""
    if not r.pid:
        return False
    deadline = time.monotonic() + EXEC_GRACE
    while pid_alive(int(r.pid)):
        if r.process_alive:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL / 10)
    return False


_CHILDREN: dict[int, subprocess.Popen] = {}


def _reap(pid: int | None) -> int | None:
    """Wait for a broker JVM this process started; its exit status (Popen's: -N for signal N), or None when
    it is not a child of this process or still runs."""
    p = _CHILDREN.pop(pid, None) if pid else None
    if p is not None:
        try:
            return p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    return None


def _exit_status(code: int | None) -> str:
    """How a broker JVM ended, for the error that says it is gone. Kafka logs before it exits or halts
    (Kafka.scala, ReplicaFetcherThread, LogDirFailureHandler: fatal, then Exit.exit / Exit.halt); a SIGKILL
    leaves no line at all and comes from outside the JVM."""
    if code is None:
        return "exit status unknown (not started by this process, or still running)"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}" + (" (sent from outside the JVM)" if -code == signal.SIGKILL else "")
    return f"exit code {code}"


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


@dataclass
class KafkaEngine:
    directory: Path
    info: dict[str, Any] = field(repr=False)

    # ------------------------------------------------------------------------------------- basics
    @property
    def kinfo(self) -> dict[str, Any]:
        return self.info["kafka"]

    @property
    def timing(self) -> Timing:
        return Timing(**self.info.get("timing", {}))

    def reload(self) -> None:
        self.info = read_info(self.directory)

    def records(self) -> dict[int, BrokerRecord]:
        return {int(b): BrokerRecord.from_info(b, d) for b, d in self.kinfo["brokers"].items()}

    def jars(self) -> KafkaJars:
        hit = cached(self.kinfo["version"])
        return hit if hit is not None else ensure_jars(self.kinfo["version"])

    @property
    def bootstrap(self) -> str:
        recs = self.records()
        return ",".join(f"127.0.0.1:{r.port}" for r in recs.values() if r.state == RUNNING)

    def pids(self) -> dict[int, int]:
        return {b: int(r.pid) for b, r in self.records().items() if r.state == RUNNING and r.pid}

    def view(self, client: KazooClient, topics: Iterable[str] | None = None) -> View:
        return read_view(client, self.timing.unclean_default, topics)

    def spec(self, rec: BrokerRecord) -> kbroker.BrokerSpec:
        t = self.timing
        settings = kbroker.broker_settings(t.session_timeout, t.shutdown_retries, t.shutdown_retry_interval,
                                           t.auto_rebalance, t.rebalance_interval, t.imbalance_pct,
                                           t.unclean_default)
        extra = self.kinfo.get("extra_settings", {})
        settings.update({k: v for k, v in extra.items() if not isinstance(v, dict)})
        settings.update(extra.get(str(rec.id), {}))   # a broker id as key: that broker's own entries
        sasl = self.kinfo.get("sasl") or {}
        tls = self.kinfo.get("ssl")
        ports = self.kinfo["brokers"][str(rec.id)]
        return kbroker.BrokerSpec(rec.id, rec.dir, rec.port, self.info["connect"], rec.rack,
                                  int(self.kinfo.get("heap_mb", 256)), settings,
                                  sasl_port=ports.get("sasl_port"),
                                  sasl_users={sasl["username"]: sasl["password"]} if sasl else {},
                                  ssl_port=ports.get("ssl_port") if tls else None,
                                  ssl_settings=tls_settings(tls) if tls else {})

    def _launch(self, recs: list[BrokerRecord]) -> None:
        cp = self.jars().classpath
        for rec in recs:
            mount_log_dir(self.kinfo["brokers"][str(rec.id)])
            spec = self.spec(rec)
            kbroker.write_config(spec)
            proc = kbroker.launch(spec, cp)
            _CHILDREN[proc.pid] = proc
            # recorded at once: a `down` from anywhere finds it even if this process dies next
            self.info = update_brokers(self.directory, {rec.id: {"pid": proc.pid, "state": RUNNING}})
            log.info("broker %d: JVM %d started (port %d)", rec.id, proc.pid, rec.port)

    def _watched(self, ids: Iterable[int]) -> list[tuple[str, Any]]:
        """The nodes a wait watches: these brokers (the kraft engine adds its controllers)."""
        recs = self.records()
        return [("broker", recs[b]) for b in ids]

    def _check_alive(self, ids: Iterable[int]) -> None:
        """Every watched node that should run still runs."""
        for kind, r in self._watched(ids):
            if r.state != RUNNING or _still_running(r):
                continue
            status = _exit_status(_reap(r.pid))
            raise KafkaSandboxError(f"{kind} {r.id}'s JVM (pid {r.pid}) is gone, {status}; its last log lines:\n"
                                    f"{_tail(r.dir / 'server.log')}\n{_tail(r.dir / 'stdout.log', 10)}")

    def _wait(self, client: KazooClient, what: str, timeout: float, check: Callable[[View], list[str]],
              stable: int = 2, watch: Iterable[int] = ()) -> tuple[View, float]:
        """Poll ZooKeeper until `check` finds nothing left, `stable` reads in a row; returns the view and
        the seconds waited. Raises naming what was still pending at the deadline."""
        def look() -> tuple[View, list[str], Any]:
            v = self.view(client)
            return v, check(v), v.fingerprint()

        return self._settle(what, timeout, look, stable, watch)

    def _settle(self, what: str, timeout: float, look: Callable[[], tuple[Any, list[str], Any]], stable: int,
                watch: Iterable[int]) -> tuple[Any, float]:
        """The wait of both engines: `look()` reads the cluster once (its view, what is still pending, a
        fingerprint of the view) until nothing is pending in `stable` reads in a row of the same view, while
        the watched nodes must keep running; returns the view and the seconds waited."""
        started = time.monotonic()
        deadline = started + timeout
        ok_in_row, last_fp = 0, None
        while True:
            self._check_alive(watch)
            v, left, fp = look()
            if not left:
                ok_in_row = ok_in_row + 1 if fp == last_fp or stable <= 1 else 1
                if ok_in_row >= stable:
                    return v, time.monotonic() - started
            else:
                ok_in_row = 0
            last_fp = fp
            if time.monotonic() > deadline:
                raise KafkaSandboxError(f"{what}: not done within {timeout:.0f}s; still pending: "
                                        + "; ".join(left[:10]))
            time.sleep(POLL)

    def _ids(self, ids: list[int], want: str) -> list[int]:
        recs = self.records()
        unknown = [b for b in ids if b not in recs]
        if unknown:
            raise BadInput(f"unknown broker id(s) {unknown}: this sandbox has brokers {sorted(recs)}")
        if len(set(ids)) != len(ids):
            raise BadInput(f"broker ids {ids} name a broker twice")
        for b in ids:
            running = recs[b].state == RUNNING
            if want == RUNNING and not running:
                raise BadInput(f"broker {b} is not running")
            if want != RUNNING and running:
                raise BadInput(f"broker {b} is already running")
        return ids

    # ---------------------------------------------------------------------------------------- up
    def bring_up(self, desc: Cluster, sizes: dict[tuple[str, int], int], timeout: float) -> dict[str, Any]:
        started = time.monotonic()
        with zkmod.session(self.info["connect"]) as client:
            self._write_configs(client, desc)
            alive = [b.id for b in desc.brokers if b.alive]
            recs = self.records()
            self._launch([recs[b] for b in alive])
            self._wait(client, "brokers registering", timeout,
                       lambda v: [f"broker {b} not registered" for b in alive if b not in v.registered]
                       + ([] if v.controller in v.registered else ["no controller"]), stable=1, watch=alive)
            registered_s = time.monotonic() - started
            self._create_topics(client, desc)
            self._wait(client, "partitions created", timeout, lambda v: pending(v, catch_up=True), watch=alive)
            created_s = time.monotonic() - started
            written = kdata.produce(self.bootstrap, sizes) if any(sizes.values()) else {}
            self._wait(client, "replicas catching up", timeout, lambda v: pending(v, catch_up=True), watch=alive)
        return {"registered_s": round(registered_s, 2), "topics_s": round(created_s, 2),
                "up_s": round(time.monotonic() - started, 2), "records": sum(written.values()),
                "bytes": sum(sizes.values())}

    def _write_configs(self, client: KazooClient, desc: Cluster) -> None:
        """Dynamic configs as kafka-configs stores them, before any broker starts (brokers read them then)."""
        client.ensure_path(codec.CONFIG_TOPICS)
        client.ensure_path(codec.CONFIG_BROKERS)
        client.ensure_path(codec.CONFIG_CHANGES)
        if desc.broker_defaults:
            client.create(codec.broker_config_path(codec.DEFAULT_BROKER_ENTITY), codec.encode_config(desc.broker_defaults))
        for b in desc.brokers:
            if b.config:
                client.create(codec.broker_config_path(b.id), codec.encode_config(b.config))

    def _create_topics(self, client: KazooClient, desc: Cluster) -> None:
        """AdminZkClient.createTopicWithAssignment: the config znode first, then the assignment."""
        for t in desc.topics:
            create_topic(client, t.name, [p.replicas for p in t.partitions], t.config)
        log.info("created %d topics (%d partitions)", len(desc.topics), desc.num_partitions)

    # ----------------------------------------------------------------------------------- commands
    def kill(self, ids: list[int], timeout: float) -> dict[str, Any]:
        ids = self._ids(ids, RUNNING)
        recs = self.records()
        sent = time.monotonic()
        for b in ids:
            kbroker.kill_broker(int(recs[b].pid or 0), recs[b].config_path)
        self._wait_exit([recs[b] for b in ids], 30)
        self.info = update_brokers(self.directory, {b: {"state": KILLED} for b in ids})
        self._await_gone(ids, f"controller reaction to the kill of {ids}", timeout)
        return {"killed": ids, "controller_reacted_s": round(time.monotonic() - sent, 2)}

    def stop(self, ids: list[int], timeout: float) -> dict[str, Any]:
        ids = self._ids(ids, RUNNING)
        recs = self.records()
        offsets = {b: _size(recs[b].dir / "server.log") for b in ids}
        sent = time.monotonic()
        for b in ids:  # in the order given: each broker then sends its own ControlledShutdown request
            kbroker.terminate_broker(int(recs[b].pid or 0), recs[b].config_path)
        self._wait_exit([recs[b] for b in ids], timeout)
        stopped_s = time.monotonic() - sent
        self.info = update_brokers(self.directory, {b: {"state": STOPPED} for b in ids})
        report = {str(b): self._shutdown_report(recs[b].dir / "server.log", offsets[b]) for b in ids}
        self._await_gone(ids, f"controller reaction to the stop of {ids}", timeout)
        return {"stopped": ids, "brokers": report, "stopped_s": round(stopped_s, 2)}

    def _await_gone(self, ids: list[int], what: str, timeout: float) -> None:
        """Until the controller has reacted to these brokers leaving (their partitions led and followed elsewhere
        or offline), while the others keep running."""
        with _session(self) as client:
            self._wait(client, what, timeout, lambda v: pending(v, catch_up=False, gone=ids), watch=self.pids())

    def _shutdown_report(self, server_log: Path, offset: int) -> dict[str, Any]:
        """What a stopped broker's log says of its controlled shutdown, from `offset` on."""
        return shutdown_report(server_log, offset)

    def start(self, ids: list[int], timeout: float) -> dict[str, Any]:
        ids = self._ids(ids, STOPPED)
        recs = self.records()
        self._launch([recs[b] for b in ids])
        with _session(self) as client:
            v, _ = self._wait(client, f"brokers {ids} registering", timeout,
                              lambda v: [f"broker {b} not registered" for b in ids if b not in v.registered]
                              + pending(v, catch_up=False), watch=ids)
        return {"started": ids, "epochs": {str(b): v.registered.get(b) for b in ids}}

    def wait_settled(self, timeout: float) -> dict[str, Any]:
        with _session(self) as client:
            self._wait(client, "settling", timeout, lambda v: pending(v, catch_up=True), watch=self.pids())
        return self.status()

    def _wait_exit(self, recs: list[BrokerRecord], timeout: float) -> None:
        """Until each signalled JVM is gone entirely. Not only until its command line stops naming its
        server.properties: once a JVM's main thread has returned (Kafka.main after awaitShutdown)
        /proc/<pid>/cmdline reads empty while the shutdown hook still runs and still holds the log dir's lock,
        and a broker started again then would fail to take it. The pids were checked to be these brokers when
        they were signalled, a moment ago."""
        deadline = time.monotonic() + timeout
        for r in recs:
            while r.pid and pid_alive(int(r.pid)):
                if time.monotonic() > deadline:
                    raise KafkaSandboxError(f"broker {r.id} (pid {r.pid}) did not exit within {timeout:.0f}s")
                time.sleep(POLL)
            _reap(r.pid)

    # ------------------------------------------------------------------------------------- status
    def status(self, limit: int = 1000) -> dict[str, Any]:
        recs = self.records()
        with _session(self) as client:
            v = self.view(client)
        left = pending(v, catch_up=True)
        brokers = []
        for b, r in sorted(recs.items()):
            alive = r.state == RUNNING and r.process_alive
            brokers.append({"id": b, "rack": r.rack, "running": alive, "state": r.state if alive or r.state != RUNNING
                            else "crashed", "shutting_down": False, "epoch": v.registered.get(b),
                            "registered_for_controller": b in v.registered, "pid": r.pid if alive else None,
                            "port": r.port})
        offline, under, under_min, reassigning = [], [], [], []
        n_off = n_under = n_min = 0
        for t, ta in v.topics.items():
            for p, reps in ta.partitions.items():
                st = v.states.get((t, p))
                if st is None:
                    continue
                leader, isr = st[0], st[1]
                removing = set(ta.removing_replicas.get(p, []))
                rf = len([r for r in reps if r not in removing])
                if leader < 0 or leader not in v.registered:
                    n_off += 1
                    if len(offline) < limit:
                        offline.append({"topic": t, "partition": p, "leader": leader, "isr": isr})
                if len(isr) < rf:
                    n_under += 1
                    if len(under) < limit:
                        under.append({"topic": t, "partition": p, "replicas": reps, "isr": isr})
                if len(isr) < min(v.min_isr.get(t, 1), rf):
                    n_min += 1
                    if len(under_min) < limit:
                        under_min.append({"topic": t, "partition": p, "isr": isr})
                if (ta.adding_replicas.get(p) or removing) and len(reassigning) < limit:
                    reassigning.append({"topic": t, "partition": p, "replicas": reps,
                                        "adding": ta.adding_replicas.get(p, []), "removing": sorted(removing),
                                        "isr": isr, "stuck_on_dead_brokers": [r for r in reps if r not in removing
                                                                              and r not in isr and r not in v.registered]})
        return {
            "engine": "kafka", "kafka_version": self.kinfo["version"], "bootstrap_servers": self.bootstrap,
            "brokers": brokers, "settled": not left, "pending": left[:20],
            "controller": {"broker": v.controller, "epoch": v.controller_epoch} if v.controller is not None else None,
            "topics": len(v.topics), "partitions": sum(len(ta.partitions) for ta in v.topics.values()),
            "offline_count": n_off, "offline": offline, "under_replicated_count": n_under,
            "under_replicated": under, "under_min_isr_count": n_min, "under_min_isr": under_min,
            "reassigning_count": sum(1 for ta in v.topics.values() for p in ta.partitions
                                     if ta.adding_replicas.get(p) or ta.removing_replicas.get(p)),
            "reassigning": reassigning, "shutting_down": [], "replication": {}, "stats": {},
        }

    # --------------------------------------------------------------------------------------- down
    def down(self, timeout: float = 30) -> dict[str, Any]:
        """SIGKILL every broker JVM of this sandbox (recorded pids, and any found by command line), until
        half a second passes with none found: a starter killed between fork and exec leaves a child that
        becomes a broker JVM a moment later, with its pid recorded nowhere."""
        killed: set[int] = set()
        deadline = time.monotonic() + timeout
        quiet_since: float | None = None
        while True:
            targets: dict[int, Path] = {}
            for r in self.records().values():
                if r.pid and kbroker.is_broker(int(r.pid), r.config_path):
                    targets[int(r.pid)] = r.config_path
            targets.update(kbroker.find_brokers(self.directory / KAFKA_DIR))
            for pid, cfg in targets.items():
                kbroker.kill_broker(pid, cfg)
                killed.add(pid)
            for pid in targets:
                while pid_alive(pid) and time.monotonic() < deadline:
                    time.sleep(0.05)
                _reap(pid)
            now = time.monotonic()
            left = [pid for pid in targets if pid_alive(pid)]
            if left and now > deadline:
                raise KafkaSandboxError(f"broker JVMs {left} did not exit after SIGKILL")
            if targets:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = now
            elif now - quiet_since >= 0.5:
                break
            if now > deadline:
                raise KafkaSandboxError(f"broker JVMs of {self.directory} kept appearing for {timeout:.0f}s")
            time.sleep(0.1)
        return {"brokers_killed": sorted(killed), "volumes_unmounted": unmount_log_dirs(self.directory)}

    # --------------------------------------------------------------------------------------- data
    def produce(self, sizes: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        return kdata.produce(self.bootstrap, sizes)

    def log_end_offsets(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return kdata.log_end_offsets(self.bootstrap, partitions)

    def log_dirs(self) -> dict[str, Any]:
        return kdata.log_dirs_report({r.id: r.dir / "data" for r in self.records().values()})

    def endpoints(self, protocol: str = "PLAINTEXT") -> dict[int, str]:
        """Each broker's listener of that protocol, host:port."""
        key = {"PLAINTEXT": "port", "SASL_PLAINTEXT": "sasl_port", "SSL": "ssl_port"}.get(protocol)
        if key is None:
            raise BadInput(f"a kafka sandbox has no {protocol} listener (PLAINTEXT, SASL_PLAINTEXT, SSL)")
        return {int(b): f"127.0.0.1:{d[key]}" for b, d in self.kinfo["brokers"].items() if d.get(key)}


@contextmanager
def _session(engine: KafkaEngine) -> Iterator[KazooClient]:
    with zkmod.session(engine.info["connect"]) as client:
        yield client


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def create_topic(client: KazooClient, name: str, assignment: list[list[int]], config: dict[str, str] | None = None,
                 topic_id: str | None = None) -> str:
    """A topic as Kafka's AdminZkClient creates it: `/config/topics/<t>`, then `/brokers/topics/<t>` (v3,
    the exact replica lists, a topic id). The controller creates the partitions when it sees the znode."""
    if not codec.is_valid_topic_name(name):
        raise BadInput(f"{name!r} is not a legal Kafka topic name")
    if not assignment or len({len(r) for r in assignment}) != 1:
        raise BadInput(f"topic {name}: every partition needs the same, non-zero number of replicas")
    tid = topic_id or new_topic_id()
    ta = codec.TopicAssignment({i: list(r) for i, r in enumerate(assignment)}, topic_id=tid, version=3)
    cfg_path = codec.topic_config_path(name)
    try:
        client.create(cfg_path, codec.encode_config(dict(config or {})), makepath=True)
    except NodeExistsError:
        client.set(cfg_path, codec.encode_config(dict(config or {})))
    client.create(codec.topic_path(name), codec.encode_topic(ta), makepath=True)
    return tid


# ------------------------------------------------------------------------------- controlled shutdown
_OK = re.compile(r"Controlled shutdown request returned successfully")
_ATTEMPT = re.compile(r"Controlled shutdown request returned after|Error during controlled shutdown")
_REMAINING = re.compile(r"Remaining partitions to move during controlled shutdown: \[(.*)\]")
_PART = re.compile(r"topicName='([^']*)', partitionIndex=(\d+)")
_UNCLEAN = re.compile(r"Proceeding to do an unclean shutdown")


def shutdown_report(server_log: Path, offset: int = 0) -> dict[str, Any]:
    """What a broker's own log says about its controlled shutdown (KafkaServer.controlledShutdown): attempts,
    success, and the partitions it still led after the last failed attempt."""
    try:
        with open(server_log, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        text = ""
    attempts = len(_ATTEMPT.findall(text)) + len(_OK.findall(text))
    remaining = _REMAINING.findall(text)
    still = sorted({f"{t}-{p}" for t, p in _PART.findall(remaining[-1])}) if remaining else []
    ok = bool(_OK.search(text))
    return {"attempts": attempts, "succeeded": ok, "still_leading": [] if ok else still,
            "unclean_shutdown": bool(_UNCLEAN.search(text))}


def broker_records(directory: Path, desc: Cluster, sasl: bool = False, ssl: bool = False
                   ) -> dict[str, dict[str, Any]]:
    out = {}
    for b in desc.brokers:
        out[str(b.id)] = {"dir": str(directory / KAFKA_DIR / f"broker-{b.id}"), "port": free_port(),
                          "rack": b.rack, "pid": None, "state": STOPPED,
                          "sasl_port": free_port() if sasl else None, "ssl_port": free_port() if ssl else None,
                          "disk_bytes": b.disk_bytes}
    return out


# ------------------------------------------------------------------------------------ log-dir volumes
MOUNT_HELP = ("disk_bytes for the kafka engine gives each broker's log dir a volume of exactly that size (a tmpfs "
              "mounted there), which needs mount rights: root with CAP_SYS_ADMIN; or describe the brokers without "
              "disk_bytes")


def check_can_mount() -> None:
    """Refuse at once, with one line, where `mount_log_dir` would fail: a tiny tmpfs mounted and unmounted on a
    scratch folder (not root, or root without CAP_SYS_ADMIN, as in an unprivileged container). `mount` never
    waits for input, and a time limit guards against one that would."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kplan-mount-check-") as d:
        try:
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4096,mode=0700", "tmpfs", d],
                                  capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise BadInput(f"{MOUNT_HELP}; mount could not run: {e}") from None
        if done.returncode != 0:
            why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[0]
            raise BadInput(f"{MOUNT_HELP}; mounting is not possible here ({why})")
        subprocess.run(["umount", d], capture_output=True, timeout=20, stdin=subprocess.DEVNULL)


def mount_log_dir(rec: dict[str, Any]) -> None:
    """A broker described with `disk_bytes` gets its own volume of exactly that size (a tmpfs mounted on its
    log dir), so DescribeLogDirs reports that TotalBytes and a full disk is real. Needs mount rights (root)."""
    size = rec.get("disk_bytes")
    if not size:
        return
    data = Path(rec["dir"]) / "data"
    data.mkdir(parents=True, exist_ok=True)
    if _mounted(data):
        return
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={int(size)},mode=0755", "tmpfs", str(data)],
                              capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BadInput(f"{MOUNT_HELP}; mount could not run: {e}") from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[0]
        raise BadInput(f"{MOUNT_HELP}; mounting {data} failed ({why})")


def unmount_log_dirs(directory: Path) -> list[str]:
    """Unmount every volume `mount_log_dir` put under this sandbox (by /proc/mounts, so it works after a crash)."""
    prefix = str((directory / KAFKA_DIR).resolve()) + "/"
    done = []
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return done
    for line in mounts:
        parts = line.split()
        if len(parts) > 2 and parts[2] == "tmpfs" and parts[1].startswith(prefix):
            try:
                if subprocess.run(["umount", parts[1]], capture_output=True, timeout=20,
                                  stdin=subprocess.DEVNULL).returncode == 0:
                    done.append(parts[1])
            except subprocess.TimeoutExpired:
                log.warning("umount %s did not return within 20 s", parts[1])
    return done


def _mounted(path: Path) -> bool:
    try:
        target = str(path.resolve())
        return any(line.split()[1] == target for line in Path("/proc/mounts").read_text().splitlines())
    except (OSError, IndexError):
        return False

