"""Every partition's state on a KRaft cluster, polled through the Admin API: each interval a partition is offline
or under min ISR, with timestamps (the ZooKeeper watcher's rules and report: planner.sandbox.watcher).

KRaft has no znodes to watch, so this polls DescribeTopicPartitions and DescribeCluster every `interval`
seconds (0.2 by default). A leader that is fenced counts as gone, as an unregistered one does in ZooKeeper
mode (the controller fences a broker whose heartbeats stop; Kafka's ReplicationControlManager then moves its
leaderships). Min ISR is read once at the start (DescribeConfigs: the topic's effective value). Every time is
the poll's, so every interval is inexact (`start_exact` / `end_exact` false), at most one interval late.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from planner.sandbox.watcher import MIN_ISR, PartitionWatcher, _Partition

log = logging.getLogger("planner.sandbox.watcher")


class AdminPartitionWatcher(PartitionWatcher):
    def __init__(self, bootstrap: str, topics: Iterable[str] | None = None, interval: float = 0.2):
        super().__init__(bootstrap, topics)
        self.interval = interval
        self._admin: Any = None
        self._thread: threading.Thread | None = None
        self._halt = threading.Event()
        self.polls = 0
        self.failed_polls = 0

    def start(self) -> AdminPartitionWatcher:
        from planner import kraft_admin as ka

        self._admin = ka.connect(self.connect, timeout=3)
        self.started_at = self.clock()
        topics = sorted(self.wanted) if self.wanted is not None else [
            t for t in ka.topic_names(self._admin) if not t.startswith("__")]
        for t, cfg in ka.configs(self._admin, "topic", topics, [MIN_ISR]).items():
            v = cfg.get(MIN_ISR, {}).get("value")
            self._topic_min_isr[t] = int(v) if v is not None else None
        self._topics = set(topics)
        self._poll()
        self._thread = threading.Thread(target=self._loop, name="kplan-admin-watcher", daemon=True)
        self._thread.start()
        log.info("watching %d partitions of %d topics through the Admin API at %s", len(self._parts),
                 len(self._topics), self.connect)
        return self

    def _loop(self) -> None:
        from planner import kraft_admin as ka

        while not self._halt.wait(self.interval):
            try:
                self._poll()
            except Exception as e:  # noqa: BLE001 - a missed poll is counted, never hidden
                self.failed_polls += 1
                log.debug("admin watcher poll failed: %r; reconnecting", e)
                try:   # a client kept across a kill may keep asking the dead broker: a new one bootstraps again
                    old, self._admin = self._admin, ka.connect(self.connect, timeout=3)
                    old.close()
                except Exception:  # noqa: BLE001 - the next poll tries again
                    pass

    def _poll(self) -> None:
        from planner import kraft_admin as ka

        described = ka.describe_topic_partitions(self._admin, sorted(self._topics))
        unfenced = {b for b, info in ka.brokers(self._admin).items() if not info["fenced"]}
        now = self.clock()
        with self._lock:
            if self._stopped:
                return
            self.polls += 1
            self._registered = unfenced
            for key, d in described.items():
                if key[1] < 0 or d.get("error"):
                    continue
                p = self._parts.setdefault(key, _Partition())
                leader, isr = int(d["leader"]), list(d["isr"])
                if (leader, isr) != (p.leader, p.isr):
                    p.updates += 1
                p.leader, p.isr = leader, isr
            for key in list(self._parts):
                self._evaluate(key, now, False)

    def stop(self) -> None:
        self._halt.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        super().stop()
        if self._admin is not None:
            try:
                self._admin.close()
            except Exception:  # noqa: BLE001
                pass

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        out.update({"polls": self.polls, "failed_polls": self.failed_polls, "interval_s": self.interval,
                    "source": "admin-api"})
        return out
