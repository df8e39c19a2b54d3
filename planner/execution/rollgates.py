"""The restart roll's judgements on the live cluster, as pure functions of what ClusterView read.

The rules are the replay's (planner.replay.demote for the demotion; docs/KAFKA_ZK.md §2 for what a stopped broker
does to an ISR), applied to the cluster as it is now rather than to a snapshot:
- `demotion`: the lists a broker's demotion writes and the partitions it then elects (or cannot move);
- `would_hurt`: partitions that would be offline or under their effective min ISR once the broker is down
  (checked before it is demoted: the roll never takes a broker down that would);
- `not_back`: partitions whose ISR the broker was in before its restart and is not in again;
- `unhealthy`: partitions offline or under min ISR (a gate compares them with the roll's baseline);
- `not_led`: partitions the broker is the preferred leader of and does not lead (leadership not restored).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from planner import codec, replay
from planner import kafka_config as kc
from planner import risk_model as rm
from planner.execution.clusterview import ClusterView, Key, PartStatus


def name(k: Key) -> str:
    return f"{k[0]}-{k[1]}"


@dataclass(frozen=True)
class Demotion:
    reorder: dict[Key, tuple[tuple[int, ...], tuple[int, ...]]]   # key -> (list now, list written)
    elect: list[Key]                                               # then a preferred election for these
    stuck: list[Key]                                               # led by the broker, nobody to take over
    to_avoided: list[Key] = field(default_factory=list)            # led next by a broker in maintenance


def _matrix(rows: list[tuple[int, ...]]) -> np.ndarray:
    width = max((len(r) for r in rows), default=0)
    m = np.full((len(rows), max(width, 1)), -1, dtype=np.int32)
    for i, r in enumerate(rows):
        m[i, : len(r)] = r
    return m


def hosted(statuses: Mapping[Key, PartStatus], broker: int) -> list[Key]:
    return [k for k, s in statuses.items() if s.replicas is not None and broker in s.replicas]


def demotion(statuses: Mapping[Key, PartStatus], broker: int, live: Iterable[int],
             avoid: Iterable[int] = ()) -> Demotion:
    """planner.replay.demote on the live state of the partitions `broker` hosts. The leadership goes to a broker
    of `avoid` (brokers in maintenance: they get no preferred leadership from any other plan) only where no
    other registered in-sync replica can take it; those partitions are in `to_avoided`."""
    live = set(live)
    avoid = set(avoid) - {broker}
    d = _demotion(statuses, broker, live - avoid)
    if not avoid or not d.stuck:
        return d
    wide = _demotion(statuses, broker, live)
    stuck = set(d.stuck)
    order = {k: i for i, k in enumerate(statuses)}
    return Demotion({**d.reorder, **{k: v for k, v in wide.reorder.items() if k in stuck}},
                    sorted([*d.elect, *(k for k in wide.elect if k in stuck)], key=order.__getitem__),
                    wide.stuck, sorted(stuck - set(wide.stuck), key=order.__getitem__))


def _demotion(statuses: Mapping[Key, PartStatus], broker: int, live: Iterable[int]) -> Demotion:
    keys = [k for k in hosted(statuses, broker) if statuses[k].has_state]
    if not keys:
        return Demotion({}, [], [])
    live = set(live)
    reps = _matrix([statuses[k].replicas or () for k in keys])
    isr = _matrix([statuses[k].isr for k in keys])
    width = max(reps.shape[1], isr.shape[1])
    reps, isr = replay._pad(reps, width), replay._pad(isr, width)
    leader = np.array([statuses[k].leader for k in keys], dtype=np.int32)
    size = max([broker, *live, int(reps.max(initial=0)), int(isr.max(initial=0))]) + 2
    lut = np.zeros(size, dtype=bool)
    lut[list(live)] = True
    batch = replay.Batch(reps, isr, leader, np.ones(len(keys), bool), np.zeros(len(keys), bool))
    after, demoted_from, stuck = replay.demote(batch, broker, lut)
    reorder = {}
    for i, k in enumerate(keys):
        old = tuple(int(x) for x in reps[i] if x >= 0)
        new = tuple(int(x) for x in after.replicas[i] if x >= 0)
        if new != old:
            reorder[k] = (old, new)
    elect = [k for i, k in enumerate(keys) if demoted_from[i] >= 0]
    return Demotion(reorder, elect, [k for i, k in enumerate(keys) if stuck[i]])


def min_isr(view: ClusterView, topics: Iterable[str]) -> dict[str, int]:
    """Each topic's min.insync.replicas as in effect now: its override, else the cluster-wide broker default,
    else Kafka's default (planner.kafka_config)."""
    topics = sorted(set(topics))
    entities = [f"topics/{t}" for t in topics] + [f"brokers/{codec.DEFAULT_BROKER_ENTITY}"]
    conf = view.configs(entities)
    dflt = conf.get(f"brokers/{codec.DEFAULT_BROKER_ENTITY}")
    defaults = kc.broker_default_settings(dflt[0] if dflt else {}, codec.broker_config_path(codec.DEFAULT_BROKER_ENTITY))
    out = {}
    for t in topics:
        c = conf.get(f"topics/{t}")
        out[t] = kc.topic_settings(c[0] if c else {}, defaults, codec.topic_config_path(t)).min_insync_replicas
    return out


