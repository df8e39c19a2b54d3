"""Convergence (issue 12's definition) and, for a partition that has not converged, why.

A partition has converged when it is absent from `/admin/reassign_partitions`, its topic znode lists exactly
the target with no adding/removing replicas, its leader is in the target and not -1, and its ISR equals the
target (as a set: Kafka keeps ISR in join order).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from planner.execution.clusterview import AdminZnode, Key, PartStatus
from planner.execution.planview import RunPlan
from planner.execution.runrecord import PENDING, RunRecord, UnitRecord
from planner.execution.throttles import FOLLOWER_REPLICAS


def converged(s: PartStatus, target: tuple[int, ...], in_reassign_znode: bool) -> bool:
    return (not in_reassign_znode and s.replicas == target and not s.reassigning and s.has_state
            and s.leader != -1 and s.leader in target and set(s.isr) == set(target) and len(s.isr) == len(target))


def reassign_keys(z: AdminZnode) -> dict[Key, tuple[int, ...]]:
    if not z.exists or z.entries is None:
        return {}
    return {(e.topic, e.partition): e.replicas for e in z.entries}


def run_units(plan: RunPlan, record: RunRecord | None) -> tuple[dict[Key, str], dict[Key, float]]:
    """From the run record: each partition's unit not submitted yet (its label), and when the unit in flight
    that moves it was submitted. With no record, every unit is pending."""
    pending: dict[Key, str] = {}
    submitted: dict[Key, float] = {}
    for u in plan.units:
        st = record.units[u.index] if record is not None else UnitRecord()
        for k in u.keys():
            if st.state == PENDING:
                pending.setdefault(k, u.label)
            elif st.in_flight and st.submitted_at:
                submitted[k] = st.submitted_at
    return pending, submitted


@dataclass
class Context:
    """What a diagnosis needs besides the partition itself."""

    live: set[int]
    reassign: AdminZnode
    pending_unit: Mapping[Key, str]       # partition -> label of the run's unit not yet submitted that writes it
    submitted_at: Mapping[Key, float]     # partition -> when its in-flight unit was submitted (epoch s)
    throttle: Mapping[str, object] | None  # the run's throttle record
    now: float
    time_left: float                      # seconds the caller still waits (0 at a timeout)


def diagnose(plan: RunPlan, statuses: Mapping[Key, PartStatus], ctx: Context) -> dict[Key, list[str]]:
    """Reasons for each partition of `statuses` that has not converged (converged ones are left out)."""
    zkeys = reassign_keys(ctx.reassign)
    rate, follower, into = _copying(plan, statuses, ctx)
    out: dict[Key, list[str]] = {}
    for k, s in statuses.items():
        target = plan.moves[k].to
        in_zk = k in zkeys
        if converged(s, target, in_zk):
            continue
        if s.replicas is None:
            out[k] = ["the topic or partition no longer exists"]
            continue
        why = _placement(k, s, target, zkeys, ctx)
        why += _replicas(k, s, ctx, rate, follower, into)
        if s.has_state and s.leader == -1:
            why.append("offline: no leader")
        elif s.has_state and s.leader not in target and not s.reassigning and s.replicas == target:
            why.append(f"leader {s.leader} is not in the target")
        elif not s.has_state:
            why.append("no partition state znode (no leader elected yet)")
        if not why and s.replicas == target and set(s.isr) != set(target):
            extra = sorted(set(s.isr) - set(target))
            why.append(f"ISR {list(s.isr)} still holds {extra}" if extra else f"ISR {list(s.isr)} incomplete")
        if not why:
            why.append("waiting for the controller to finish the reassignment")
        out[k] = why
    return out


def _copying(plan: RunPlan, statuses: Mapping[Key, PartStatus], ctx: Context
             ) -> tuple[float | None, dict[str, set[str]], dict[int, int]]:
    """The run's throttle rate, its follower-throttled replicas per topic, and the bytes still to copy into each
    broker by throttled moves in flight (for "throttle too low")."""
    into: dict[int, int] = defaultdict(int)
    rate = None
    follower: dict[str, set[str]] = {}
    if ctx.throttle:
        try:
            rate = float(ctx.throttle.get("rate"))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            rate = None
        for t, keys in (ctx.throttle.get("topics") or {}).items():  # type: ignore[union-attr]
            follower[t] = set(keys.get(FOLLOWER_REPLICAS, []))
    for k, s in statuses.items():
        if s.reassigning and s.target is not None:
            m = plan.moves.get(k)
            if m is None or not m.bytes:
                continue
            per_replica = m.bytes // max(1, len(set(m.to) - set(m.frm)))
            for b in set(s.target) - set(s.isr):
                into[b] += per_replica
    return rate, follower, into


def _placement(k: Key, s: PartStatus, target: tuple[int, ...], zkeys: Mapping[Key, tuple[int, ...]],
               ctx: Context) -> list[str]:
    """Why the partition's replica list is not (being moved to) its target."""
    in_zk = k in zkeys
    if ctx.reassign.exists and ctx.reassign.entries is None:
        return ["a malformed /admin/reassign_partitions blocks every reassignment (left untouched)"]
    if in_zk and zkeys[k] != target and not (s.reassigning and s.target == zkeys[k] and k in ctx.submitted_at):
        return [f"a foreign reassignment in the way: /admin/reassign_partitions moves it to {list(zkeys[k])}"]
    if in_zk and zkeys[k] != target:
        return []  # this run's own step in flight towards an intermediate list (leadership batch, revert)
    if not s.reassigning and s.replicas != target and k in ctx.pending_unit:
        if ctx.reassign.exists and not in_zk and zkeys and not set(zkeys) & set(ctx.submitted_at):
            return ["a foreign reassignment in the way: /admin/reassign_partitions holds other partitions, so "
                    f"{ctx.pending_unit[k]} cannot be submitted"]
        return [f"not submitted yet: {ctx.pending_unit[k]} of the run is pending (apply not finished)"]
    if not s.reassigning and s.replicas != target:
        return [f"replicas are {list(s.replicas)}: neither being moved nor at the target (changed by someone "
                "else, or the run was reverted)"]
    return []


