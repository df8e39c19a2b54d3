"""Lower bounds on the replica moves of a rebalance, for the goal it actually pursues.

A count rebalance brings every eligible broker into the band [L, U] of the best reachable spread (reach.py:
[floor(mean), ceil(mean)] when the racks allow spread 1), and every topic's preferred leaders within its cap
(witness.py). Three bounds, each a bound for that whole goal:

- count: each move takes one replica off one broker and puts it on another, so the moves are at least the
  replicas above U (sum of count - U) and at least the replicas missing below L (sum of L - count): the larger
  of the two (with totals fixed, the two-sided count of the brokers above ceil(mean) and below floor(mean)).
- leader caps: a move adds one (partition, broker) pair, so it serves at most one of the partitions that a
  maximum assignment of leaders within the caps leaves unserved on today's placement (the deficiency).
- joint: with c the counts today and t the final ones, every broker b has out_b - in_b = c_b - t_b, so the
  moves (sum of out_b) are at least, per broker, max(out_b, in_b + c_b - U, 0): for a broker at or above U,
  each move into it needs one more move out of it; for a broker below U, each move out of it is one more move
  (bound on the out side). Summing: moves >= (replicas above U) + (moves into brokers at or above U) + (moves
  out of brokers below U) for the moves any plan must make to serve the leader caps. The least such cost is a
  min-cost flow per topic (topics do not share anything): each partition is led by a broker holding it (free)
  or by one it moves a replica to (1 when every broker holding it is below U, +1 when the receiver is at or
  above U), at most the cap per broker. The flow relaxes the racks and distinctness of the receiver (a
  relaxation only lowers the bound). Only topics with a deficiency can have a cost. By the same argument on
  the moves into each broker (moves = sum of in_b >= max(in_b, out_b + low - c_b)), the replicas missing
  below `low` plus the same flow with the threshold low + 1 is a bound too; with spread 1 the two flows are
  one.

The count bound is raised to reach.transport_bound where the racks' rules make it larger: the fewest new
replicas over a flow of the partitions' classes where a replica that stays costs nothing (a replica may only
change to racks its partition may use, so where few may, the levels need chains of moves).

And the leader-room bound: no leader order of spread <= 1 within the caps exists unless every broker holds
partitions enough to lead its share (its leader room, room.py), so the fewest new replicas of a placement in
the band under the rack rules that also leaves every broker that room (partition_flow.least_placement with
`room`, exact for those rules) is a bound for the whole goal too; it is computed where the plain flow's
placement leaves a broker short.

The bound reported is the largest of these; `basis` names which one it is. Where a count rebalance within
partition_flow.ARC_LIMIT ends above it, rebalance._goal_lp raises it to the LP relaxation of the whole goal
(lp_bound.py: the band, the racks, a leader per partition within the caps and level leaders together) where
that is larger: basis "LP relaxation of the whole goal", `goal_lp`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ortools.graph.python import min_cost_flow

from planner.optimizer.problem import Problem

CHUNK_ARCS = 5_000  # per min-cost flow: many small flows solve much faster than one large one


@dataclass
class Bound:
    moves: int            # the largest of the three
    basis: str            # "count" | "count under the rack rules" | "leader caps" | "count + leader caps"
    count: int            # max(replicas above U, replicas missing below L, `transport`)
    above: int            # replicas above U
    below: int            # replicas missing below L
    leader_caps: int      # the deficiency
    joint: int            # above (or below) + the least extra moves the leader caps force (the flows)
    band: tuple[int, int]
    joint_side: str = "above"   # which count the joint bound adds its extra moves to
    joint_extra: int = 0        # those extra moves
    transport: int = 0          # reach.transport_bound: the fewest new replicas the racks' rules allow
    leader_room: int = 0        # the same with every broker left room to lead its share (partition_flow, room)
    goal_lp: int = 0            # lp_bound.goal_lp_bound where the plan computed it (0: not computed)


def count_bound(counts: np.ndarray, low: int, high: int) -> tuple[int, int]:
    """(replicas above `high`, replicas missing below `low`) over the eligible brokers' counts."""
    c = np.asarray(counts, dtype=np.int64)
    return int(np.maximum(0, c - high).sum()), int(np.maximum(0, low - c).sum())


def joint_extra(pb: Problem, eligible: np.ndarray, caps: np.ndarray, topics: np.ndarray, high: int) -> int:
    """The least extra moves (see module) that serving the leader caps of `topics` forces, on today's
    placement, with `high` the threshold: a move out of a broker below it, or into one at or above it, costs
    one. Per topic a min-cost flow, a few topics per flow (they share nothing)."""
    if not len(topics):
        return 0
    B = pb.num_brokers
    f = pb.replicas
    counts = np.bincount(f[f >= 0], minlength=B)
    at_high = eligible & (counts >= high)
    low_src = eligible & (counts < high)
    e_idx = np.flatnonzero(eligible)
    starts = np.searchsorted(pb.topic_of, topics)
    ends = np.searchsorted(pb.topic_of, topics, side="right")
    sizes = (ends - starts) * (f.shape[1] + 2) + len(e_idx)
    total = 0
    k = 0
    while k < len(topics):
        j = k + 1
        while j < len(topics) and sizes[k:j + 1].sum() <= CHUNK_ARCS:
            j += 1
        total += _chunk(pb, eligible, caps, topics[k:j], starts[k:j], ends[k:j], at_high, low_src, e_idx)
        k = j
    return total


