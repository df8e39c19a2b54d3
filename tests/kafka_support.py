"""Helpers for the real-Kafka tests: one cluster per test module, fresh topics per test, waits on ZooKeeper.

Every wait polls a condition with a deadline; nothing sleeps in place of waiting.
"""

from __future__ import annotations

import json
import time
from typing import Any

from waiting import poll

from planner import codec
from planner import zk as zkmod
from planner.sandbox import Sandbox
from planner.sandbox.kafka_engine import create_topic

# Short enough that a kill costs seconds, long enough for a 2-core machine under load. ZooKeeper's
# minSessionTimeout is 1 s (planner/zkserver.py), tickTime 0.5 s: expiry is noticed within one more tick.
REAL = dict(session_timeout=6, shutdown_retries=2, shutdown_retry_interval=0.5, auto_rebalance=False)


def racks(n: int, r: int = 3) -> list[dict[str, Any]]:
    return [{"id": i, "rack": f"r{(i - 1) % r + 1}"} for i in range(1, n + 1)]


class Real:
    """A real-Kafka sandbox plus a ZooKeeper session in its chroot."""

    def __init__(self, sb: Sandbox):
        self.sb = sb
        self.zk = zkmod.connect(sb.connect_string)

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()

    def state(self, t: str, p: int) -> dict[str, Any]:
        data, stat = self.zk.get(codec.state_path(t, p))
        out = json.loads(data)
        out["_mzxid"] = stat.mzxid
        return out

    def lead_isr(self, t: str, p: int) -> tuple[int, list[int]]:
        s = self.state(t, p)
        return s["leader"], s["isr"]

    def ids_pzxid(self) -> int:
        return self.zk.exists(codec.BROKER_IDS).pzxid

    def assignment(self, t: str) -> dict[int, list[int]]:
        return codec.decode_topic(t, self.zk.get(codec.topic_path(t))[0]).partitions

    def topic(self, name: str, *assignment: list[int], settle: float = 60, **config: str) -> str:
        """A fresh topic with this exact assignment, created through Kafka's admin path; returns once the
        controller created every partition and the cluster settled."""
        create_topic(self.zk, name, [list(a) for a in assignment],
                     {k.replace("_", "."): v for k, v in config.items()})
        self.sb.wait_settled(settle)
        return name

    def controller(self) -> int | None:
        data = self.zk.exists(codec.CONTROLLER) and self.zk.get(codec.CONTROLLER)[0]
        return codec.decode_controller(data).broker_id if data else None

    def move_controller(self, to: int, timeout: float = 60) -> None:
        """Make broker `to` the controller the way operators do it (kafka-kit, Kafka's docs): delete
        /controller and let the live brokers race for it again, until `to` wins."""
        deadline = time.monotonic() + timeout
        while (current := poll(self.controller, timeout, "a controller")) != to:
            if time.monotonic() > deadline:
                raise AssertionError(f"broker {to} did not become the controller (still {current})")
            old = self.zk.exists(codec.CONTROLLER)
            self.zk.delete(codec.CONTROLLER)
            poll(lambda o=old: (st := self.zk.exists(codec.CONTROLLER)) and st.czxid != o.czxid, timeout,
                 "a new controller")
        self.sb.wait_settled(timeout)

    def restore(self, timeout: float = 90) -> None:
        """Every broker running again and the cluster settled (between tests of one module)."""
        down = [b["id"] for b in self.sb.status(limit=0)["brokers"] if not b["running"]]
        if down:
            self.sb.start(down, timeout=timeout)
        self.sb.wait_settled(timeout)