def _replicas(k: Key, s: PartStatus, ctx: Context, rate: float | None, follower: dict[str, set[str]],
              into: dict[int, int]) -> list[str]:
    """Why target replicas are not in the ISR yet: not registered, or not catching up (a throttle too low?)."""
    why: list[str] = []
    waiting = [b for b in (s.target or ()) if b not in s.isr]
    dead = [b for b in waiting if b not in ctx.live]
    alive = [b for b in waiting if b in ctx.live]
    if dead:
        why.append(f"target broker{'s' if len(dead) > 1 else ''} {', '.join(map(str, dead))} not registered")
    if not alive:
        return why
    since = ctx.submitted_at.get(k)
    elapsed = ctx.now - since if since else None
    slow = []
    if rate and s.reassigning:
        for b in alive:
            if f"{k[1]}:{b}" in follower.get(k[0], set()) and into[b]:
                need = into[b] / rate
                if elapsed is None or need > elapsed + ctx.time_left:
                    slow.append((b, need))
    if slow:
        b, need = max(slow, key=lambda x: x[1])
        why.append(f"throttle too low for the bytes left: ~{into[b]:,} B to copy into broker {b} at "
                   f"{rate:,.0f} B/s need ~{need:,.0f} s" + (f" ({elapsed:,.0f} s elapsed)" if elapsed is not None else ""))
    else:
        took = f" after {elapsed:,.0f} s" if elapsed is not None else ""
        why.append(f"replica{'s' if len(alive) > 1 else ''} {', '.join(map(str, alive))} not catching up "
                   f"(broker alive, not in the ISR{took})")
    return why