def effective_min(min_isr: int, rf: int, kafka_version: str) -> int:
    """docs/KAFKA_ZK.md §2 (planner.risk_model.effective_min_isr): min(min.insync.replicas, RF) on Kafka >= 3.7."""
    if rm.parse_kafka_version(kafka_version) >= rm.EFFECTIVE_MIN_ISR_SINCE:
        return min(min_isr, rf)
    return min_isr


def _live_isr(s: PartStatus, live: set[int]) -> list[int]:
    return [b for b in s.isr if b in live]


def would_hurt(statuses: Mapping[Key, PartStatus], broker: int, live: Iterable[int], mins: Mapping[str, int],
               kafka_version: str) -> dict[Key, str]:
    """Partitions `broker` hosts that would be offline or under their effective min ISR while it is down:
    fewer than max(m, 1) registered in-sync replicas other than it."""
    live = set(live)
    out = {}
    for k in hosted(statuses, broker):
        s = statuses[k]
        isr = [b for b in _live_isr(s, live) if b != broker]
        need = max(effective_min(mins.get(k[0], 1), len(s.replicas or ()), kafka_version), 1)
        if len(isr) < need:
            out[k] = (f"{name(k)} (replicas {list(s.replicas or ())}, ISR {list(s.isr)}, min ISR {need}: "
                      f"{'offline' if not isr else 'under min ISR'} without broker {broker})")
    return out


def unhealthy(statuses: Mapping[Key, PartStatus], live: Iterable[int], mins: Mapping[str, int],
              kafka_version: str) -> tuple[set[Key], set[Key]]:
    """(offline, under min ISR): no registered leader; fewer registered in-sync replicas than the effective
    min ISR (risk_model's definitions, counted on the state as it is)."""
    live = set(live)
    offline, under = set(), set()
    for k, s in statuses.items():
        if s.replicas is None:
            continue
        if s.leader < 0 or s.leader not in live:
            offline.add(k)
        elif len(_live_isr(s, live)) < effective_min(mins.get(k[0], 1), len(s.replicas), kafka_version):
            under.add(k)
    return offline, under


def not_back(statuses: Mapping[Key, PartStatus], broker: int, isr_before: Mapping[str, list[int]]) -> list[str]:
    """Partitions whose ISR held `broker` when its step began and does not hold it now."""
    out = []
    for text, isr in isr_before.items():
        if broker not in isr:
            continue
        t, p = text.rsplit("-", 1)
        s = statuses.get((t, int(p)))
        if s is None or s.replicas is None:
            continue
        if broker not in s.isr:
            out.append(f"{text} (ISR {list(s.isr)})")
    return out


def not_led(statuses: Mapping[Key, PartStatus], broker: int) -> list[str]:
    """Partitions whose preferred leader (replicas[0]) is `broker` and whose leader is not."""
    return [f"{name(k)} (leader {s.leader})" for k, s in statuses.items()
            if s.replicas and s.replicas[0] == broker and s.leader != broker]
