"""Replication throttles on KRaft, through IncrementalAlterConfigs: the same entries and rates as the ZooKeeper
path (planner.execution.throttles: `spec_for` is Kafka's ReassignPartitionsCommand rule, shared), removed on
every path, and only what this run added.

Kafka's own tool (4.x ReassignPartitionsCommand.modifyTopicThrottles / modifyInterBrokerThrottle) writes the
throttled-replica lists with SET; here a run APPENDs its own `partition:broker` entries and SUBTRACTs them
again (IncrementalAlterConfigs' list operations, KIP-339), so entries someone else set stay, and a `*` is left
alone. A broker's rates are SET; on removal the value found before the run is put back (DELETE when there was
none).

What the run added is committed to `__kplan` (`throttles/<plan hex>`) *before* the configs are written, so a
process killed at any point leaves enough behind for the next apply, verify or cancel to remove it; removal
writes the configs first and then the record (a removal repeated after a kill is harmless: SUBTRACT of an
absent entry and DELETE of an absent key change nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from planner.execution.kraftcluster import AdminCluster
from planner.execution.kraftstore import Store, throttles_key
from planner.execution.throttles import ALL, RATE_KEYS, REPLICA_KEYS, Spec, join_entries, parse_entries

log = logging.getLogger(__name__)

Key = tuple[str, int]
DYNAMIC = ("DYNAMIC_BROKER_CONFIG",)


class KraftThrottles:
    def __init__(self, store: Store, cluster: AdminCluster, plan_hex: str, extra: Any = None):
        self.store = store
        self.cluster = cluster
        self.key = throttles_key(plan_hex)
        self.extra = extra          # records committed with the throttle record (a callable returning a dict)

    def record(self) -> dict[str, Any] | None:
        return self.store.get(self.key)

    def _commit(self, rec: dict[str, Any] | None) -> None:
        if self.cluster.dry_run:
            self.store.values[self.key] = rec
            return
        records = {self.key: rec if rec and (rec.get("topics") or rec.get("brokers")) else None}
        if self.extra is not None:
            records.update(self.extra())
        self.store.transact(records)

    def throttle(self, spec: Spec, rate: int) -> None:
        """Throttle `spec` at `rate` bytes/s: recorded first, then written."""
        if spec.empty():
            return
        rec = self.record() or {"rate": str(rate), "topics": {}, "brokers": {}}
        rec = {"rate": str(rate), "topics": {t: {k: list(v) for k, v in e.items()} for t, e in rec["topics"].items()},
               "brokers": dict(rec["brokers"])}
        topics = self.cluster.configs("topic", spec.replicas, REPLICA_KEYS)
        brokers = self.cluster.configs("broker", spec.brokers, RATE_KEYS)
        topic_ops: dict[tuple[str, str], dict[str, tuple[str, str | None]]] = {}
        for t, wanted in spec.replicas.items():
            mine = rec["topics"].setdefault(t, {})
            ops = {}
            for key in REPLICA_KEYS:
                have = parse_entries((topics.get(t, {}).get(key) or (None, None))[0])
                want = set(wanted.get(key, set()))
                if not want or have == ALL:
                    continue
                new = want - have
                if new:
                    ops[key] = ("APPEND", join_entries(new))
                    mine[key] = sorted(set(mine.get(key, [])) | new)
            if ops:
                topic_ops[("topic", t)] = ops
        broker_ops: dict[tuple[str, str], dict[str, tuple[str, str | None]]] = {}
        for b in sorted(spec.brokers):
            found = brokers.get(str(b), {})
            if str(b) not in rec["brokers"]:
                rec["brokers"][str(b)] = {k: (found[k][0] if k in found and found[k][1] in DYNAMIC else None)
                                          for k in RATE_KEYS}
            if any((found.get(k) or (None,))[0] != str(rate) for k in RATE_KEYS):
                broker_ops[("broker", str(b))] = {k: ("SET", str(rate)) for k in RATE_KEYS}
        if not topic_ops and not broker_ops:
            return
        self._commit(rec)
        self.cluster.alter_configs({**topic_ops, **broker_ops}, f"throttle {rate} B/s")

    def release(self, keep: Collection[Key] = ()) -> None:
        """Remove this run's throttles, except those of the partitions in `keep` (still moving) and of their
        brokers (listed by the caller in `keep_brokers` through the record's entries)."""
        rec = self.record()
        if not rec or (not rec.get("topics") and not rec.get("brokers")):
            return
        keep = set(keep)
        keep_brokers: set[int] = set()
        left: dict[str, dict[str, list[str]]] = {}
        topic_ops: dict[tuple[str, str], dict[str, tuple[str, str | None]]] = {}
        have = self.cluster.configs("topic", rec["topics"], REPLICA_KEYS)
        for t, entries in rec["topics"].items():
            ops = {}
            for key, mine in entries.items():
                stay = [e for e in mine if (t, int(e.split(":")[0])) in keep]
                go = set(mine) - set(stay)
                keep_brokers |= {int(e.split(":")[1]) for e in stay}
                if stay:
                    left.setdefault(t, {})[key] = stay
                if not go:
                    continue
                now = parse_entries((have.get(t, {}).get(key) or (None, None))[0])
                if now == ALL or not (now & go):
                    continue
                ops[key] = ("DELETE", None) if not (now - go) else ("SUBTRACT", join_entries(go & now))
            if ops:
                topic_ops[("topic", t)] = ops
        broker_ops: dict[tuple[str, str], dict[str, tuple[str, str | None]]] = {}
        kept_brokers: dict[str, Any] = {}
        found = self.cluster.configs("broker", [b for b in rec["brokers"] if int(b) not in keep_brokers], RATE_KEYS)
        for b, before in rec["brokers"].items():
            if int(b) in keep_brokers:
                kept_brokers[b] = before
                continue
            ops = {}
            for key in RATE_KEYS:
                prev = before.get(key)
                cur = (found.get(b, {}).get(key) or (None, None))
                now = cur[0] if cur[1] in DYNAMIC else None
                if now == prev:
                    continue
                if now is not None and now != rec.get("rate"):
                    log.warning("broker %s: %s is %s, not this run's %s: someone changed it; left as it is",
                                b, key, now, rec.get("rate"))
                    continue
                ops[key] = ("DELETE", None) if prev is None else ("SET", prev)
            if ops:
                broker_ops[("broker", b)] = ops
        self.cluster.alter_configs({**topic_ops, **broker_ops}, "throttles removed")
        self._commit({"rate": rec.get("rate"), "topics": left, "brokers": kept_brokers})

    def remaining(self, topics: Collection[str], brokers: Collection[int]) -> list[dict[str, str]]:
        """Throttle configs present now on these topics and brokers (anyone's), as verify reports them."""
        out = []
        for t, cfg in sorted(self.cluster.configs("topic", topics, REPLICA_KEYS).items()):
            for key, (val, src) in sorted(cfg.items()):
                if val and src == "DYNAMIC_TOPIC_CONFIG":
                    out.append({"entity": f"topics/{t}", "key": key, "value": val})
        for b, cfg in sorted(self.cluster.configs("broker", [str(b) for b in brokers], RATE_KEYS).items()):
            for key, (val, src) in sorted(cfg.items()):
                if val and src in DYNAMIC:
                    out.append({"entity": f"brokers/{b}", "key": key, "value": val})
        return out
