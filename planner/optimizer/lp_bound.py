"""A lower bound on a count rebalance's moves for its whole goal at once: the LP relaxation of placement and
leadership together, over classes of interchangeable partitions.

The other bounds (bounds.py) each see part of the goal: the count and rack flows the band, the joint flow the
leader caps on today's placement, the leader-room flow (partition_flow, `room`) each broker's room to lead its
share in total. Where the leader caps leave every broker a floor of a topic to lead (partition_flow's
`_lead_floors`), and the one-broker rack must take a replica of nearly every partition, these interact: issue
25's cluster 8:6 (10 brokers on racks of 2, 1 and 7, 8,240 partitions) plans 457 moves where the largest of
them is 452, and the LP below (as bench/rebalance_lp_bound.py, written apart, one variable pair per partition)
proves 456.

Variables per class c (partitions of one topic with the same replica set today: n_c of them, k replicas each)
and eligible broker b: X (how many of c's partitions hold a replica on b) and Y (how many are led from b).
Constraints, each one that every plan meeting the goal satisfies (with X, Y its counts):
- 0 <= Y <= X <= n_c (a broker holds at most one replica of a partition, and leads only partitions it holds);
- sum_b X = k n_c (the replication factor stays), sum_b Y = n_c (one preferred leader per partition);
- the rack rule (checks.required_racks: min(RF, racks, racks spanned today)): where that is k, at most one
  replica per rack, so sum over a rack's brokers of X <= n_c; where it is every rack, at least one on each, so
  that sum >= n_c (other partitions: no constraint, a relaxation);
- per topic and broker, sum of Y <= the topic's cap ceil(partitions / brokers) (witness.leader_cap0);
- per broker, sum of Y within floor / ceil of partitions / brokers (leader spread <= 1: with the total fixed,
  every broker leads one of those two), and sum of X within the target band [low, high];
minimising sum over brokers b outside c's replica set of X (each is a replica placed anew: one move).
Every plan meeting the goal gives a feasible integral point whose objective is its move count, so the LP's
optimum, rounded up, is a lower bound on its moves. Summing a disaggregated solution (one x, y per partition,
the form of bench/rebalance_lp_bound.py) over a class gives a solution here with the same objective, and
spreading a class's X, Y evenly over its partitions gives one there: the two LPs have the same optimum, this
one with a few hundred classes where that one has thousands of partitions (8:6: 674 classes, well under a
second of GLOP, where the per-partition LP took 3 minutes).

Only where every partition's replicas are on eligible brokers and none is fixed (excluded or in flight): the
model has no place for replicas that stay elsewhere. The optimum is taken with a margin of 1e-4 before
rounding up, so a floating-point excess over an integral optimum never adds a move.
"""

from __future__ import annotations

import logging
import math

import numpy as np
from ortools.linear_solver import pywraplp

from planner.optimizer.checks import popcount, required_racks
from planner.optimizer.problem import Problem

log = logging.getLogger(__name__)

PAIR_LIMIT = 20_000     # classes x eligible brokers (variable pairs): 8:6's 674 x 10 solve in ~1 s on 2 loaded
# cores, 16-19k pairs of the property test's 20-broker clusters in 1.6-2.9 s; most of it GLOP's own solve
MARGIN = 1e-4
GOAL_LP_BASIS = "LP relaxation of the whole goal"


def applies(pb: Problem, eligible: np.ndarray) -> bool:
    """Whether the model covers this rebalance: no fixed partition, every replica on an eligible broker."""
    f = pb.replicas
    valid = f >= 0
    return bool(eligible.any() and not pb.fixed.any() and eligible[np.maximum(f, 0)][valid].all())


def goal_lp_bound(pb: Problem, eligible: np.ndarray, low: int, high: int, caps: np.ndarray) -> int | None:
    """The LP bound (module) for every eligible broker in [low, high], each topic's preferred leaders within
    `caps` per broker and leader spread <= 1; None where the model does not apply, the classes are too many
    (`PAIR_LIMIT`), or the solver does not report an optimum (infeasible: no plan meets that goal)."""
    if not applies(pb, eligible):
        return None
    e_idx = np.flatnonzero(eligible)
    E = len(e_idx)
    f = pb.replicas
    srt = np.sort(np.where(f >= 0, f, np.iinfo(f.dtype).max), axis=1)
    key = np.concatenate([pb.topic_of[:, None].astype(np.int64), srt.astype(np.int64)], axis=1)
    _, first, n_c = np.unique(key, axis=0, return_index=True, return_counts=True)
    if len(first) * E > PAIR_LIMIT:
        return None
    first, n_c = first[(f[first] >= 0).any(axis=1)], n_c[(f[first] >= 0).any(axis=1)]
    need = required_racks(pb, eligible)[first]
    k_c = pb.rf[first].astype(np.int64)
    t_c = pb.topic_of[first].astype(np.int64)
    rack_aware = pb.rack_aware and len(pb.rack_names) > 0
    racks = sorted({int(q) for q in pb.rack_of[e_idx] if q >= 0}) if rack_aware else []
    if rack_aware:
        bits = pb.rack_bits()
        n_racks = int(popcount(np.bitwise_or.reduce(bits[eligible])))
    else:
        n_racks = 0
    s = pywraplp.Solver.CreateSolver("GLOP")
    if s is None:
        return None
    inf = s.infinity()
    obj = s.Objective()
    count = [s.Constraint(low, high) for _ in range(E)]
    n_p = int((f >= 0).any(axis=1).sum())
    lead = [s.Constraint(n_p // E, -(-n_p // E)) for _ in range(E)]
    per_tb: dict[tuple[int, int], pywraplp.Constraint] = {}
    for c in range(len(first)):
        n, k, t = int(n_c[c]), int(k_c[c]), int(t_c[c])
        held = {int(b) for b in f[first[c]] if b >= 0}
        sx = s.Constraint(k * n, k * n)
        sy = s.Constraint(n, n)
        rack_rows: dict[int, pywraplp.Constraint] = {}
        if racks and need[c] >= k:
            rack_rows = {q: s.Constraint(-inf, n) for q in racks}
        elif racks and need[c] >= n_racks:
            rack_rows = {q: s.Constraint(n, inf) for q in racks}
        for j, b in enumerate(e_idx):
            x = s.NumVar(0, n, "")
            y = s.NumVar(0, n, "")
            le = s.Constraint(-inf, 0)
            le.SetCoefficient(y, 1)
            le.SetCoefficient(x, -1)
            sx.SetCoefficient(x, 1)
            sy.SetCoefficient(y, 1)
            count[j].SetCoefficient(x, 1)
            lead[j].SetCoefficient(y, 1)
            tb = per_tb.get((t, j))
            if tb is None:
                tb = per_tb[(t, j)] = s.Constraint(-inf, float(caps[t]))
            tb.SetCoefficient(y, 1)
            q = int(pb.rack_of[b])
            if q in rack_rows:
                rack_rows[q].SetCoefficient(x, 1)
            if int(b) not in held:
                obj.SetCoefficient(x, 1)
    obj.SetMinimization()
    status = s.Solve()
    if status != pywraplp.Solver.OPTIMAL:
        log.info("goal LP bound: solver status %s", status)
        return None
    return int(math.ceil(obj.Value() - MARGIN))