def _chunk(pb: Problem, eligible: np.ndarray, caps: np.ndarray, topics: np.ndarray, starts: np.ndarray,
           ends: np.ndarray, at_high: np.ndarray, low_src: np.ndarray, e_idx: np.ndarray) -> int:
    B = pb.num_brokers
    E = len(e_idx)
    lens = ends - starts
    rows = np.repeat(starts - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens) + np.arange(int(lens.sum()))
    tpos = np.repeat(np.arange(len(topics)), lens)
    f = pb.replicas[rows]
    on = (f >= 0) & eligible[np.maximum(f, 0)]
    has = on.any(axis=1)
    rows, tpos, f, on = rows[has], tpos[has], f[has], on[has]
    n = len(rows)
    if not n:
        return 0
    # nodes: partitions, a mover per topic, (topic, broker) per topic and eligible broker, the sink
    pos = np.full(B, -1, np.int64)
    pos[e_idx] = np.arange(E)
    mover = n + np.arange(len(topics))
    tb0 = n + len(topics)
    sink = tb0 + len(topics) * E
    ii, jj = np.nonzero(on)
    keep_h = tb0 + tpos[ii] * E + pos[f[ii, jj]]
    # 1 when every eligible broker holding the partition is below U (its move leaves such a broker)
    all_low = ((~on) | low_src[np.maximum(f, 0)]).all(axis=1)
    mt = np.repeat(np.arange(len(topics)), E)
    mb = np.tile(np.arange(E), len(topics))
    cap = np.maximum(0, caps[topics][mt])
    tails = np.concatenate([ii, np.arange(n), mover[mt], tb0 + mt * E + mb]).astype(np.int32)
    heads = np.concatenate([keep_h, mover[tpos], tb0 + mt * E + mb, np.full(len(mt), sink)]).astype(np.int32)
    capac = np.concatenate([np.ones(len(ii), np.int64), np.ones(n, np.int64), np.full(len(mt), n, np.int64),
                            cap.astype(np.int64)])
    cost = np.concatenate([np.zeros(len(ii), np.int64), all_low.astype(np.int64),
                           at_high[e_idx][mb].astype(np.int64), np.zeros(len(mt), np.int64)])
    m = min_cost_flow.SimpleMinCostFlow()
    m.add_arcs_with_capacity_and_unit_cost(tails, heads, capac, cost)
    sup = np.zeros(sink + 1, np.int64)
    sup[:n] = 1
    sup[sink] = -n
    m.set_nodes_supplies(np.arange(sink + 1, dtype=np.int32), sup)
    if m.solve() != m.OPTIMAL:  # (every partition can be served with moves under caps of ceil(n / E))
        return 0
    return int(m.optimal_cost())


def lower_bound(pb: Problem, eligible: np.ndarray, low: int, high: int, caps: np.ndarray,
                deficient_topics: np.ndarray, deficiency: int, joint: bool = True,
                transport: int | None = None, leader_room: int = 0) -> Bound:
    """The three bounds (module) for counts brought into [low, high] and topics' leaders within `caps`.
    The joint bound is taken on both sides: (replicas above `high`) + the extra moves with threshold `high`,
    and, by the same argument on the moves into each broker (sum of in_b >= max(in_b, out_b + low - c_b)),
    (replicas missing below `low`) + the extra moves with threshold `low + 1` (the same flow when
    high = low + 1). `leader_room`: the fewest new replicas of a placement that also leaves every broker room to
    lead its share (partition_flow.least_placement with room), a bound for the whole goal where it exists."""
    f = pb.replicas
    counts = np.bincount(f[f >= 0], minlength=pb.num_brokers)[eligible]
    above, below = count_bound(counts, low, high)
    cb = max(above, below, transport or 0)
    jb, side, extra = 0, "above", 0
    if joint and len(deficient_topics):
        e_hi = joint_extra(pb, eligible, caps, deficient_topics, high)
        e_lo = e_hi if low + 1 == high else joint_extra(pb, eligible, caps, deficient_topics, low + 1)
        jb, side, extra = max((above + e_hi, "above", e_hi), (below + e_lo, "below", e_lo))
    moves = max(cb, jb, deficiency, leader_room)
    if moves == cb:
        basis = "count" if cb == max(above, below) else "count under the rack rules"
    elif moves == jb or moves == deficiency:
        basis = "count + leader caps" if moves == jb else "leader caps"
    else:
        basis = "count + leader room under the rack rules"
    return Bound(moves, basis, cb, above, below, deficiency, jb, (low, high), side, extra, transport or 0,
                 leader_room)
