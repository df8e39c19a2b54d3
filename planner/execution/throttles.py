"""Replication throttles, set as Kafka's own reassign tool sets them and removed on every path.

Kafka's `ReassignPartitionsCommand` (3.9, `calculateLeaderThrottles` / `calculateFollowerThrottles` /
`modifyInterBrokerThrottle`): for each moving partition the *sources* (its current replicas) go into the topic's
`leader.replication.throttled.replicas` as `partition:broker`, the *destinations* (target minus sources) into
`follower.replication.throttled.replicas`, and every source and destination broker gets both
`leader.replication.throttled.rate` and `follower.replication.throttled.rate`. Through ZooKeeper a config
write is the whole override set of `/config/topics/<t>` or `/config/brokers/<id>` followed by a sequential
`/config/changes/config_change_` notification (AdminZkClient.changeEntityConfig); here each pair is one
transaction, so a broker never misses the notification of a write that happened.

Unlike Kafka's tool, which deletes every throttle key of the topics and brokers it touched when nothing is
reassigning, a run removes only what it added (Cruise Control's ReplicationThrottleHelper merges and removes
its own entries the same way): entries that were already there and a `*` stay, a broker rate that was set
before the run is restored to that value, and a rate someone changed since is left alone with a warning
(not set back at the next batch either).
What a run added is recorded in `/kplan/runs/<plan>/throttles` *before* the configs are written, so a
process killed at any point leaves enough behind for the next apply, verify or cancel to remove it.
Removal follows task state (Cruise Control again): a partition's entries go once it is no longer in flight,
a broker's rates once none of its moves is in flight. (The executor asks for rates on the brokers of the
following batches of the same rate too: see planner.execution.executor.brokers_ahead.)
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from planner import codec
from planner.errors import SafetyRefusal
from planner.execution.clusterview import ClusterView
from planner.execution.runstate import throttles_path
from planner.zkgate import CONFIG_CHANGE_PREFIX, Op, WriteGate

log = logging.getLogger(__name__)

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
RATE_KEYS = (LEADER_RATE, FOLLOWER_RATE)
REPLICA_KEYS = (LEADER_REPLICAS, FOLLOWER_REPLICAS)
ALL = "*"

Key = tuple[str, int]


@dataclass
class Spec:
    """The throttles a set of moves needs: topic -> entries for each replica key, and the brokers."""

    replicas: dict[str, dict[str, set[str]]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(set)))
    brokers: set[int] = field(default_factory=set)

    def empty(self) -> bool:
        return not self.brokers


def spec_for(moves: Iterable[tuple[str, int, Sequence[int], Sequence[int]]]) -> Spec:
    """(topic, partition, current replicas, target replicas) -> what Kafka's tool would throttle. A move that
    adds no replica (a reorder) copies nothing and is not throttled."""
    spec = Spec()
    for topic, partition, current, target in moves:
        sources = set(current)
        dests = set(target) - sources
        if not dests:
            continue
        for s in sources:
            spec.replicas[topic][LEADER_REPLICAS].add(f"{partition}:{s}")
        for d in dests:
            spec.replicas[topic][FOLLOWER_REPLICAS].add(f"{partition}:{d}")
        spec.brokers |= sources | dests
    return spec


def parse_entries(value: str | None) -> set[str] | str:
    if value is None or not value.strip():
        return set()
    if value.strip() == ALL:
        return ALL
    return {x.strip() for x in value.split(",") if x.strip()}


def join_entries(entries: set[str]) -> str:
    def order(x: str) -> tuple[int, int, str]:
        p, _, b = x.partition(":")
        return (int(p), int(b), x) if p.isdigit() and b.isdigit() else (1 << 62, 0, x)
    return ",".join(sorted(entries, key=order))


def _entity_path(entity: str) -> str:
    return f"{codec.CONFIG}/{entity}"


class Throttles:
    """Sets and removes one run's throttles (see the module docstring)."""

    def __init__(self, gate: WriteGate, view: ClusterView, plan_hex: str):
        self.gate = gate
        self.view = view
        self.path = throttles_path(plan_hex)

    # ------------------------------------------------------------------------------------ record
    def record(self) -> tuple[dict[str, Any] | None, int]:
        seen, data = self.gate.overlay(self.path)
        if seen:
            return (json.loads(data) if data is not None else None), 0
        try:
            data, stat = self.gate.client.get(self.path)
        except NoNodeError:
            return None, -1
        try:
            rec = json.loads(data)
        except ValueError:
            raise SafetyRefusal(f"{self.path} is not valid JSON: cannot tell which throttles this run set") from None
        return rec, stat.version

    def _record_ops(self, rec: dict[str, Any] | None, version: int) -> list[Op]:
        if rec is None or (not rec.get("topics") and not rec.get("brokers")):
            if version >= 0 or self.gate.overlay(self.path)[0]:
                return [Op("delete", self.path, version=version if not self.gate.dry_run else -1)]
            return []
        data = codec.dumps(rec)
        if version < 0:
            return [Op("create", self.path, data)]
        return [Op("set", self.path, data, version if not self.gate.dry_run else -1)]

    def _configs(self, entities: Iterable[str]) -> dict[str, tuple[dict[str, str], int] | None]:
        entities = sorted(set(entities))
        out = self.view.configs(entities)
        for e in entities:
            seen, data = self.gate.overlay(_entity_path(e))
            if seen and data is not None:
                out[e] = (codec.decode_config(data, _entity_path(e)), -1)
        return out

    def _config_ops(self, changes: dict[str, tuple[dict[str, str], tuple[dict[str, str], int] | None]]
                    ) -> list[list[Op]]:
        groups = []
        for entity, (config, found) in sorted(changes.items()):
            path = _entity_path(entity)
            data = codec.encode_config(config)
            write = Op("create", path, data) if found is None else Op("set", path, data, found[1])
            groups.append([write, Op("create_sequential", CONFIG_CHANGE_PREFIX, codec.encode_config_change(entity))])
        return groups

    # --------------------------------------------------------------------------------------- set
    def throttle(self, spec: Spec, rate: int) -> int:
        """Throttle `spec` at `rate` bytes/s; returns the number of config znodes written."""
        if spec.empty():
            return 0
        for attempt in range(5):
            try:
                return self._set_once(spec, rate)
            except (BadVersionError, NodeExistsError, NoNodeError):
                if attempt == 4:
                    raise
                log.info("a throttle config changed while it was being written; reading it again")
        return 0

    def _set_once(self, spec: Spec, rate: int) -> int:
        rec, version = self.record()
        configs = self._configs([f"topics/{t}" for t in spec.replicas] + [f"brokers/{b}" for b in spec.brokers])
        changes, rec = self._set_changes(spec, rate, rec, configs)
        if not changes:
            return 0
        # One transaction: what must be undone is recorded together with (never after) what it undoes.
        self.gate.commit_groups([self._record_ops(rec, version)] + self._config_ops(changes))
        log.info("throttle %d B/s set on %d brokers and %d topics", rate, len(spec.brokers), len(spec.replicas))
        return len(changes)

    def _set_changes(self, spec: Spec, rate: int, rec: dict[str, Any] | None, configs: dict[str, Any]
                     ) -> tuple[dict[str, tuple[dict[str, str], Any]], dict[str, Any]]:
        """The config writes that throttle `spec` (entity -> (new config, as found)) and the record after.
        A rate this run set that someone changed since (kafka-configs, another tool) is theirs: left as it is,
        with a warning, as on removal; the run's own earlier rate (`rec["rate"]`) it replaces."""
        prev = rec.get("rate") if rec else None
        rec = rec or {"rate": str(rate), "topics": {}, "brokers": {}}
        rec["rate"] = str(rate)
        topic_entities = {f"topics/{t}": t for t in spec.replicas}
        broker_entities = {f"brokers/{b}": b for b in spec.brokers}
        changes: dict[str, tuple[dict[str, str], Any]] = {}
        for entity, topic in topic_entities.items():
            found = configs.get(entity)
            config = dict(found[0]) if found else {}
            mine = rec["topics"].setdefault(topic, {})
            changed = False
            for key in REPLICA_KEYS:
                want = spec.replicas[topic].get(key, set())
                have = parse_entries(config.get(key))
                if not want or have == ALL:
                    continue
                new = want - have
                if not new:
                    continue
                mine[key] = sorted(set(mine.get(key, [])) | new)
                config[key] = join_entries(have | new)
                changed = True
            if not mine:
                del rec["topics"][topic]
            if changed:
                changes[entity] = (config, found)
        for entity, broker in broker_entities.items():
            found = configs.get(entity)
            config = dict(found[0]) if found else {}
            mine = rec["brokers"].setdefault(str(broker), {})
            changed = False
            for key in RATE_KEYS:
                cur = config.get(key)
                if cur == str(rate):
                    continue
                if key in mine and cur != prev:
                    log.warning("broker %s: %s is %s, not the %s this run set: changed by someone else while the "
                                "run applies, so left as it is (this broker's copies go at that rate)", broker, key,
                                cur, prev)
                    continue
                if key not in mine:
                    mine[key] = {"prior": cur}
                    if cur is not None:
                        log.warning("broker %s already had %s=%s; the run sets %d and restores %s afterwards",
                                    broker, key, cur, rate, cur)
                config[key] = str(rate)
                changed = True
            if not mine:
                del rec["brokers"][str(broker)]
            if changed:
                changes[entity] = (config, found)
        return changes, rec

    # ----------------------------------------------------------------------------------- release
    def release(self, in_flight: Iterable[tuple[str, int, Sequence[int], Sequence[int]]] = ()) -> int:
        """Remove what the run set, except what moves still in flight need (their topic entries, and the rates
        of every broker taking part in one of them). Returns the config znodes written."""
        for attempt in range(5):
            try:
                return self._release_once(spec_for(in_flight))
            except (BadVersionError, NodeExistsError, NoNodeError):
                if attempt == 4:
                    raise
                log.info("a throttle config changed while it was being removed; reading it again")
        return 0

    def _release_once(self, keep: Spec) -> int:
        rec, version = self.record()
        if rec is None:
            return 0
        configs = self._configs(self._release_entities(rec, keep))
        changes, new = self._release_changes(keep, rec, configs)
        ops = self._config_ops(changes)
        if new != rec:
            ops.append(self._record_ops(new, version))
        if ops:
            self.gate.commit_groups(ops)
        if changes:
            log.info("throttles removed from %d config znodes (%d brokers and %d topics keep theirs for moves in "
                     "flight)", len(changes), len(new["brokers"]), len(new["topics"]))
        return len(changes)

    @staticmethod
    def _release_entities(rec: dict[str, Any], keep: Spec) -> list[str]:
        return [f"topics/{t}" for t in rec.get("topics", {})] + [f"brokers/{b}" for b in rec.get("brokers", {})
                                                                 if int(b) not in keep.brokers]

    def _release_changes(self, keep: Spec, rec: dict[str, Any], configs: dict[str, Any]
                         ) -> tuple[dict[str, tuple[dict[str, str], Any]], dict[str, Any]]:
        """The config writes that remove what the run set except what `keep` needs, and the record after."""
        rate = rec.get("rate")
        topics: dict[str, dict[str, list[str]]] = rec.get("topics", {})
        brokers: dict[str, dict[str, dict[str, str | None]]] = rec.get("brokers", {})
        changes: dict[str, tuple[dict[str, str], Any]] = {}
        new_topics: dict[str, dict[str, list[str]]] = {}
        for topic, mine in sorted(topics.items()):
            entity = f"topics/{topic}"
            found = configs.get(entity)
            config = dict(found[0]) if found else {}
            keep_t = keep.replicas.get(topic, {})
            changed = False
            left: dict[str, list[str]] = {}
            for key, entries in mine.items():
                stay = set(entries) & keep_t.get(key, set())
                drop = set(entries) - stay
                if stay:
                    left[key] = sorted(stay)
                have = parse_entries(config.get(key))
                if not drop or have == ALL or not (have & drop):
                    continue
                rest = have - drop
                if rest:
                    config[key] = join_entries(rest)
                else:
                    config.pop(key, None)
                changed = True
            if left:
                new_topics[topic] = left
            if changed and found is not None:
                changes[entity] = (config, found)
        new_brokers: dict[str, dict[str, dict[str, str | None]]] = {}
        for broker, keys in sorted(brokers.items()):
            if int(broker) in keep.brokers:
                new_brokers[broker] = keys
                continue
            entity = f"brokers/{broker}"
            found = configs.get(entity)
            config = dict(found[0]) if found else {}
            changed = False
            for key, info in keys.items():
                prior = info.get("prior")
                cur = config.get(key)
                if cur == prior:
                    continue
                if cur != rate:
                    log.warning("broker %s: %s is %s, not the %s this run set; left as it is", broker, key, cur, rate)
                    continue
                if prior is None:
                    config.pop(key, None)
                else:
                    config[key] = prior
                changed = True
            if changed and found is not None:
                changes[entity] = (config, found)
        if new_topics == topics and new_brokers == brokers:
            return changes, rec
        return changes, {"rate": rate, "topics": new_topics, "brokers": new_brokers}

    # -------------------------------------------------------------------------------- transition
    def transition(self, spec: Spec, rate: int | None) -> tuple[list[list[Op]], int]:
        """Between two units (nothing of the run in flight): the writes that take the run's throttles from
        whatever it left set to exactly what `spec` needs at `rate` (None or an empty spec: none at all), as
        op groups for ONE transaction with the next unit's submission, so that at every moment ZooKeeper
        shows the throttles of the unit in flight and no other. Versions guard every config read here: a
        config changed meanwhile fails the whole transaction (BadVersionError) and nothing is applied.
        Returns (groups, config znodes written)."""
        if not rate:
            spec = Spec()
        rec, version = self.record()
        entities = ([f"topics/{t}" for t in spec.replicas] + [f"brokers/{b}" for b in spec.brokers]
                    + (self._release_entities(rec, spec) if rec is not None else []))
        configs = self._configs(entities)
        changes: dict[str, tuple[dict[str, str], Any]] = {}
        if rec is not None:
            changes, rec = self._release_changes(spec, rec, configs)
            configs = dict(configs)
            for entity, (config, found) in changes.items():
                configs[entity] = (config, found[1])
        if not spec.empty():
            more, rec = self._set_changes(spec, rate or 0, rec, configs)
            for entity, (config, found) in more.items():
                first = changes.get(entity)
                # The version the write must check is the one read from ZooKeeper, not the interim one.
                changes[entity] = (config, first[1] if first is not None else found)
        groups = self._config_ops(changes)
        if rec is not None:
            groups.insert(0, self._record_ops(rec, version))
        return [g for g in groups if g], len(changes)

    # --------------------------------------------------------------------------------- inspection
    def remaining(self, topics: Iterable[str], brokers: Iterable[int]) -> list[dict[str, str]]:
        """Every throttle key present on these topics and brokers (whoever set it), for the report."""
        entities = [f"topics/{t}" for t in set(topics)] + [f"brokers/{b}" for b in set(brokers)]
        out = []
        for entity, found in sorted(self._configs(entities).items()):
            if not found:
                continue
            for key in REPLICA_KEYS + RATE_KEYS:
                if key in found[0]:
                    out.append({"entity": entity, "key": key, "value": found[0][key]})
        return out
