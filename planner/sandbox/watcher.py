"""Every partition's state, watched continuously in ZooKeeper: each interval a partition is offline or under
min ISR, with timestamps.

    w = PartitionWatcher("127.0.0.1:2181/kafka")     # all topics; or topics=["orders"]
    w.start()
    ...
    w.now()          # {"offline": [...], "under_min_isr": [...]} at this moment
    w.stop()
    w.intervals()    # [{"kind": "offline", "topic", "partition", "start", "end", "duration_s", ...}]

A watch on each partition's state znode (`/brokers/topics/<t>/partitions/<p>/state`, written only by the
controller), on `/brokers/ids` (registrations), on each topic's assignment and config and on the broker-default
config. The rules are Kafka's:
- **offline**: no leader (-1), or a leader whose registration is gone (its session expired and the controller
  has not written a new leader yet): a client can neither produce nor consume;
- **under min ISR**: a leader, and fewer ISR members than `min.insync.replicas` (topic config, else the
  `<default>` broker config, else `static_min_isr`, Kafka's default 1): an acks=all produce then fails with
  NOT_ENOUGH_REPLICAS (`Partition.appendRecordsToLeader` in Kafka 3.9's kafka/cluster/Partition.scala
  compares the ISR's size with minIsr for requiredAcks == -1).

Timestamps are epoch seconds. A change written to a state or config znode is dated by the znode's mtime, the
ZooKeeper server's clock when the write was committed: exact (`start_exact` / `end_exact`). A registration
that disappears leaves no time in ZooKeeper, so that change is dated when the watch fired (loopback: within
milliseconds) and marked inexact. ZooKeeper watches are one-shot: writes that land between a watch firing
and the re-read are only seen as their last one; the state znode's version tells how many were skipped
(`missed_updates`), so a gap in what was observed is counted, never hidden.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kazoo.client import KazooClient
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from planner import codec
from planner import zk as zkmod
from planner.errors import PlannerError

log = logging.getLogger("planner.sandbox.watcher")

OFFLINE, UNDER_MIN_ISR = "offline", "under_min_isr"
MIN_ISR = "min.insync.replicas"


@dataclass
class _Open:
    start: float
    exact: bool
    cause: str
    leader: int
    isr: list[int]


@dataclass
class _Partition:
    leader: int | None = None          # None: no state read yet (or the znode is gone)
    isr: list[int] = field(default_factory=list)
    version: int = -1
    updates: int = 0
    missed: int = 0
    open: dict[str, _Open] = field(default_factory=dict)


class PartitionWatcher:
    """Watches the partitions of `topics` (None: every topic, including ones created later)."""

    def __init__(self, connect: str, topics: Iterable[str] | None = None, static_min_isr: int = 1,
                 clock: Callable[[], float] = time.time):
        self.connect = connect
        self.wanted = None if topics is None else set(topics)
        self.static_min_isr = static_min_isr
        self.clock = clock
        self._lock = threading.RLock()
        self._client: KazooClient | None = None
        self._parts: dict[tuple[str, int], _Partition] = {}
        self._topics: set[str] = set()
        self._topic_min_isr: dict[str, int | None] = {}
        self._default_min_isr: int | None = None
        self._registered: set[int] | None = None
        self._closed: list[dict[str, Any]] = []
        self._watches: list[Any] = []
        self._stopped = False
        self.started_at: float | None = None
        self.stopped_at: float | None = None

    # ------------------------------------------------------------------------------------ lifecycle
    def start(self) -> PartitionWatcher:
        self._client = zkmod.connect(self.connect)
        self.started_at = self.clock()
        c = self._client
        self._watches.append(DataWatch(c, codec.broker_config_path(codec.DEFAULT_BROKER_ENTITY), self._on_default))
        self._watches.append(ChildrenWatch(c, codec.BROKER_IDS, self._on_brokers))
        self._watches.append(ChildrenWatch(c, codec.TOPICS, self._on_topics))
        log.info("watching %d partitions of %d topics in %s", len(self._parts), len(self._topics), self.connect)
        return self

    def stop(self) -> None:
        """Stop watching; intervals still open are closed at this moment and marked `open_at_stop`."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            self.stopped_at = self.clock()
            for key, p in self._parts.items():
                for kind in list(p.open):
                    self._close(key, p, kind, self.stopped_at, False, still_open=True)
        if self._client is not None:
            try:
                self._client.stop()
                self._client.close()
            except Exception:  # noqa: BLE001 - a watcher that cannot close cleanly has nothing left to report
                log.debug("closing the watcher's ZooKeeper session failed", exc_info=True)

    # ------------------------------------------------------------------------------------ watches
    def _on_default(self, data: bytes | None, stat: Any, event: Any = None) -> None:
        value = _min_isr(data, codec.broker_config_path(codec.DEFAULT_BROKER_ENTITY))
        with self._lock:
            if self._stopped:
                return
            self._default_min_isr = value
            t, exact = (stat.mtime / 1000, True) if stat else (self.clock(), False)
            for key in list(self._parts):
                self._evaluate(key, t, exact)

    def _on_brokers(self, children: list[str]) -> None:
        now = self.clock()
        with self._lock:
            if self._stopped:
                return False  # type: ignore[return-value]  # kazoo: False ends the watch
            self._registered = {int(c) for c in children if c.isdigit()}
            for key in list(self._parts):
                self._evaluate(key, now, False)
        return None

    def _on_topics(self, children: list[str]) -> bool | None:
        if self._stopped:
            return False
        new = [t for t in children if t not in self._topics and (self.wanted is None or t in self.wanted)]
        for t in sorted(new):
            with self._lock:
                self._topics.add(t)
            assert self._client is not None
            # kazoo calls func(data, stat, event): the topic goes first, bound with partial
            self._watches.append(DataWatch(self._client, codec.topic_config_path(t),
                                           partial(self._on_topic_config, t)))
            self._watches.append(DataWatch(self._client, codec.topic_path(t), partial(self._on_assignment, t)))
        return None

    def _on_topic_config(self, topic: str, data: bytes | None, stat: Any, event: Any = None) -> bool | None:
        value = _min_isr(data, codec.topic_config_path(topic))
        with self._lock:
            if self._stopped:
                return False
            self._topic_min_isr[topic] = value
            t, exact = (stat.mtime / 1000, True) if stat else (self.clock(), False)
            for key in [k for k in self._parts if k[0] == topic]:
                self._evaluate(key, t, exact)
        return None

    def _on_assignment(self, topic: str, data: bytes | None, stat: Any, event: Any = None) -> bool | None:
        if self._stopped or data is None:
            return False if self._stopped else None
        try:
            partitions = codec.decode_topic(topic, data).partitions
        except PlannerError:
            log.warning("cannot read the assignment of topic %s; its partitions are not watched", topic)
            return None
        assert self._client is not None
        for p in sorted(partitions):
            key = (topic, p)
            with self._lock:
                if key in self._parts:
                    continue
                self._parts[key] = _Partition()
            self._watches.append(DataWatch(self._client, codec.state_path(topic, p), partial(self._on_state, key)))
        return None

    def _on_state(self, key: tuple[str, int], data: bytes | None, stat: Any, event: Any = None) -> bool | None:
        with self._lock:
            if self._stopped:
                return False
            p = self._parts[key]
            if data is None or stat is None:
                p.leader = None
                self._evaluate(key, self.clock(), False)
                return None
            try:
                st = codec.decode_partition_state(data, codec.state_path(*key))
            except PlannerError:
                log.warning("unreadable state of %s-%d; left as it was", *key)
                return None
            if p.version >= 0 and stat.version > p.version + 1:
                p.missed += stat.version - p.version - 1
            p.version = stat.version
            p.updates += 1
            p.leader, p.isr = st.leader, list(st.isr)
            self._evaluate(key, stat.mtime / 1000, True)
        return None

    # ------------------------------------------------------------------------------------ rules
    def min_isr(self, topic: str) -> int:
        v = self._topic_min_isr.get(topic)
        if v is None:
            v = self._default_min_isr
        return self.static_min_isr if v is None else v

    def _conditions(self, key: tuple[str, int], p: _Partition) -> dict[str, str]:
        if p.leader is None:
            return {}
        out: dict[str, str] = {}
        if p.leader < 0:
            out[OFFLINE] = "no leader"
        elif self._registered is not None and p.leader not in self._registered:
            out[OFFLINE] = f"leader {p.leader} is not registered"
        else:
            m = self.min_isr(key[0])
            if len(p.isr) < m:
                out[UNDER_MIN_ISR] = f"ISR {p.isr} below {MIN_ISR}={m}"
        return out

    def _evaluate(self, key: tuple[str, int], t: float, exact: bool) -> None:
        p = self._parts[key]
        now = self._conditions(key, p)
        for kind in list(p.open):
            if kind not in now:
                self._close(key, p, kind, t, exact)
        for kind, cause in now.items():
            if kind not in p.open:
                p.open[kind] = _Open(t, exact, cause, p.leader if p.leader is not None else -1, list(p.isr))
                log.info("%s-%d %s: %s", key[0], key[1], kind, cause)

    def _close(self, key: tuple[str, int], p: _Partition, kind: str, t: float, exact: bool,
               still_open: bool = False) -> None:
        o = p.open.pop(kind)
        end = max(t, o.start)
        self._closed.append({
            "kind": kind, "topic": key[0], "partition": key[1], "start": round(o.start, 3),
            "end": round(end, 3), "duration_s": round(end - o.start, 3), "start_exact": o.exact,
            "end_exact": exact and not still_open, "open_at_stop": still_open, "cause": o.cause,
            "leader": o.leader, "isr": o.isr})

    # ------------------------------------------------------------------------------------ reading
    def now(self) -> dict[str, list[dict[str, Any]]]:
        """The partitions offline / under min ISR at this moment, with the time each condition began."""
        out: dict[str, list[dict[str, Any]]] = {OFFLINE: [], UNDER_MIN_ISR: []}
        with self._lock:
            for key, p in sorted(self._parts.items()):
                for kind, o in p.open.items():
                    out[kind].append({"topic": key[0], "partition": key[1], "since": round(o.start, 3),
                                      "cause": o.cause})
        return out

    def intervals(self) -> list[dict[str, Any]]:
        """Every interval closed so far (all of them after stop), in order of start."""
        with self._lock:
            return sorted(self._closed, key=lambda i: (i["start"], i["topic"], i["partition"], i["kind"]))

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"topics": len(self._topics), "partitions": len(self._parts),
                    "state_updates": sum(p.updates for p in self._parts.values()),
                    "missed_updates": sum(p.missed for p in self._parts.values()),
                    "partitions_without_state": sorted(f"{t}-{n}" for (t, n), p in self._parts.items()
                                                       if p.leader is None)}


def _min_isr(data: bytes | None, path: str) -> int | None:
    if data is None:
        return None
    try:
        raw = codec.decode_config(data, path).get(MIN_ISR)
        return None if raw is None else int(raw)
    except (PlannerError, ValueError):
        log.warning("%s: unreadable %s; using the next default", path, MIN_ISR)
        return None
