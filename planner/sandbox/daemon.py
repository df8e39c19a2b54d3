"""The sandbox daemon: one background process that hosts every emulated broker of a sandbox and the
controller running in one of them (`python -m planner.sandbox.daemon --dir D`).

Everything happens on one event loop thread, as in Kafka's controller event thread: ZooKeeper watch
callbacks, commands and timers only queue work for it. Commands arrive on a local control channel (a TCP
socket on 127.0.0.1 whose port is in D/control.json; one JSON line per request carrying the sandbox's token,
one JSON line back). Logs go to D/sandbox.log.

Commands: ping, status, kill, stop, start, wait_settled, shutdown. kill/stop/start answer once the controller
has acted on the change in ZooKeeper; wait_settled answers once nothing is left to happen: no queued event,
no controlled shutdown in progress, no replica that can still catch up, checked across two ZooKeeper sync
barriers on every broker session (so watch events for writes made before the call have been handled).
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import itertools
import json
import logging
import os
import queue
import signal
import socketserver
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from kazoo.client import KazooClient
from kazoo.protocol.states import Callback
from kazoo.retry import KazooRetry

from planner.sandbox.broker import Broker
from planner.sandbox.controller import BrokerNotAvailable, Controller
from planner.sandbox.replication import ConfigCache, Replication
from planner.sandbox.settings import Timing
from planner.sandbox.wire import DEFAULT_DISK, Endpoint, LogDirState, stop_servers
from planner.sandbox.zkio import ControllerMoved

log = logging.getLogger("planner.sandbox.daemon")

DAEMON_CONFIG = "daemon.json"
CONTROL_FILE = "control.json"
LOG_FILE = "sandbox.log"
STOP_GRACE = 3.0   # seconds a SIGTERM may take before the daemon leaves without finishing its stop


class BadRequest(Exception):
    """A command the sandbox cannot carry out as asked (unknown broker, broker not running...)."""


# ----------------------------------------------------------------------------------------------- loop
class Timer:
    __slots__ = ("when", "seq", "fn", "args", "cancelled")

    def __init__(self, when: float, seq: int, fn: Callable[..., Any], args: tuple):
        self.when, self.seq, self.fn, self.args, self.cancelled = when, seq, fn, args, False

    def cancel(self) -> None:
        self.cancelled = True

    def __lt__(self, other: Timer) -> bool:
        return (self.when, self.seq) < (other.when, other.seq)


class Loop:
    """A single-threaded event loop: `post` is thread-safe, `call_later` is for the loop thread only."""

    def __init__(self) -> None:
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._timers: list[Timer] = []
        self._seq = itertools.count()
        self.running = True
        self.after: Callable[[], None] | None = None
        self.thread: threading.Thread | None = None

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        self._q.put((fn, args))

    def call_later(self, delay: float, fn: Callable[..., Any], *args: Any) -> Timer:
        t = Timer(time.monotonic() + delay, next(self._seq), fn, args)
        heapq.heappush(self._timers, t)
        return t

    def pending(self) -> int:
        return self._q.qsize()

    def _run(self, fn: Callable[..., Any], args: tuple) -> None:
        try:
            fn(*args)
        except ControllerMoved:
            pass  # the controller already resigned; another broker takes over
        except Exception:
            log.exception("error in %s", getattr(fn, "__qualname__", fn))
        if self.after is not None:
            try:
                self.after()
            except Exception:
                log.exception("error while answering waiters")

    def run(self) -> None:
        self.thread = threading.current_thread()
        while self.running:
            now = time.monotonic()
            while self._timers and self._timers[0].when <= now and self.running:
                t = heapq.heappop(self._timers)
                if not t.cancelled:
                    self._run(t.fn, t.args)
            timeout = min(1.0, max(0.0, self._timers[0].when - time.monotonic())) if self._timers else 1.0
            try:
                fn, args = self._q.get(timeout=timeout)
            except queue.Empty:
                continue
            self._run(fn, args)


# -------------------------------------------------------------------------------------------- replies
class Reply:
    def __init__(self) -> None:
        self._event = threading.Event()
        self.result: Any = None
        self.error: tuple[str, str] | None = None

    @property
    def done(self) -> bool:
        return self._event.is_set()

    def ok(self, result: Any) -> None:
        if not self.done:
            self.result = result
            self._event.set()

    def fail(self, kind: str, message: str) -> None:
        if not self.done:
            self.error = (kind, message)
            self._event.set()

    def wait(self, timeout: float) -> bool:
        return self._event.wait(timeout)


@dataclass
class Waiter:
    ready: Callable[[], bool]
    reply: Reply
    deadline: float
    result: Callable[[], Any]
    timeout_message: str


@dataclass
class Stopping:
    group: set[int]
    attempts: int = 0
    remaining: list[str] | None = None
    timer: Timer | None = None


@dataclass
class Barrier:
    pending: int = 0
    done: bool = False
    rounds: int = 0
    activity: tuple = field(default_factory=tuple)


# --------------------------------------------------------------------------------------------- daemon
class Daemon:
    def __init__(self, directory: Path):
        self.dir = directory
        cfg = json.loads((directory / DAEMON_CONFIG).read_text())
        self.connect: str = cfg["connect"]
        self.token: str = cfg["token"]
        self.timing = Timing(**cfg.get("timing", {}))
        self.loop = Loop()
        self._stopped = threading.Event()
        self._stop_watchdog: threading.Thread | None = None
        self.loop.after = self._check_waiters
        self.brokers: dict[int, Broker] = {}
        self.initially_alive: list[int] = []
        self.first_controller: int | None = cfg.get("first_controller")
        # Brokers described without a host listen on 127.0.0.1 and register that endpoint (sandbox/wire.py);
        # a described host is registered as given, with nothing listening there.
        self.endpoints: dict[int, Endpoint] = {}
        self.disk: dict[int, int] = {}
        self.faults: dict[int, set[str]] = {}
        self._wire_index: tuple[Any, dict[int, tuple[list[str], np.ndarray, np.ndarray, np.ndarray]]] | None = None
        self._wire_lock = threading.Lock()
        for b in cfg["brokers"]:
            host, port = b.get("host"), int(b.get("port", 9092))
            if host is None:
                ep = Endpoint(int(b["id"]), "127.0.0.1", self._wire_model)
                self.endpoints[int(b["id"])] = ep
                host, port = ep.host, ep.port
            self.disk[int(b["id"])] = int(b.get("disk_bytes") or DEFAULT_DISK)
            br = Broker(int(b["id"]), b.get("rack"), host, port, self.connect,
                        self.timing.session_timeout, self.loop.post)
            br.on_controller_event = self._on_controller_event
            br.on_session_lost = self._on_session_lost
            self.brokers[br.id] = br
            if b.get("alive", True):
                self.initially_alive.append(br.id)
        self.admin = KazooClient(hosts=self.connect, timeout=self.timing.session_timeout,
                                 connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0))
        self.configs = ConfigCache(self.admin, self.loop.post)
        self.replication = Replication(self, cfg.get("sizes", {}), self.timing, self.configs)
        self.controller: Controller | None = None
        self.controllers_seen = 0
        self.waiters: list[Waiter] = []
        self.stopping: dict[int, Stopping] = {}
        self.started = False
        self.fatal: str | None = None
        self._last_tick = time.monotonic()
        self.server: socketserver.ThreadingTCPServer | None = None
        self._requests = 0                          # control requests being answered (their handlers running)
        self._answering = threading.Condition()

    # ---------------------------------------------------------------------------- controller's host
    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        self.loop.post(fn, *args)

    def call_later(self, delay: float, fn: Callable[..., Any], *args: Any) -> Timer:
        return self.loop.call_later(delay, fn, *args)

    # --------------------------------------------------------------------------- replication's host
    def running(self, broker: int) -> bool:
        br = self.brokers.get(broker)
        return br is not None and br.running

    def fetching(self, broker: int) -> bool:
        br = self.brokers.get(broker)
        return br is not None and br.running and not br.shutting_down

    # ------------------------------------------------------------------------------- Kafka protocol
    def _wire_model(self, broker: int) -> LogDirState | None:
        """What broker `broker` answers DescribeLogDirs with (sandbox/wire.py), None when it does not answer.
        Runs on a connection's thread: the replica index is built on the loop thread and then only read. A
        replica still copying reports what it has copied so far."""
        br = self.brokers.get(broker)
        faults = self.faults.get(broker, set())
        if br is None or not br.running or "unreachable" in faults:
            return None
        index = self._replica_index()
        if index is None:
            return None
        topics, counts, pids, full = index.get(broker) or ([], np.zeros(0, np.int64), np.zeros(0, np.int32),
                                                           np.zeros(0, np.int64))
        sizes = full
        copying = [(f.topic, f.pid, f.bytes_left) for f in list(self.replication.fetches.values())
                   if f.broker == broker and f.bytes_left > 0]
        if copying:
            sizes = full.copy()
            starts = np.concatenate([[0], np.cumsum(counts)[:-1]]) if len(counts) else counts
            for topic, pid, left in copying:
                i = bisect.bisect_left(topics, topic)
                if i < len(topics) and topics[i] == topic:
                    a, n = int(starts[i]), int(counts[i])
                    hit = np.flatnonzero(pids[a:a + n] == pid)
                    if len(hit):
                        j = a + int(hit[0])
                        sizes[j] = max(0, int(full[j] - left))
        return LogDirState(f"/var/lib/kafka/broker-{broker}", self.disk[broker], "logdir" in faults, topics, counts,
                           pids, sizes)

    def _replica_index(self) -> dict[int, tuple[list[str], np.ndarray, np.ndarray, np.ndarray]] | None:
        """Per broker: its topics (sorted), replicas per topic, partition ids and described sizes, rebuilt on
        the loop thread whenever the assignment may have changed."""
        c = self.controller
        if c is None or not c.initialized:
            return None
        key = (id(c), len(c.parts), c.stats.get("reassignments_completed", 0),
               c.stats.get("reassign_znodes_seen", 0), c.stats.get("broker_changes", 0))
        with self._wire_lock:
            if self._wire_index is not None and self._wire_index[0] == key:
                return self._wire_index[1]
            reply = Reply()
            rep = self.replication

            def build() -> None:
                per: dict[int, tuple[list[str], list[int], list[int], list[int]]] = {}
                for (topic, pid), p in sorted(c.parts.items()):
                    size = rep.size(topic, pid)
                    for r in p.replicas:
                        t, cnt, ps, zs = per.setdefault(r, ([], [], [], []))
                        if not t or t[-1] != topic:
                            t.append(topic)
                            cnt.append(0)
                        cnt[-1] += 1
                        ps.append(pid)
                        zs.append(size)
                reply.ok({b: (t, np.asarray(cnt, np.int64), np.asarray(ps, np.int32), np.asarray(zs, np.int64))
                          for b, (t, cnt, ps, zs) in per.items()})

            self.loop.post(build)
            if not reply.wait(60):
                return None
            self._wire_index = (key, reply.result)
            return reply.result

    def _cmd_fault(self, args: dict[str, Any], reply: Reply) -> None:
        """Faults of the brokers' Kafka endpoint: {"brokers": [...], "unreachable": bool, "logdir_error": bool}."""
        ids = self._fault_ids(args)
        for b in ids:
            f = self.faults.setdefault(b, set())
            for name, key in (("unreachable", "unreachable"), ("logdir", "logdir_error")):
                if key in args:
                    (f.add if args[key] else f.discard)(name)
        reply.ok({"faults": {str(b): sorted(self.faults.get(b, ())) for b in ids}})

    def _fault_ids(self, args: dict[str, Any]) -> list[int]:
        raw = args.get("brokers")
        if not isinstance(raw, list) or not raw or not all(isinstance(b, int) for b in raw):
            raise BadRequest("give one or more broker ids")
        unknown = [b for b in raw if b not in self.brokers]
        if unknown:
            raise BadRequest(f"unknown broker id(s) {unknown}: this sandbox has brokers {sorted(self.brokers)}")
        return sorted(set(raw))

    # -------------------------------------------------------------------------------------- start-up
    def _startup(self) -> None:
        try:
            self.admin.start(timeout=30)
            self.configs.start()
            # The description's controller races first; without one, the highest id (so that draining the
            # low-numbered brokers, the usual first exercise, is not also a controller failover).
            order = sorted(self.initially_alive, reverse=True)
            if self.first_controller in order:
                order.remove(self.first_controller)
                order.insert(0, self.first_controller)
            self._start_brokers(order)
            self.loop.call_later(self.timing.tick, self._tick)
            self.started = True
            log.info("sandbox daemon up: %d brokers registered", len(self.initially_alive))
        except Exception as e:
            log.exception("start-up failed")
            self.fatal = f"start-up failed: {e!r}"
            self.loop.running = False

    def _start_brokers(self, ids: list[int]) -> None:
        """Open the sessions in parallel, register every broker, then let them race for /controller in the
        given order (all registered first, so the first controller sees the whole cluster, as a running
        cluster would)."""
        clients = {b: self.brokers[b].new_client() for b in ids}
        events = {b: c.start_async() for b, c in clients.items()}
        for b, ev in events.items():
            ev.wait(30)
            if not clients[b].connected:
                raise RuntimeError(f"broker {b}: could not connect to ZooKeeper at {self.connect}")
        for b in ids:
            self.brokers[b].register(clients[b])
        for b in ids:
            self._on_controller_event(self.brokers[b])

    # ----------------------------------------------------------------------------- controller race
    def _on_controller_event(self, br: Broker) -> None:
        if not br.running:
            return
        current = br.watch_controller()
        ctrl = self.controller
        if ctrl is not None and ctrl.broker_id == br.id and current != br.id:
            self._resign()
        if current == -1:
            won = br.try_become_controller()
            if won is not None:
                self._become_controller(br, *won)

    def _become_controller(self, br: Broker, epoch: int, epoch_zk_version: int) -> None:
        log.info("broker %d won the controller election: epoch %d", br.id, epoch)
        assert br.client is not None
        ctrl = Controller(br.id, br.client, epoch, epoch_zk_version, self)
        self.controller = ctrl
        self.controllers_seen += 1
        try:
            ctrl.failover()
        except Exception:
            log.exception("controller failover on broker %d failed; resigning", br.id)
            self._resign()
            try:
                if br.client is not None:
                    br.client.delete("/controller")
            except Exception:
                pass
            return
        self.replication.sync(ctrl.parts.values(), initial=not self.replication.initialized)
        self.replication.initialized = True

    def _resign(self) -> None:
        if self.controller is not None:
            self.controller.resign()
            self.controller = None

    def _on_session_lost(self, br: Broker) -> None:
        """The broker's session expired (not a kill): it re-registers with a new session, as Kafka does."""
        log.warning("broker %d lost its ZooKeeper session; re-registering", br.id)
        if self.controller is not None and self.controller.broker_id == br.id:
            self._resign()
        br.close()
        client = br.new_client()
        client.start(timeout=30)
        br.register(client)
        self.replication.broker_started(br.id)
        self._on_controller_event(br)

    # ----------------------------------------------------------------------------------------- ticks
    def _tick(self) -> None:
        now = time.monotonic()
        dt, self._last_tick = now - self._last_tick, now
        try:
            self.replication.tick(dt)
        finally:
            self.loop.call_later(self.timing.tick, self._tick)

    # -------------------------------------------------------------------------------------- commands
    def dispatch(self, cmd: str, args: dict[str, Any], reply: Reply) -> None:
        handler = getattr(self, f"_cmd_{cmd}", None)
        if handler is None:
            reply.fail("bad_input", f"unknown command {cmd!r}")
            return
        try:
            handler(args, reply)
        except BadRequest as e:
            reply.fail("bad_input", str(e))
        except Exception as e:
            log.exception("command %s failed", cmd)
            reply.fail("error", f"{cmd} failed: {e!r}")

    def _ids(self, args: dict[str, Any], want_running: bool, allow_stopping: bool = False,
             keep_order: bool = False) -> list[int]:
        raw = args.get("brokers")
        if not isinstance(raw, list) or not raw or not all(isinstance(b, int) and not isinstance(b, bool) for b in raw):
            raise BadRequest("give one or more broker ids")
        ids = list(dict.fromkeys(raw)) if keep_order else sorted(set(raw))
        unknown = [b for b in ids if b not in self.brokers]
        if unknown:
            raise BadRequest(f"unknown broker id(s) {unknown}: this sandbox has brokers {sorted(self.brokers)}")
        for b in ids:
            br = self.brokers[b]
            if want_running and not br.running:
                raise BadRequest(f"broker {b} is not running")
            if want_running and b in self.stopping and not allow_stopping:
                raise BadRequest(f"broker {b} is already shutting down")
            if not want_running and br.running:
                raise BadRequest(f"broker {b} is already running")
        return ids

    def _wait(self, ready: Callable[[], bool], reply: Reply, timeout: float, result: Callable[[], Any],
              message: str) -> None:
        self.waiters.append(Waiter(ready, reply, time.monotonic() + timeout, result, message))

    def _check_waiters(self) -> None:
        if not self.waiters:
            return
        now = time.monotonic()
        keep = []
        for w in self.waiters:
            if w.reply.done:
                continue
            if w.ready():
                w.reply.ok(w.result())
            elif now > w.deadline:
                w.reply.fail("timeout", w.timeout_message)
            else:
                keep.append(w)
        self.waiters = keep

    def _cmd_ping(self, args: dict[str, Any], reply: Reply) -> None:
        reply.ok({"pid": os.getpid(), "started": self.started, "fatal": self.fatal})

    def _cmd_status(self, args: dict[str, Any], reply: Reply) -> None:
        reply.ok(self.status(limit=int(args.get("limit", 1000))))

    def _down_seen(self, ids: list[int]) -> bool:
        if not any(br.running for br in self.brokers.values()):
            return True
        c = self.controller
        return c is not None and c.initialized and all(b not in c.live for b in ids)

    def _cmd_kill(self, args: dict[str, Any], reply: Reply) -> None:
        ids = self._ids(args, want_running=True, allow_stopping=True)
        log.info("kill (hard failure) of brokers %s", ids)
        for b in ids:
            st = self.stopping.pop(b, None)
            if st is not None and st.timer is not None:
                st.timer.cancel()
            if self.controller is not None and self.controller.broker_id == b:
                self._resign()
            self.brokers[b].close()
        self._wait(lambda: self._down_seen(ids), reply, float(args.get("timeout", 120)),
                   lambda: {"killed": ids}, f"the controller did not see brokers {ids} go within the timeout")

    def _cmd_stop(self, args: dict[str, Any], reply: Reply) -> None:
        ids = self._ids(args, want_running=True, keep_order=True)  # the order the requests arrive in
        log.info("controlled shutdown of brokers %s", ids)
        group = set(ids)
        for b in ids:
            self.brokers[b].shutting_down = True
            self.stopping[b] = Stopping(group)
        report: dict[int, dict[str, Any]] = {}
        for b in ids:
            self._shutdown_attempt(b, report)

        def result() -> dict[str, Any]:
            return {"stopped": ids, "brokers": {str(b): report.get(b, {}) for b in ids}}

        timeout = float(args.get("timeout", self.timing.shutdown_retries * self.timing.shutdown_retry_interval + 120))
        self._wait(lambda: not any(b in self.stopping for b in ids) and self._down_seen(ids), reply, timeout,
                   result, f"brokers {ids} did not finish their controlled shutdown within the timeout")

    def _shutdown_attempt(self, b: int, report: dict[int, dict[str, Any]]) -> None:
        st = self.stopping.get(b)
        br = self.brokers[b]
        if st is None or not br.running:
            return
        st.attempts += 1
        remaining: list[str] | None = None
        ctrl = self.controller
        if ctrl is not None and ctrl.initialized:
            try:
                remaining = [p.name for p in ctrl.controlled_shutdown(b)]
            except (BrokerNotAvailable, ControllerMoved) as e:
                log.info("controlled shutdown request of broker %d failed: %s", b, e)
        st.remaining = remaining
        report[b] = {"attempts": st.attempts, "succeeded": remaining == [],
                     "still_leading": sorted(remaining) if remaining else [],
                     "unclean_shutdown": remaining != [] and st.attempts >= self.timing.shutdown_retries}
        if remaining == []:
            self._finish_stop(b)
        elif st.attempts < self.timing.shutdown_retries:
            log.info("broker %d: controlled shutdown attempt %d left %s partitions led; retrying in %.1fs", b,
                     st.attempts, "unknown" if remaining is None else len(remaining), self.timing.shutdown_retry_interval)
            st.timer = self.loop.call_later(self.timing.shutdown_retry_interval, self._shutdown_attempt, b, report)
        else:
            log.info("broker %d: controlled shutdown failed after %d attempts; stopping anyway", b, st.attempts)
            self._finish_stop(b)

    def _finish_stop(self, b: int) -> None:
        self.stopping.pop(b, None)
        if self.controller is not None and self.controller.broker_id == b:
            self._resign()
        self.brokers[b].close()
        log.info("broker %d stopped", b)

    def _cmd_start(self, args: dict[str, Any], reply: Reply) -> None:
        ids = self._ids(args, want_running=False)
        log.info("start of brokers %s", ids)
        clients = {b: self.brokers[b].new_client() for b in ids}
        for c in clients.values():
            c.start(timeout=30)
        for b in ids:
            self.brokers[b].register(clients[b])
            self.replication.broker_started(b)
        for b in ids:
            self._on_controller_event(self.brokers[b])

        def seen() -> bool:
            c = self.controller
            return c is not None and c.initialized and all(c.live.get(b) == self.brokers[b].epoch for b in ids)

        self._wait(seen, reply, float(args.get("timeout", 120)),
                   lambda: {"started": ids, "epochs": {str(b): self.brokers[b].epoch for b in ids}},
                   f"the controller did not see brokers {ids} register within the timeout")

    def _cmd_wait_settled(self, args: dict[str, Any], reply: Reply) -> None:
        timeout = float(args.get("timeout", 60))
        barrier = Barrier()
        self._start_barrier(barrier)
        self._wait(lambda: self._settled(barrier), reply, timeout, lambda: self.status(limit=50),
                   "the sandbox did not settle within the timeout")

    def _cmd_shutdown(self, args: dict[str, Any], reply: Reply) -> None:
        reply.ok({"pid": os.getpid()})
        self.loop.running = False

    # -------------------------------------------------------------------------------------- settling
    def _activity(self) -> tuple:
        c = self.controller
        stats = tuple(sorted(c.stats.items())) if c is not None else ()
        return (c.broker_id if c else None, c.epoch if c else None, stats, self.replication.joined,
                tuple(sorted(self.stopping)), tuple(br.starts for br in self.brokers.values()))

    def _start_barrier(self, barrier: Barrier) -> None:
        barrier.pending, barrier.done, barrier.activity = 0, False, self._activity()
        barrier.rounds += 1

        def marker() -> None:
            self.loop.post(self._barrier_mark, barrier)

        for br in self.brokers.values():
            if br.sync_barrier(marker):
                barrier.pending += 1
        try:
            self.admin.sync("/")
            self.admin.handler.dispatch_callback(Callback("watch", marker, ()))
            barrier.pending += 1
        except Exception:
            pass
        if barrier.pending == 0:
            barrier.done = True

    def _barrier_mark(self, barrier: Barrier) -> None:
        barrier.pending -= 1
        if barrier.pending <= 0:
            barrier.done = True

    def quiet(self) -> bool:
        if self.loop.pending() or self.stopping or not self.started:
            return False
        if any(br.running for br in self.brokers.values()):
            c = self.controller
            if c is None or not c.initialized:
                return False
            if self.replication.pending():
                return False
        return True

    def _settled(self, barrier: Barrier) -> bool:
        if not barrier.done or not self.quiet():
            return False
        if barrier.rounds < 2 or barrier.activity != self._activity():
            self._start_barrier(barrier)
            return False
        return True

    # ---------------------------------------------------------------------------------------- status
    def status(self, limit: int = 1000) -> dict[str, Any]:
        c = self.controller
        brokers = []
        for b, br in sorted(self.brokers.items()):
            brokers.append({"id": b, "rack": br.rack, "running": br.running, "endpoint": f"{br.host}:{br.port}",
                            "faults": sorted(self.faults.get(b, ())),
                            "shutting_down": b in self.stopping, "epoch": br.epoch if br.running else None,
                            "registered_for_controller": bool(c and b in c.live)})
        out: dict[str, Any] = {"pid": os.getpid(), "brokers": brokers, "controller": None, "settled": self.quiet(),
                               "controllers_elected": self.controllers_seen, "fatal": self.fatal}
        if c is not None and c.initialized:
            out.update(c.summary(self.configs.min_isr, limit=limit))
            for r in out["reassigning"]:
                r["bytes_left"] = self.replication.progress(r["topic"], r["partition"])
        out["replication"] = self.replication.summary()
        return out

    # ----------------------------------------------------------------------------------------- main
    def serve(self) -> None:
        daemon = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                with daemon._answering:
                    daemon._requests += 1
                try:
                    self._handle()
                finally:
                    with daemon._answering:
                        daemon._requests -= 1
                        daemon._answering.notify_all()

            def _handle(self) -> None:
                line = self.rfile.readline(1 << 20)
                try:
                    req = json.loads(line)
                    if not isinstance(req, dict):
                        raise ValueError("not an object")
                except ValueError:
                    self._send({"ok": False, "kind": "bad_input", "error": "malformed request"})
                    return
                if req.get("token") != daemon.token:
                    self._send({"ok": False, "kind": "unauthorized", "error": "wrong sandbox token"})
                    return
                args = req.get("args") or {}
                reply = Reply()
                daemon.loop.post(daemon.dispatch, str(req.get("cmd")), args, reply)
                wait = float(args.get("timeout", 60)) + 30 if isinstance(args, dict) else 90
                if not reply.wait(wait):
                    self._send({"ok": False, "kind": "timeout", "error": "the sandbox daemon did not answer"})
                elif reply.error is not None:
                    self._send({"ok": False, "kind": reply.error[0], "error": reply.error[1]})
                else:
                    self._send({"ok": True, "result": reply.result})

            def _send(self, obj: dict[str, Any]) -> None:
                try:
                    self.wfile.write((json.dumps(obj) + "\n").encode())
                except OSError:
                    pass

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, name="control", daemon=True).start()
        port = self.server.server_address[1]
        tmp = self.dir / (CONTROL_FILE + ".tmp")
        tmp.write_text(json.dumps({"port": port, "pid": os.getpid()}))
        os.replace(tmp, self.dir / CONTROL_FILE)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_sigterm)
        self.serve()
        self.loop.post(self._startup)
        try:
            self.loop.run()
        finally:
            self._cleanup()
            self._stopped.set()
        return 1 if self.fatal else 0

    def _on_sigterm(self, signum: int, frame: object) -> None:
        """Stop on the loop; if the loop cannot get there, leave anyway after STOP_GRACE seconds.

        With ZooKeeper gone the loop thread can sit in a kazoo request for ever: kazoo queues a request made
        while it reconnects and its caller waits, without a timeout, until ZooKeeper answers again (as Kafka's
        own controller does: KafkaZkClient.retryRequestsUntilConnected). The daemon then never reached its
        stop, and `kill` (SIGTERM) was ignored until SIGKILL. A Kafka broker does not hang either: its
        controlled shutdown gives up after controlled.shutdown.max.retries and it shuts down."""
        self.loop.post(self._stop)
        if self._stop_watchdog is None:
            self._stop_watchdog = threading.Thread(target=self._leave_if_stuck, name="stop-watchdog", daemon=True)
            self._stop_watchdog.start()

    def _leave_if_stuck(self) -> None:
        if self._stopped.wait(STOP_GRACE):
            return
        log.warning("sandbox daemon: SIGTERM not carried out within %.0f s (the loop waits on a ZooKeeper that "
                    "does not answer): leaving now", STOP_GRACE)
        logging.shutdown()
        os._exit(128 + signal.SIGTERM)

    def _stop(self) -> None:
        self.loop.running = False

    def _cleanup(self) -> None:
        log.info("sandbox daemon stopping")
        self._resign()
        for br in self.brokers.values():
            try:
                br.close()
            except Exception:
                pass
        try:
            self.admin.stop()
            self.admin.close()
        except Exception:
            pass
        if self.server is not None:
            with self._answering:   # the last replies (the shutdown's own) go out first
                self._answering.wait_for(lambda: self._requests == 0, timeout=0.2)
        try:
            stop_servers([ep.server for ep in self.endpoints.values()]
                         + ([self.server] if self.server is not None else []))
        except Exception:
            pass
        try:
            (self.dir / CONTROL_FILE).unlink()
        except FileNotFoundError:
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m planner.sandbox.daemon")
    parser.add_argument("--dir", required=True, type=Path)
    args = parser.parse_args(argv)
    directory = args.dir.resolve()
    handler = logging.FileHandler(directory / LOG_FILE)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    return Daemon(directory).run()


if __name__ == "__main__":
    sys.exit(main())
