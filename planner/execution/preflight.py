"""Preflight: apply exactly the reviewed plan or nothing.

Refuses (SafetyRefusal / KraftMigration, exit 1, nothing written) when
- the cluster is migrating to KRaft (ZooKeeper is no longer authoritative);
- `/admin/reassign_partitions` exists and is not this run's own in-flight batch (foreign or malformed: it is
  left untouched, and named);
- a partition the plan touches no longer has the replicas the plan (or the run so far) left it with, is gone,
  or is reassigning (adding/removing replicas) other than towards this run's in-flight batch;
- a broker that is to receive replicas is not registered;
- a topic the plan touches is queued for deletion;
- a batch is too large to submit as one znode.
The plan files' id and cross-file consistency are checked by the plan reader before anything connects.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from planner import codec
from planner import zk as zkmod
from planner.errors import SafetyRefusal
from planner.execution.clusterview import AdminZnode, ClusterView, Key, PartStatus
from planner.execution.planview import RunPlan, Unit
from planner.execution.runstate import COMPLETED, ELECTING, SUBMITTED, Run

MAX_ZNODE_BYTES = 900 * 1024
SHOW = 20


def name(k: Key) -> str:
    return f"{k[0]}-{k[1]}"


def listing(items: list[str], show: int = SHOW) -> str:
    head = ", ".join(items[:show])
    return head + (f" and {len(items) - show} more" if len(items) > show else "")


@dataclass
class Expectation:
    """What a partition must look like now, given the run's progress."""

    settled: tuple[int, ...]                  # replicas after the last completed unit (or the plan's "from")
    in_flight: tuple[int, ...] | None = None  # target of the run's in-flight unit, if the partition is in it


def expectations(plan: RunPlan, run: Run | None) -> dict[Key, Expectation]:
    exp = {k: Expectation(m.frm) for k, m in plan.moves.items()}
    if run is None:
        return exp
    for u in plan.units:
        st = run.unit_state(u.index)
        if st == COMPLETED:
            for e in u.entries:
                exp[e.key] = Expectation(e.replicas)
        elif st in (SUBMITTED, ELECTING):
            for e in u.entries:
                exp[e.key].in_flight = e.replicas
    rev = run.record.revert
    if rev:
        unit = plan.units[rev.unit]
        for e, before in zip(unit.entries, unit.before, strict=True):
            if rev.state == COMPLETED:
                exp[e.key] = Expectation(before)
            elif rev.state == SUBMITTED:
                exp[e.key].in_flight = before
    return exp


def matches(s: PartStatus, x: Expectation) -> bool:
    if s.replicas is None:
        return False
    if not s.reassigning and s.replicas == x.settled:
        return True
    if x.in_flight is not None:
        if not s.reassigning and s.replicas == x.in_flight:
            return True
        if s.reassigning and s.target == x.in_flight:
            return True
    return False


def own_reassignment(z: AdminZnode, run: Run | None, plan: RunPlan) -> bool:
    """True when the znode holds only entries of this run's in-flight unit (the controller removes entries as
    they complete, so a subset), or of the unit it completed last: a unit is complete once its partitions are
    at their targets, a moment before the controller deletes the znode, and a run resumed in that moment
    finds it still there."""
    if not z.exists or z.entries is None or run is None:
        return False
    ours: dict[Key, tuple[int, ...]] = {}
    done = run.record.completed()
    last_done = max(done) if done else None  # units run in order
    for i in [*([last_done] if last_done is not None else []), *run.in_flight()]:
        for e in plan.units[i].entries:
            ours[e.key] = e.replicas
    rev = run.record.revert
    if rev and rev.state == SUBMITTED:
        u = plan.units[rev.unit]
        for e, before in zip(u.entries, u.before, strict=True):
            ours[e.key] = before
    return bool(ours) and all(ours.get((e.topic, e.partition)) == e.replicas for e in z.entries)


def describe_foreign(z: AdminZnode) -> str:
    if z.entries is None:
        return (f"/admin/reassign_partitions exists and is malformed ({z.error}); Kafka's controller ignores it and "
                "blocks every later reassignment. kplan leaves it untouched: remove it only once you know who wrote it")
    shown = listing([f"{e.topic}-{e.partition}->{list(e.replicas)}" for e in z.entries], 10)
    return (f"/admin/reassign_partitions exists with a reassignment that is not this run's ({len(z.entries)} "
            f"partitions: {shown}); kplan leaves it untouched and waits for nobody: apply again once it is done")


def check_cluster(client: KazooClient) -> None:
    zkmod.require_kafka(client)
    zkmod.refuse_kraft_migration(client)


def check(client: KazooClient, view: ClusterView, plan: RunPlan, run: Run | None) -> dict[Key, PartStatus]:
    """All checks; returns the partitions' current status (read in bulk) for the caller's first step."""
    check_cluster(client)
    z = view.reassignment()
    if z.exists and not own_reassignment(z, run, plan):
        raise SafetyRefusal(describe_foreign(z))
    for u in plan.units:
        size = len(codec.encode_reassignment([codec.ReassignEntry(e.topic, e.partition, e.replicas)
                                              for e in u.entries]))
        if size > MAX_ZNODE_BYTES:
            raise SafetyRefusal(f"{u.label} would be a {size}-byte /admin/reassign_partitions znode, over ZooKeeper's "
                                "1 MiB request limit; apply it with a lower max_concurrent_per_broker")
    try:
        deleting = set(client.get_children(codec.DELETE_TOPICS))
    except NoNodeError:
        deleting = set()
    doomed = sorted({k[0] for k in plan.moves} & deleting)
    if doomed:
        raise SafetyRefusal(f"topics queued for deletion are in the plan ({listing(doomed)}): Kafka blocks their "
                            "reassignment; make a new plan")
    status = view.partitions(plan.moves, states=False)
    exp = expectations(plan, run)
    problems: list[str] = []
    reassigning: list[str] = []
    for k, s in status.items():
        x = exp[k]
        if matches(s, x):
            continue
        if s.replicas is None:
            problems.append(f"{name(k)} (no longer exists)")
        elif s.reassigning:
            reassigning.append(f"{name(k)} (adding {list(s.adding)}, removing {list(s.removing)})")
        else:
            problems.append(f"{name(k)} (plan expects {list(x.settled)}, cluster has {list(s.replicas)})")
    if reassigning:
        raise SafetyRefusal(f"{len(reassigning)} partitions of the plan are being reassigned by someone else: "
                            f"{listing(reassigning)}; nothing was written")
    if problems:
        raise SafetyRefusal(f"the cluster changed since the plan was made: {len(problems)} partitions no longer match "
                            f"it: {listing(problems)}. Take a new snapshot and plan again; nothing was written")
    check_targets(view, plan, run)
    return status


def check_targets(view: ClusterView, plan: RunPlan, run: Run | None, units: list[Unit] | None = None) -> None:
    live = view.live_brokers()
    missing: dict[int, set[Key]] = defaultdict(set)
    for u in units if units is not None else plan.units:
        if run is not None and u.kind != "revert" and run.unit_state(u.index) == COMPLETED:
            continue
        for e in u.entries:
            for b in e.replicas:
                if b not in live:
                    missing[b].add(e.key)
    if missing:
        named = ", ".join(f"broker {b} ({len(ks)} partition{'s' if len(ks) > 1 else ''}: "
                          f"{listing([name(k) for k in sorted(ks)], 5)})" for b, ks in sorted(missing.items()))
        raise SafetyRefusal(f"brokers the plan moves replicas to are not registered in /brokers/ids: {named}; start "
                            "them (or make a new plan) and apply again; nothing was written")
