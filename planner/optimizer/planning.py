"""One plan from a Problem: placement (drain or rebalance), then leader order, then checks, batches, figures.

Decomposition, because each step is a network flow that scales: data placement first (the expensive part,
the only one that moves bytes), then the preferred-leader order on the final placement (free: reorders).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from planner.errors import BadInput, NextStep
from planner.optimizer import capacity
from planner.optimizer.batches import Batch, changed_sets, make_batches
from planner.optimizer.checks import verify_plan
from planner.optimizer.drain import place_drain
from planner.optimizer.leader_bytes import level_bytes_led
from planner.optimizer.leaders import LeaderResult, choose_leaders, necessary_changes
from planner.optimizer.problem import Problem
from planner.optimizer.rebalance import RebalanceInfo, place_rebalance
from planner.optimizer.returns import DrainMove, ReturnInfo, place_return
from planner.optimizer.room import leader_room_reason

KINDS = ("drain", "rebalance", "return")
RETURN_ADVICE = {"draining": "its drain has not been verified yet: verify it (or run the follow-up drain) first",
                 "restarting": "it is in a restart roll, which brings it back itself"}
ORDERS = ("smallest-first", "largest-first")
SCOPES = ("touched", "all")


@dataclass
class Params:
    kind: str                                   # "drain" | "rebalance" | "return"
    brokers: list[int] = field(default_factory=list)   # drained (drain) or returning (return) brokers
    max_moves: int | None = None
    max_bytes: int | None = None
    max_concurrent_per_broker: int = 5
    order: str = "smallest-first"
    balance: str = "auto"                       # rebalance: auto | count | bytes
    leader_scope: str | None = None             # touched | all; None: touched for a drain, all for a rebalance
    max_leader_changes: int | None = None       # all preferred-leader changes, necessary ones included
    batch_seconds: int = 3600                   # target duration of one batch (its suggested throttle)
    undo: tuple[DrainMove, ...] = ()            # return: the drain's moves, reversed where the cluster matches
    undo_plan: str | None = None                # return: the id of the drain plan those moves come from

    @property
    def scope(self) -> str:
        """The leader scope in force: which partitions may change their preferred leader."""
        return self.leader_scope or ("all" if self.kind == "rebalance" else "touched")

    def validate(self) -> None:
        if self.kind not in KINDS:
            raise BadInput(f"unknown plan kind {self.kind!r}")
        if self.kind in ("drain", "return") and not self.brokers:
            raise BadInput(f"a {self.kind} needs at least one broker (brokers)")
        if len(set(self.brokers)) != len(self.brokers):
            raise BadInput(f"brokers lists a broker twice: {self.brokers}")
        if self.max_concurrent_per_broker < 1:
            raise BadInput(f"max_concurrent_per_broker must be at least 1, got {self.max_concurrent_per_broker}")
        for name in ("max_moves", "max_bytes"):
            v = getattr(self, name)
            if v is not None and v < 0:
                raise BadInput(f"{name} must not be negative, got {v}")
        if self.order not in ORDERS:
            raise BadInput(f"order must be one of {', '.join(ORDERS)}, not {self.order!r}")
        if self.balance not in ("auto", "count", "bytes"):
            raise BadInput(f"balance must be auto, count or bytes, not {self.balance!r}")
        if self.leader_scope is not None and self.leader_scope not in SCOPES:
            raise BadInput(f"leader_scope must be one of {', '.join(SCOPES)}, not {self.leader_scope!r}")
        if self.max_leader_changes is not None and self.max_leader_changes < 0:
            raise BadInput(f"max_leader_changes must not be negative, got {self.max_leader_changes}")
        if self.batch_seconds < 1:
            raise BadInput(f"batch_seconds must be at least 1, got {self.batch_seconds}")


@dataclass
class PlanResult:
    problem: Problem
    params: Params
    drained: np.ndarray          # (B,) bool
    eligible: np.ndarray         # (B,) bool
    placed: np.ndarray           # (P, R) after placement, before leader order
    final: np.ndarray            # (P, R) final ordered lists
    topic_bound: np.ndarray      # (T,) per-topic bound the leader step met
    leader_method: str
    leaders: LeaderResult        # the leader step (changes, necessary / optional)
    alternative: dict[str, Any]  # the same figures with the other leader scope (the trade a review shows)
    batches: list[Batch]
    rebalance: RebalanceInfo | None
    timings: dict[str, float]
    warnings: list[str]
    returned: ReturnInfo | None = None   # a return plan's undo / balance figures
    left_out: np.ndarray | None = None   # (B,) bool: brokers in maintenance this plan gives nothing
    leader_bytes_swaps: int = 0  # same-topic leadership swaps that levelled bytes led (optimizer/leader_bytes.py)
    leader_spread_reason: str | None = None   # why leader spread stays above 1 (room.leader_room_reason)

    @property
    def changed(self) -> np.ndarray:
        return np.flatnonzero((self.final != self.problem.replicas).any(axis=1))


def make_plan(pb: Problem, params: Params, progress: Callable[[str], None] | None = None) -> PlanResult:
    params.validate()
    say = progress or (lambda _msg: None)
    timings: dict[str, float] = {}
    B = pb.num_brokers
    drained = np.zeros(B, dtype=bool)
    returning = np.zeros(B, dtype=bool)
    if params.kind == "drain":
        drained[pb.broker_index(params.brokers)] = True
    elif params.kind == "return":
        known = set(pb.broker_ids.tolist())
        dead = sorted(int(b) for b in params.brokers if b not in known and b in pb.maintenance_entries)
        if not dead:
            returning[pb.broker_index(params.brokers)] = True
            dead = [int(b) for b in pb.broker_ids[returning & ~pb.alive]]
        if dead:
            raise BadInput(f"broker(s) {dead} are not registered (not in /brokers/ids when the snapshot was "
                           "taken): a return moves replicas onto them; start them, then take a new snapshot")
        for b in params.brokers:
            e = pb.maintenance_entries.get(int(b))
            if e is None:
                raise BadInput(f"broker {b} is not in maintenance (the snapshot records no drained state for it): a "
                               "return brings a drained broker back; to fill a broker in service, plan a rebalance")
            if e.state not in ("drained", "returning"):
                raise BadInput(f"broker {b} is {e.state}, not drained ({e.describe()}): "
                               + RETURN_ADVICE.get(e.state, "clear its maintenance state first"),
                               next_steps=(NextStep("maintenance clear", "clears it", (int(b),)),))
        # the return owns the returning brokers' maintenance state: they may receive (nobody else may)
        pb = replace(pb, maintenance=pb.in_maintenance & ~returning)
    eligible = pb.receivers(drained)
    if not eligible.any():
        raise BadInput("no registered broker would remain to hold replicas")
    warnings = list(pb.warnings)
    left_out = pb.in_maintenance & ~drained
    if left_out.any():
        what = "; ".join(_left_out_text(pb, int(b)) for b in pb.broker_ids[left_out].tolist())
        warnings.append(f"left out: brokers in maintenance get no replica and no preferred leadership from this "
                        f"plan: {what}")
    dead = [int(b) for b in pb.broker_ids[drained & ~pb.alive]]
    if dead:
        warnings.append(f"drained brokers {dead} are not registered: their replicas are re-created from the "
                        "other replicas")
        valid = pb.replicas >= 0
        on_dead = (valid & drained[np.maximum(pb.replicas, 0)]).any(axis=1)
        orphan = np.flatnonzero(on_dead & ~(valid & pb.alive[np.maximum(pb.replicas, 0)]).any(axis=1))
        if len(orphan):
            warnings.append(f"{len(orphan)} partitions have no replica on a registered broker ({pb.names(orphan)}): "
                            "their new replicas have nothing to copy from, so their reassignment cannot complete "
                            "until a broker holding their data returns (the data exists only there)")

    t = time.perf_counter()
    info = None
    returned = None
    if params.kind == "drain":
        say(f"placing the replicas of brokers {params.brokers} (min-cost flow)")
        placed = place_drain(pb, drained)
    elif params.kind == "return":
        say(f"moving replicas back onto brokers {params.brokers} (the drain's own moves first)")
        placed, returned = place_return(pb, returning, params.undo)
        warnings.extend(returned.warnings)
    else:
        say("choosing rebalance moves (min-cost flow)")
        placed, info = place_rebalance(pb, eligible, params.balance, params.max_moves, params.max_bytes)
        warnings.extend(info.unreached)
        if info.reach is not None and info.reach.joint_from is not None:
            warnings.append(f"replica spread {info.reach.spread} at best with level leaders, not the "
                            f"{info.reach.joint_from} the racks alone allow: {info.reach.reason}")
    timings["placement_s"] = time.perf_counter() - t

    t = time.perf_counter()
    scope = params.scope
    say(f"ordering preferred leaders, scope {scope} (max flow + min-cost flow)")
    lr = choose_leaders(pb, placed, eligible, scope_rows(pb, placed, scope),
                        max_changes=params.max_leader_changes)
    active = scope_rows(pb, placed, scope)
    if returned is not None and len(returned.undo_rows):
        lr = _keep_order(pb, placed, eligible, lr, returned.undo_rows)
        active = active.copy()
        active[returned.undo_rows] = False      # their order is the one from before the drain: kept
    lr, swaps = _level_leader_bytes(pb, lr, eligible, active, params.max_leader_changes, scope)
    timings["leaders_s"] = time.perf_counter() - t
    t = time.perf_counter()
    other = "all" if scope == "touched" else "touched"
    say(f"leader order with scope {other}, for comparison")
    alt = choose_leaders(pb, placed, eligible, scope_rows(pb, placed, other))
    alt, _ = _level_leader_bytes(pb, alt, eligible, scope_rows(pb, placed, other), None, other)
    alternative = {"scope": other, **leader_figures(pb, alt, eligible)}
    timings["leaders_alternative_s"] = time.perf_counter() - t

    t = time.perf_counter()
    verify_plan(pb, lr.ordered, drained)
    what = f"the {params.kind}" + (f" of brokers {params.brokers}" if params.brokers else "")
    capacity.check_final(pb, lr.ordered, what)
    batches = make_batches(pb, lr.ordered, drained, params.max_concurrent_per_broker, params.order)
    capacity.check_batches(pb, batches, what)
    warnings.extend(disk_warnings(pb, lr.ordered))
    timings["checks_batches_s"] = time.perf_counter() - t
    reason = None
    lead = np.bincount(lr.ordered[:, 0][lr.ordered[:, 0] >= 0], minlength=B)[eligible] if placed.shape[1] else None
    if params.kind == "rebalance" and lead is not None and len(lead) and int(lead.max() - lead.min()) > 1:
        reason = leader_room_reason(pb, placed, eligible, lr.topic_bound)
        warnings.append(f"leader spread {int(lead.max() - lead.min())}: "
                        + (reason or "the leader step stopped here (its limit, not a proof: a better order may "
                                     "exist)"))
    return PlanResult(pb, params, drained, eligible, placed, lr.ordered, lr.topic_bound, lr.method, lr,
                      alternative, batches, info, timings, warnings, returned, left_out, swaps, reason)


def _left_out_text(pb: Problem, broker: int) -> str:
    e = pb.maintenance_entries.get(broker)
    return f"broker {broker} ({e.describe().removeprefix(f'broker {broker} ')})" if e else f"broker {broker}"


def _keep_order(pb: Problem, placed: np.ndarray, eligible: np.ndarray, lr: LeaderResult,
                rows: np.ndarray) -> LeaderResult:
    """A return's reversed partitions keep their list from before the drain, in its order: the leadership the
    drain took away comes back with them."""
    ordered = lr.ordered.copy()
    ordered[rows] = placed[rows]
    changed = ordered[:, 0] != pb.replicas[:, 0] if ordered.shape[1] else np.zeros(len(ordered), bool)
    needed = necessary_changes(pb, placed, eligible, scope_rows(pb, placed, "touched"))
    changes = int(changed.sum())
    necessary = int((changed & needed).sum())
    leader = np.where(ordered[:, 0] >= 0, ordered[:, 0], -1) if ordered.shape[1] else lr.leader
    return LeaderResult(ordered, leader, lr.topic_bound, changes, lr.method, necessary, changes - necessary)


def _level_leader_bytes(pb: Problem, lr: LeaderResult, eligible: np.ndarray, active: np.ndarray,
                        max_changes: int | None, scope: str) -> tuple[LeaderResult, int]:
    """Leader load as the last leader objective (optimizer/leader_bytes.py): same-topic leadership swaps that
    level bytes led without changing any replica or leader count, nor adding a preferred-leader change (so the
    leader-change budget, scope touched's least churn and the fewest-changes objective all hold)."""
    # fewer preferred-leader changes outrank leader load (docs/PLAN.md): only swaps that add no change
    budget = 0
    ordered, swaps = level_bytes_led(pb, lr.ordered, eligible, active, budget=budget)
    if not swaps:
        return lr, 0
    changes = int((ordered[:, 0] != pb.replicas[:, 0]).sum())
    return replace(lr, ordered=ordered, leader=ordered[:, 0].copy(), changes=changes,
                   optional=changes - lr.necessary), swaps


def disk_warnings(pb: Problem, final: np.ndarray) -> list[str]:
    """The plan cannot check the disks of brokers it gives bytes to whose capacity is unknown: say so."""
    added, _, unknown = capacity.changes(pb, pb.replicas, final)
    out = []
    blind = capacity.unchecked(pb, added > 0)
    if blind and (pb.capacity_bytes >= 0).any():
        out.append(f"disk capacity of brokers {blind} is unknown (no DescribeLogDirs v4 answer): the plan could "
                   "not check that they have room for what it gives them")
    elif blind:
        out.append("disk capacity unknown (snapshot without log-dir capacity, or Kafka older than 3.3): the plan "
                   "could not check that the receiving brokers have room")
    if unknown:
        out.append(f"{unknown} partitions that move have no known size: disk usage after the plan is a lower "
                   "bound")
    return out


def scope_rows(pb: Problem, placed: np.ndarray, scope: str) -> np.ndarray:
    """(P,) the partitions whose preferred leader the plan may change: all (except excluded and in-flight
    ones), or only those whose replica set the placement changes ("touched": for a drain, those with a replica
    on a drained broker)."""
    if scope == "all":
        return ~pb.fixed
    return ~pb.fixed & changed_sets(pb.replicas, placed)


def leader_figures(pb: Problem, lr: LeaderResult, eligible: np.ndarray) -> dict[str, Any]:
    """What one leader order reaches: changes (necessary / optional), per-broker spread, per-topic maxima."""
    lead = np.bincount(lr.ordered[:, 0][lr.ordered[:, 0] >= 0], minlength=pb.num_brokers)[eligible] \
        if lr.ordered.shape[1] else np.zeros(int(eligible.sum()), np.int64)
    n_e = int(eligible.sum())
    ideal = float(lead.sum()) / n_e if n_e else 0.0
    top = topic_leader_max(pb, lr.ordered)
    T = len(pb.topic_names)
    ceil_t = -(-np.bincount(pb.topic_of, minlength=T) // max(1, n_e))
    act = ~pb.excluded_topic
    return {
        "leadership_changes": lr.changes,
        "necessary": lr.necessary,
        "optional": lr.optional,
        "leader_spread_after": _spread(lead),
        "leaders_within_one_of_ideal": bool((np.abs(lead - ideal) <= 1 + 1e-9).all()) if n_e else True,
        "max_topic_leaders_per_broker_after": int(top[act].max()) if act.any() else 0,
        "topics_over_ceil_partitions_per_broker": int(((top > ceil_t) & act).sum()),
    }


# ----------------------------------------------------------------------------------------------- figures
def broker_figures(pb: Problem, matrix: np.ndarray, eligible: np.ndarray) -> dict[str, Any]:
    """Per-broker replica / preferred-leader / byte counts and their spreads over the eligible brokers."""
    B = pb.num_brokers
    valid = matrix >= 0
    reps = np.bincount(matrix[valid], minlength=B)
    lead = np.bincount(matrix[:, 0][matrix[:, 0] >= 0], minlength=B) if matrix.shape[1] else np.zeros(B, int)
    out: dict[str, Any] = {
        "replicas": reps.tolist(),
        "preferred_leaders": lead.tolist(),
        "replica_spread": _spread(reps[eligible]),
        "leader_spread": _spread(lead[eligible]),
    }
    if pb.sizes_known:
        w = np.broadcast_to(pb.sizes[:, None], matrix.shape)[valid]
        by = np.bincount(matrix[valid], weights=w, minlength=B).astype(np.int64)
        e = by[eligible]
        mean = float(e.mean()) if len(e) else 0.0
        out["bytes"] = by.tolist()
        out["bytes_max_deviation_pct"] = round(100.0 * float(np.abs(e - mean).max()) / mean, 3) if mean else 0.0
        lead_rows = matrix[:, 0] >= 0 if matrix.shape[1] else np.zeros(len(matrix), bool)
        led = np.bincount(matrix[lead_rows, 0], weights=np.maximum(pb.sizes[lead_rows], 0),
                          minlength=B).astype(np.int64)
        out["bytes_led"] = led.tolist()
        out["bytes_led_spread"] = _spread(led[eligible])
    if (pb.capacity_bytes >= 0).any():
        used = capacity.usage_after(pb, matrix) if pb.sizes_known else pb.disk_used_bytes
        out["disk_used_bytes"] = [int(x) if x >= 0 else None for x in used.tolist()]
    return out


def _spread(x: np.ndarray) -> int:
    return int(x.max() - x.min()) if len(x) else 0


def topic_leader_max(pb: Problem, matrix: np.ndarray) -> np.ndarray:
    """(T,) the most partitions of each topic one registered broker is preferred leader of. Brokers that are
    not registered are left out: their partitions with no registered replica are offline and stay where they
    are in every plan (issue 25: a 19-broker generated cluster counted one topic over its cap for the 13 RF 1
    partitions of a broker that had left, whatever the plan did)."""
    T = len(pb.topic_names)
    lead = matrix[:, 0] if matrix.shape[1] else np.full(len(matrix), -1)
    ok = (lead >= 0) & pb.alive[np.maximum(lead, 0)]
    keys = pb.topic_of[ok].astype(np.int64) * pb.num_brokers + lead[ok]
    k, c = np.unique(keys, return_counts=True)
    out = np.zeros(T, dtype=np.int64)
    np.maximum.at(out, k // pb.num_brokers, c)
    return out


def move_figures(res: PlanResult) -> dict[str, Any]:
    pb = res.problem
    orig, final = pb.replicas, res.final
    data = changed_sets(orig, final)
    added = (final >= 0) & ~(final[:, :, None] == orig[:, None, :]).any(axis=2)
    n_added = added.sum(axis=1)
    replica_moves = int(n_added.sum())
    bytes_moved = int((n_added * np.maximum(pb.sizes, 0)).sum()) if pb.sizes_known else None
    leader_changes = int(((final[:, 0] != orig[:, 0]) if orig.shape[1] else np.zeros(0, bool)).sum())
    if res.params.kind == "drain":
        lb = int(((orig >= 0) & res.drained[np.maximum(orig, 0)]).sum())
        lb_bytes = None
        if pb.sizes_known:
            on = ((orig >= 0) & res.drained[np.maximum(orig, 0)]).sum(axis=1)
            lb_bytes = int((on * np.maximum(pb.sizes, 0)).sum())
        extra: dict[str, Any] = {"lower_bound_basis": "drained replicas"}
    elif res.params.kind == "return":
        ret = res.returned
        assert ret is not None
        lb, lb_bytes = ret.lower_bound_moves, None
        extra = {"reversed_drain_moves": ret.reversed, "drain_moves": ret.drain_moves,
                 "drain_moves_no_longer_matching": ret.stale, "drain_moves_held_back": ret.held_back,
                 "balanced_moves": ret.balanced}
    else:
        info = res.rebalance
        assert info is not None
        lb = info.lower_bound_moves
        lb_bytes = info.lower_bound_bytes
        extra = {"balance": info.mode, "excess_over_ceil_mean": info.excess_over_ceil_mean,
                 "leader_repair_moves": info.repair_moves, "rounds": info.rounds,
                 **rebalance_bound_figures(info, replica_moves)}
    return {
        "replica_moves": replica_moves,
        "partitions_moved": int(data.sum()),
        "bytes_moved": bytes_moved,
        "lower_bound_moves": lb,
        "lower_bound_bytes": lb_bytes,
        "moves_over_lower_bound": round(replica_moves / lb, 4) if lb else None,
        "leadership_changes": leader_changes,
        "leader_only_partitions": int(((orig != final).any(axis=1) & ~data).sum()),
        **extra,
    }


def rebalance_bound_figures(info: RebalanceInfo, replica_moves: int) -> dict[str, Any]:
    """What a rebalance's lower bound is for: the band of replica counts (the best spread the racks allow,
    reach.py, and why not better), the topics' leader caps, and which of the bounds (bounds.py) it is."""
    bd, rc = info.bound, info.reach
    out: dict[str, Any] = {}
    if rc is not None:
        out.update({"target_replica_band": [rc.low, rc.high], "reachable_replica_spread": rc.spread,
                    "replica_spread_reason": rc.reason})
    if bd is not None:
        out.update({"lower_bound_basis": bd.basis,
                    "lower_bound_parts": {"replicas_above_band": bd.above, "replicas_below_band": bd.below,
                                          "rack_transport": bd.transport,
                                          "leader_cap_deficiency": bd.leader_caps,
                                          "joint_side": bd.joint_side, "leader_cap_extra_moves": bd.joint_extra,
                                          "leader_room_transport": bd.leader_room,
                                          "goal_lp_relaxation": bd.goal_lp}})
    out["already_balanced"] = replica_moves == 0 and info.lower_bound_moves == 0
    return out
