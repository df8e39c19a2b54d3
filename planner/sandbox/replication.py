"""The data plane of the emulated brokers: followers that are out of the ISR fetch from their leader, and
the leader adds them back to the ISR (AlterPartition) once they have caught up.

A replica that already holds the partition's log (it was down, or stopped) needs only `catch_up_delay`
seconds of fetching. A replica added by a reassignment copies the whole partition first, at a rate that
follows the network and the replication throttles in /config, as Kafka's quotas do:
- every broker's link (`link_rate`) is shared by the fetches into it and the fetches out of it;
- a fetch whose follower is listed in the topic's `follower.replication.throttled.replicas` shares the
  follower broker's `follower.replication.throttled.rate` with its other throttled fetches;
- a fetch whose leader is listed in `leader.replication.throttled.replicas` shares the leader broker's
  `leader.replication.throttled.rate` likewise.
Rates come from /config/brokers/<id>, else /config/brokers/<default>; changes are picked up through the
/config/changes notifications, as brokers do.

Replicas that are out of the ISR when the sandbox starts are taken to be lagging for a reason of their own:
they stay out (so `up` reproduces the described cluster) until their broker restarts or a reassignment
restarts them.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from planner import codec
from planner.errors import CodecError
from planner.sandbox.model import Part
from planner.sandbox.settings import Timing
from planner.sandbox.zkio import multi_read

log = logging.getLogger("planner.sandbox.replication")

ALL = "*"


def parse_throttled_replicas(value: str | None) -> set[tuple[int, int]] | str:
    """`"0:1,0:2,1:3"` -> {(0, 1), (0, 2), (1, 3)}; `"*"` -> ALL."""
    if not value:
        return set()
    value = value.strip()
    if value == ALL:
        return ALL
    out = set()
    for item in value.split(","):
        part, _, broker = item.strip().partition(":")
        if part.strip().isdigit() and broker.strip().isdigit():
            out.add((int(part), int(broker)))
    return out


class ConfigCache:
    """Topic and broker configs as the brokers see them: loaded once, refreshed per entity when a
    /config/changes notification names it."""

    def __init__(self, client: KazooClient, post: Callable[..., None]):
        self.client = client
        self.post = post
        self.topics: dict[str, dict[str, str]] = {}
        self.brokers: dict[str, dict[str, str]] = {}
        self._throttled: dict[tuple[str, str], Any] = {}
        self._seen: set[str] = set()
        self._watch = lambda ev: self.post(self.on_changes)

    def start(self) -> None:
        try:
            topics = self.client.get_children(codec.CONFIG_TOPICS)
        except NoNodeError:
            topics = []
        try:
            brokers = self.client.get_children(codec.CONFIG_BROKERS)
        except NoNodeError:
            brokers = []
        self._load([f"topics/{t}" for t in topics] + [f"brokers/{b}" for b in brokers])
        try:
            self._seen = set(self.client.get_children(codec.CONFIG_CHANGES, watch=self._watch))
        except NoNodeError:
            self.client.ensure_path(codec.CONFIG_CHANGES)
            self._seen = set(self.client.get_children(codec.CONFIG_CHANGES, watch=self._watch))

    def on_changes(self) -> None:
        children = set(self.client.get_children(codec.CONFIG_CHANGES, watch=self._watch))
        new = sorted(children - self._seen)
        self._seen = children
        if not new:
            return
        entities = []
        paths = [f"{codec.CONFIG_CHANGES}/{c}" for c in new]
        for path, res in zip(paths, multi_read(self.client, paths), strict=True):
            if isinstance(res, Exception):
                continue
            try:
                entities.append(codec.decode_config_change(res[0], path))
            except CodecError as e:
                log.warning("%s", e)
        self._load(entities)
        log.info("config changes: reloaded %s", ", ".join(sorted(set(entities))))

    def _load(self, entities: Iterable[str]) -> None:
        entities = sorted(set(entities))
        paths = [f"{codec.CONFIG}/{e}" for e in entities]
        for entity, path, res in zip(entities, paths, multi_read(self.client, paths), strict=True):
            kind, _, name = entity.partition("/")
            store = self.topics if kind == "topics" else self.brokers if kind == "brokers" else None
            if store is None:
                continue
            if isinstance(res, Exception):
                store.pop(name, None)
            else:
                try:
                    store[name] = codec.decode_config(res[0], path)
                except CodecError as e:
                    log.warning("%s", e)
            self._throttled = {k: v for k, v in self._throttled.items() if k[0] != name}

    def topic(self, topic: str) -> dict[str, str]:
        return self.topics.get(topic, {})

    def broker_value(self, broker: int, key: str) -> str | None:
        own = self.brokers.get(str(broker), {})
        if key in own:
            return own[key]
        return self.brokers.get(codec.DEFAULT_BROKER_ENTITY, {}).get(key)

    def broker_rate(self, broker: int, key: str) -> float | None:
        value = self.broker_value(broker, key)
        try:
            return float(value) if value is not None else None
        except ValueError:
            return None

    def throttled(self, topic: str, key: str) -> set[tuple[int, int]] | str:
        cached = self._throttled.get((topic, key))
        if cached is None:
            cached = parse_throttled_replicas(self.topic(topic).get(key))
            self._throttled[(topic, key)] = cached
        return cached

    def min_isr(self, topic: str) -> int:
        value = self.topic(topic).get("min.insync.replicas")
        if value is None:
            value = self.brokers.get(codec.DEFAULT_BROKER_ENTITY, {}).get("min.insync.replicas", "1")
        try:
            return int(value)
        except ValueError:
            return 1


class Fetch:
    __slots__ = ("topic", "pid", "broker", "bytes_left", "delay_left", "stalled", "ready")

    def __init__(self, topic: str, pid: int, broker: int, bytes_left: float, delay_left: float, stalled: bool):
        self.topic = topic
        self.pid = pid
        self.broker = broker
        self.bytes_left = bytes_left
        self.delay_left = delay_left
        self.stalled = stalled
        self.ready = False


class Replication:
    """Followers out of the ISR, keyed by (topic, partition, broker)."""

    def __init__(self, host: Any, sizes: dict[str, list[int]], timing: Timing, configs: ConfigCache):
        self.host = host  # .controller, .fetching(broker), .running(broker)
        self.sizes = sizes
        self.timing = timing
        self.configs = configs
        self.fetches: dict[tuple[str, int, int], Fetch] = {}
        self.by_part: dict[tuple[str, int], set[int]] = defaultdict(set)
        self.by_broker: dict[int, set[tuple[str, int, int]]] = defaultdict(set)
        self.active: set[tuple[str, int, int]] = set()  # neither stalled nor waiting for the ISR write
        self.initialized = False
        self.joined = 0
        self.ticks = 0

    def size(self, topic: str, pid: int) -> int:
        sizes = self.sizes.get(topic)
        if sizes and pid < len(sizes):
            return sizes[pid] or 0
        return 0

    # -------------------------------------------------------------------------------- bookkeeping
    def _add(self, p: Part, broker: int, copy: bool, stalled: bool) -> Fetch:
        key = (p.topic, p.pid, broker)
        f = Fetch(p.topic, p.pid, broker, float(self.size(p.topic, p.pid)) if copy else 0.0,
                  self.timing.catch_up_delay, stalled)
        self.fetches[key] = f
        self.by_part[(p.topic, p.pid)].add(broker)
        self.by_broker[broker].add(key)
        if not stalled:
            self.active.add(key)
        return f

    def _remove(self, key: tuple[str, int, int]) -> None:
        if self.fetches.pop(key, None) is None:
            return
        self.by_part[(key[0], key[1])].discard(key[2])
        self.by_broker[key[2]].discard(key)
        self.active.discard(key)

    def sync(self, parts: Iterable[Part], initial: bool = False) -> None:
        """Follow the controller's view: a fetch for every assigned replica that is out of the ISR."""
        for p in parts:
            have = self.by_part.get((p.topic, p.pid))
            if have:
                for b in list(have):
                    if b not in p.replicas or b in p.isr:
                        self._remove((p.topic, p.pid, b))
            if not p.has_state or (len(p.isr) >= len(p.replicas) and set(p.replicas) <= set(p.isr)):
                continue
            for r in p.replicas:
                if r not in p.isr and (p.topic, p.pid, r) not in self.fetches:
                    self._add(p, r, copy=r in p.adding, stalled=initial)

    def start_new(self, p: Part, broker: int) -> None:
        """A target replica of a reassignment starts (or resumes) fetching: an added one copies the log."""
        key = (p.topic, p.pid, broker)
        f = self.fetches.get(key)
        if f is None:
            self._add(p, broker, copy=broker in p.adding, stalled=False)
        elif f.stalled:
            f.stalled = False
            self.active.add(key)

    def drop(self, p: Part, broker: int) -> None:
        """The replica was removed from the partition: its log is deleted."""
        self._remove((p.topic, p.pid, broker))

    def forget(self, p: Part) -> None:
        for b in list(self.by_part.get((p.topic, p.pid), ())):
            self._remove((p.topic, p.pid, b))

    def broker_started(self, broker: int) -> None:
        """A restarted broker catches up every replica it holds that is out of the ISR."""
        for key in self.by_broker.get(broker, ()):
            f = self.fetches[key]
            f.stalled = False
            f.ready = False
            f.delay_left = self.timing.catch_up_delay
            self.active.add(key)

    # ------------------------------------------------------------------------------------- progress
    def _can_progress(self, f: Fetch, ctrl: Any) -> Part | None:
        if not self.host.fetching(f.broker):
            return None
        p = ctrl.lookup(f.topic, f.pid) if ctrl is not None else None
        if p is None or p.leader < 0 or not self.host.running(p.leader) or f.broker not in p.replicas:
            return None
        return p

    def tick(self, dt: float) -> None:
        self.ticks += 1
        ctrl = self.host.controller
        if ctrl is None or not ctrl.initialized or not self.active:
            return
        moving: list[tuple[Fetch, Part]] = []
        ready: list[tuple[Part, int]] = []
        for key in list(self.active):
            f = self.fetches[key]
            p = self._can_progress(f, ctrl)
            if p is None:
                continue
            if f.ready:
                ready.append((p, f.broker))
            elif f.bytes_left > 0:
                moving.append((f, p))
            else:
                self._catch_up(f, p, dt, ready)
        if moving:
            # A copy that ends within this tick spends the rest of the tick catching up, so a fetch joins the
            # ISR when its copy and catch-up delay are over, not one tick later: the tick is the emulator's
            # clock resolution, not part of the modelled time.
            for (f, p), rate in zip(moving, self._rates(moving), strict=True):
                if rate * dt < f.bytes_left:
                    f.bytes_left -= rate * dt
                    continue
                left = dt - f.bytes_left / rate
                f.bytes_left = 0.0
                self._catch_up(f, p, left, ready)
        if ready:
            ready.sort(key=lambda pr: (pr[0].topic, pr[0].pid, pr[1]))
            written = ctrl.alter_partition(ready)
            self.joined += len(written)

    @staticmethod
    def _catch_up(f: Fetch, p: Part, dt: float, ready: list[tuple[Part, int]]) -> None:
        f.delay_left -= dt
        if f.delay_left <= 0:
            f.ready = True
            ready.append((p, f.broker))

    def _rates(self, moving: list[tuple[Fetch, Part]]) -> list[float]:
        link = self.timing.link_rate
        n_in: dict[int, int] = defaultdict(int)
        n_out: dict[int, int] = defaultdict(int)
        n_fthr: dict[int, int] = defaultdict(int)
        n_lthr: dict[int, int] = defaultdict(int)
        flags = []
        for f, p in moving:
            follower = self.configs.throttled(f.topic, "follower.replication.throttled.replicas")
            leader = self.configs.throttled(f.topic, "leader.replication.throttled.replicas")
            fthr = follower == ALL or (f.pid, f.broker) in follower
            lthr = leader == ALL or (f.pid, p.leader) in leader
            flags.append((fthr, lthr))
            n_in[f.broker] += 1
            n_out[p.leader] += 1
            if fthr:
                n_fthr[f.broker] += 1
            if lthr:
                n_lthr[p.leader] += 1
        rates = []
        for (f, p), (fthr, lthr) in zip(moving, flags, strict=True):
            rate = min(link / n_in[f.broker], link / n_out[p.leader])
            if fthr:
                cap = self.configs.broker_rate(f.broker, "follower.replication.throttled.rate")
                if cap is not None:
                    rate = min(rate, cap / n_fthr[f.broker])
            if lthr:
                cap = self.configs.broker_rate(p.leader, "leader.replication.throttled.rate")
                if cap is not None:
                    rate = min(rate, cap / n_lthr[p.leader])
            rates.append(max(rate, 0.0))
        return rates

    def pending(self) -> int:
        """Fetches that are making progress now (or waiting for their ISR write)."""
        ctrl = self.host.controller
        return sum(1 for key in self.active if self._can_progress(self.fetches[key], ctrl) is not None)

    def progress(self, topic: str, pid: int) -> dict[str, int]:
        """Bytes each out-of-sync replica of the partition still has to copy."""
        return {str(b): int(self.fetches[(topic, pid, b)].bytes_left) for b in sorted(self.by_part.get((topic, pid), ()))}

    def summary(self) -> dict[str, Any]:
        copying = sum(1 for k in self.active if self.fetches[k].bytes_left > 0)
        return {"out_of_sync_replicas": len(self.fetches), "catching_up": self.pending(),
                "copying": copying, "stalled": sum(1 for f in self.fetches.values() if f.stalled),
                "rejoined_isr": self.joined, "ticks": self.ticks}
