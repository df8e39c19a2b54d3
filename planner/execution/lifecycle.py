"""Where apply and verify meet the brokers' maintenance state (planner/maintenance.py), on either backend.

apply (drain)   -> its brokers `draining`, in the same fenced transaction as the run record's first save
apply (return)  -> its brokers `returning`, the same way
verify (drain)  -> `drained`, only when the drain's intent holds: the brokers host no replica and lead nothing,
                   whatever appeared since the snapshot
verify (return) -> out of maintenance, once converged and after the preferred election
Any apply       -> refused, before anything is written, when its plan would give a replica or preferred
                   leadership to a broker that is in maintenance now (it entered maintenance after the snapshot),
                   other than the plan's own returning brokers.

`apply_changes` and `verify_changes` decide on the states read (maintenance.States), backend-neutral; the
ZooKeeper executor and verifier write them through planner.maintenance_zk (`apply_ops`, `after_verify`), the
KRaft ones through planner.maintenance_kraft, in their own fenced transactions.
"""

from __future__ import annotations

import logging
from typing import Any

from kazoo.client import KazooClient

from planner import maintenance as mt
from planner import maintenance_zk
from planner.errors import SafetyRefusal
from planner.execution import preflight
from planner.execution.clusterview import ClusterView
from planner.execution.planview import RunPlan
from planner.zkgate import Op, WriteGate

log = logging.getLogger(__name__)


def apply_changes(states: mt.States, plan: RunPlan, *, run: str | None, reason: str | None, command: str
                  ) -> list[mt.Change]:
    """The maintenance changes an apply of `plan` makes when it starts (raises, writing nothing, when the plan
    would give a broker in maintenance anything, or when the table forbids the move)."""
    own = set(plan.returning)
    bad: list[str] = []
    for m in plan.moves.values():
        gets = {b for b in m.to if b not in m.frm}
        if m.to and m.frm and m.to[0] != m.frm[0]:
            gets.add(m.to[0])
        hit = sorted(b for b in gets if states.get(b) is not None and b not in own)
        if hit:
            bad.append(f"{preflight.name(m.key)} -> {list(m.to)}")
    if bad:
        who = "; ".join(e.describe() for b, e in sorted(states.entries.items()) if b not in own)
        raise SafetyRefusal(f"plan {plan.id} would give replicas or preferred leadership to brokers in maintenance "
                            f"({who}): {preflight.listing(bad)}. They entered maintenance after the snapshot: take a "
                            "new snapshot and plan; nothing was written")
    by = mt.identity(command)
    if plan.kind == "drain":
        return mt.transition(states, plan.drained, mt.DRAIN_APPLY, mt.DRAINING, plan_id=plan.id, run=run, by=by,
                             reason=reason or f"drain of brokers {list(plan.drained)}")
    if plan.kind == "return":
        return mt.transition(states, plan.returning, mt.RETURN_APPLY, mt.RETURNING, plan_id=plan.id, run=run, by=by,
                             reason=reason or f"return of brokers {list(plan.returning)}")
    return []


def apply_ops(client: KazooClient, plan: RunPlan, *, run: str | None, reason: str | None, command: str
              ) -> list[Op]:
    """`apply_changes` on ZooKeeper: the znode writes, for the apply's first fenced transaction."""
    states = maintenance_zk.read_all(client)
    return maintenance_zk.ops(states, apply_changes(states, plan, run=run, reason=reason, command=command))


def drain_intent(view: ClusterView, plan: RunPlan) -> dict[str, Any] | None:
    """Does the drain hold on the whole cluster (not only on the plan's partitions)? planner.execution.intent:
    the drained brokers host no replica (assigned, being added, or a reassignment's target) and lead nothing."""
    from planner.execution.intent import drain_intent as check

    return check(view, plan)


def verify_changes(states: mt.States, plan: RunPlan, converged: bool, intent: dict[str, Any] | None
                   ) -> tuple[list[mt.Change], dict[str, Any]]:
    """The maintenance moves a verify makes, and what it did for the report: {"set": {broker: state or None},
    "kept": {broker: why}} (a drain's brokers become drained only when its intent holds on the whole cluster; a
    return's leave maintenance once it converged)."""
    out: dict[str, Any] = {"set": {}, "kept": {}}
    if plan.kind == "drain":
        brokers, actor, to = plan.drained, mt.DRAIN_VERIFY, mt.DRAINED
        if not converged or not (intent or {}).get("holds"):
            why = "the plan has not converged" if not converged else \
                f"the drain does not hold yet: {len((intent or {}).get('remaining') or ())} partitions still on it"
            out["kept"] = {str(b): why for b in brokers}
            return [], out
    elif plan.kind == "return":
        brokers, actor, to = plan.returning, mt.RETURN_VERIFY, None
        if not converged:
            out["kept"] = {str(b): "the plan has not converged" for b in brokers}
            return [], out
    else:
        return [], out
    movable = []
    for b in brokers:
        e = states.get(b)
        try:
            mt.check(e, actor, to, plan.id)
            movable.append(b)
        except mt.MaintenanceConflict:
            out["kept"][str(b)] = "its state is not this plan's: " + (e.describe() if e else "in service")
    changes = mt.transition(states, movable, actor, to, plan_id=plan.id, by=mt.identity("verify")) if movable else []
    for b in movable:
        out["set"][str(b)] = to
    return changes, out


def after_verify(client: KazooClient, gate: WriteGate, plan: RunPlan, converged: bool,
                 intent: dict[str, Any] | None) -> dict[str, Any]:
    """`verify_changes` on ZooKeeper (the caller holds the lock: `gate` is fenced). Returns what it did."""
    states = maintenance_zk.read_all(client)
    changes, out = verify_changes(states, plan, converged, intent)
    if changes:
        gate.commit(maintenance_zk.ops(states, changes))
        for b, to in out["set"].items():
            log.info("broker %s is now %s", b, to or "in service")
    return out
