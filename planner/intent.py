"""A drain's intent, checked against the cluster as it is now: the drained brokers host no replica and lead
no partition, anywhere in the cluster (not only the plan's partitions).

A plan is made from a snapshot. A topic created afterwards with replicas on a drained broker, a partition
added, a replica moved there by someone else, or a topic the plan was told to leave alone (`exclude_topics`)
is not in the plan, so the plan's partitions can all converge while the broker still hosts data. Stopping it
then is the incident this tool exists to prevent. apply (its final state), verify (its report, and its exit
code) and the risk after the plan (on a re-read cluster) all ask this one question: this module answers it
from rows (topic, partition, replicas, leader), pure; planner.execution.intent reads the rows from ZooKeeper,
planner.risk from a snapshot with the plan applied.

A replica counts wherever Kafka's assignment lists it, reassignments in flight included (the topic znode holds
the full replica set, adding and removing replicas too: `KafkaZkClient.setTopicAssignment`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from planner.errors import NextStep
from planner.text import count

Key = tuple[str, int]
SHOW = 20


@dataclass(frozen=True)
class DrainFacts:
    """What a drain plan knew (plan.json): the brokers it empties, its partitions, the snapshot's topics."""

    brokers: tuple[int, ...]
    planned: frozenset[Key] = frozenset()
    topics: Mapping[str, tuple[int, bool]] = field(default_factory=dict)   # name -> (partitions, excluded)
    snapshot_taken_at: str | None = None


def reason(facts: DrainFacts, key: Key) -> str:
    """Why a partition on a drained broker is not covered by the plan (what appeared since the snapshot)."""
    topic, part = key
    since = f" since the snapshot of {facts.snapshot_taken_at}" if facts.snapshot_taken_at else " since the snapshot"
    if key in facts.planned:
        return "in the plan, not at its target yet"
    known = facts.topics.get(topic)
    if facts.topics and known is None:
        return "topic created" + since
    if known is not None and known[1]:
        return "topic excluded from the plan (exclude_topics)"
    if known is not None and part >= known[0]:
        return "partition added" + since
    return "not in the plan: moved onto the broker" + since + ", or left alone by the plan (see its warnings)"


def follow_up(brokers: Iterable[int]) -> str:
    """What to do when a drain's intent does not hold, in words (the steps themselves: `next_steps`)."""
    return f"a follow-up drain of broker(s) {','.join(map(str, brokers))} from a new snapshot"


def next_steps(intent: Mapping[str, Any] | None) -> tuple[NextStep, ...]:
    """The follow-up drain as a step to run (errors.NextStep), when a drain's intent does not hold."""
    if not intent or intent.get("holds", True):
        return ()
    return (NextStep("follow-up drain", "plans what they still host, for review", tuple(intent["brokers"])),)


def evaluate(facts: DrainFacts, rows: Iterable[tuple[str, int, Iterable[int], int | None]],
             why: Callable[[Key], str] | None = None) -> dict[str, Any]:
    """The intent section from every partition's (topic, partition, replicas, leader or None): {"kind":
    "drain", "brokers", "holds", "remaining": [{"topic", "partition", "replicas", "leader", "reason"}...],
    "remaining_count", "leading_count", "next", "text"}."""
    drained = set(facts.brokers)
    explain = why or (lambda k: reason(facts, k))
    remaining: list[dict[str, Any]] = []
    leading = 0
    for topic, part, replicas, leader in rows:
        reps = list(replicas)
        leads = leader is not None and leader in drained
        if leads or drained.intersection(reps):
            leading += bool(leads)
            remaining.append({"topic": topic, "partition": part, "replicas": reps, "leader": leader,
                              "reason": explain((topic, part))})
    remaining.sort(key=lambda r: (r["topic"], r["partition"]))
    holds = not remaining
    out: dict[str, Any] = {"kind": "drain", "brokers": sorted(drained), "holds": holds, "remaining": remaining,
                           "remaining_count": len(remaining), "leading_count": leading,
                           "next": None if holds else follow_up(sorted(drained))}
    out["text"] = describe(out)
    return out


def describe(intent: Mapping[str, Any], show: int = SHOW) -> str:
    """One paragraph: holds, or what the drained brokers still host and lead, each with why, and what to run."""
    brokers = ",".join(map(str, intent["brokers"]))
    if intent["holds"]:
        return f"drain intent holds: broker(s) {brokers} host no replica and lead no partition"
    rem = intent["remaining"]
    items = "; ".join(f"{r['topic']}-{r['partition']} replicas {r['replicas']} leader {r['leader']} ({r['reason']})"
                      for r in rem[:show])
    more = f"; and {len(rem) - show} more" if len(rem) > show else ""
    rf1 = sum(1 for r in rem if len(r["replicas"]) == 1)
    danger = (f"; {count(rf1, 'partition')} with a single replica would go offline if the broker stopped"
              if rf1 else "")
    return (f"the drain is not complete: broker(s) {brokers} still host {count(len(rem), 'partition')} and lead "
            f"{intent['leading_count']}{danger}: {items}{more}. Do not stop the broker(s) yet; run {intent['next']}")
