"""How level a rebalance can make the replica counts, and why not more: the rack constraint as a small flow.

A rebalance may re-place every replica on an eligible broker (the replicas of excluded, in-flight and
otherwise fixed partitions, and those on brokers that are not eligible, stay). What limits the levels is not
where the replicas are now but what each partition must keep: distinct brokers, and at least `required_racks`
racks (checks.py). Per partition, with k movable replicas and the racks S its staying replicas cover:

- all replicas on distinct racks (required racks = RF, RF <= racks): the k go to k distinct racks outside S,
  one each, never to a broker without a rack;
- every eligible rack covered (required racks = racks < RF): each rack outside S gets at least one of the k,
  no rack more than k - |outside S| + 1;
- otherwise (racks ignored, already covered by S, or a partition that was below the rule and may stay so):
  only distinctness, at most min(k, brokers of the rack) per rack.

Partitions with the same rule and the same S form one class: one flow node supplying n*k units, with arcs to
each rack carrying n times the per-partition bounds (a flow of uniform rows with per-rack bounds decomposes into
per-partition rows, so the classes lose nothing), racks to their brokers, brokers to the sink within a band
[m, m+s] of counts. The band is feasible iff the flow with those lower bounds is. Distinctness inside a rack
(several replicas of one partition on one rack) is relaxed, so the flow can only be more permissive than the
real rule: a band it refuses no placement reaches (the proof of "spread s is impossible").

The counts a flow can reach form the integer points of a base polyhedron, whose minimum-norm point minimises
the largest count and maximises the smallest at once (Fujishige); so the least reachable maximum U and the
largest reachable minimum L (two binary searches over one-sided bands) are reached together, and s = U - L is
the best spread. `reach` checks the band [L, U] itself and names the rack that holds too much (or too little)
when s > 1, from each rack's least and most possible total.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ortools.graph.python import max_flow, min_cost_flow

from planner.optimizer.checks import popcount, required_racks
from planner.optimizer.mcf import band, unique_inverse
from planner.optimizer.problem import Problem, rack_masks

INF = 1 << 40
WHY = ("partitions that must keep a replica on every rack or on distinct racks, the replicas that stay, and "
       "single-replica partitions (led where they are: at most their topic's leader cap, ceil(partitions / "
       "brokers), per broker) leave no more level placement")
SINGLE_ARCS = 300_000  # single-replica topics x brokers above which those topics share one class


@dataclass
class Reach:
    """What the rack constraint allows: the most level band of replica counts over the eligible brokers."""
    low: int                 # the largest minimum count reachable
    high: int                # the least maximum count reachable (low and high are reached together)
    spread: int              # high - low: the best reachable replica spread
    level_low: int           # floor / ceil of the mean: spread 1 (or 0) is [level_low, level_high]
    level_high: int
    reason: str | None       # why the spread cannot be level (None when it can), naming the rack
    rack_totals: list[dict]  # per rack: eligible brokers, least and most total it can hold
    transport: int | None = None   # the fewest new replicas that bring every broker into [low, high]
    exact: bool = True       # no partition under a relaxed rule: [low, high] is reachable, not only a bound
    joint_from: int | None = None  # the rack-only spread, where the band was widened for leader room


@dataclass
class _Net:
    """The class flow: arc arrays (tails, heads, lower, upper), broker arcs last, and its nodes."""
    tails: np.ndarray
    heads: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    n_nodes: int
    source: int
    sink: int
    supply: int
    broker_arc0: int          # index of the first broker -> sink arc (one per eligible broker, in e_idx order)
    fixed: np.ndarray         # (E,) replicas that stay on each eligible broker
    e_idx: np.ndarray
    rack_of_e: np.ndarray     # (E,) rack node position of each eligible broker (last = no rack)
    rack_names: list[str]
    costs: np.ndarray         # 1 on the arcs of a replica placed anew, 0 on those of one that stays
    relaxed: bool = False     # some class's rule is relaxed (kind 3)


def _network(pb: Problem, eligible: np.ndarray) -> _Net:
    B = pb.num_brokers
    e_idx = np.flatnonzero(eligible)
    E = len(e_idx)
    f = pb.replicas
    valid = f >= 0
    on_e = valid & eligible[np.maximum(f, 0)]
    fixed_rows = pb.fixed
    fixed_b = np.bincount(f[on_e & fixed_rows[:, None]], minlength=B)[e_idx].astype(np.int64)
    live = ~fixed_rows & on_e.any(axis=1)
    k = on_e.sum(axis=1)
    rack_aware = pb.rack_aware and len(pb.rack_names) > 0
    nr = len(pb.rack_names) if rack_aware else 0
    # rack nodes: one per rack with eligible brokers, plus one for brokers without a rack (or racks ignored)
    rack_of_e = np.where(pb.rack_of[e_idx] >= 0, pb.rack_of[e_idx], nr) if rack_aware else np.zeros(E, np.int64)
    n_q = (nr + 1) if rack_aware else 1
    per_q = np.bincount(rack_of_e, minlength=n_q).astype(np.int64)
    q_has = per_q > 0
    if rack_aware:
        bits = pb.rack_bits()
        stay = rack_masks(np.where(valid & ~on_e, f, -1), bits)
        req = required_racks(pb, eligible)
        covered = popcount(stay)
        rf = pb.rf
        e_racks = int(q_has[:nr].sum())
        distinct = (req >= rf) & (req > covered)
        allcover = ~distinct & (req > covered) & (req >= e_racks)
        some = ~distinct & ~allcover & (req > covered)
    else:
        stay = np.zeros(len(f), np.uint64)
        distinct = np.zeros(len(f), bool)
        allcover = np.zeros(len(f), bool)
        some = np.zeros(len(f), bool)
        req = np.zeros(len(f), np.int64)
        covered = np.zeros(len(f), np.int64)
    # kind 3 (a partition that was below the rule and may not lose a rack): `need` more racks among its k
    # replicas; the flow only keeps each rack to at most k - need + 1 of them (a relaxation: the rule is not a
    # flow), so its band is a bound, not a placement
    kind = np.where(distinct, 1, np.where(allcover, 2, np.where(some, 3, 0)))
    need = np.where(some, req - covered, 0).astype(np.int64)
    # a partition with one replica is led from where it is: at most its topic's leader cap per broker
    T = len(pb.topic_names)
    cap_t = -(-np.bincount(pb.topic_of, minlength=T) // max(1, E))
    single = live & (pb.rf == 1) & ~pb.excluded_topic[pb.topic_of]
    live = live & ~single
    rows = np.flatnonzero(live)
    pos = np.full(B, -1, np.int64)
    pos[e_idx] = np.arange(E)
    _, stay_code = unique_inverse(stay[rows]) if len(rows) else (None, np.zeros(0, np.int64))
    key = (stay_code * 64 + need[rows]) * 64 + kind[rows].astype(np.int64) * 16 + k[rows].astype(np.int64)
    ukey, cls = unique_inverse(key) if len(rows) else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    C = len(ukey)
    first = np.zeros(C, np.int64)
    first[cls[::-1]] = np.arange(len(rows))[::-1]
    c_kind = kind[rows][first]
    c_k = k[rows][first].astype(np.int64)
    c_stay = stay[rows][first]
    c_need = need[rows][first]
    cnt = np.bincount(cls, minlength=C).astype(np.int64)
    # replicas of each class on each eligible broker today (the ones that may stay)
    fr = f[rows]
    on_r = on_e[rows]
    ci = np.repeat(cls, on_r.sum(axis=1))
    cb = pos[fr[on_r]]
    here = np.bincount(ci * E + cb, minlength=C * E).reshape(C, E) if C else np.zeros((0, E), np.int64)
    s_rows = np.flatnonzero(single)
    s_top = pb.topic_of[s_rows].astype(np.int64)
    s_b = pos[f[s_rows, 0]]
    s_topics, s_inv = unique_inverse(s_top) if len(s_rows) else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    if len(s_topics) * E > SINGLE_ARCS:   # many such topics: one class, per broker the sum of their caps
        s_caps = np.array([int(np.minimum(cap_t[s_topics], np.bincount(s_inv)).sum())])
        s_inv = np.zeros(len(s_rows), np.int64)
    else:
        s_caps = cap_t[s_topics]
    S1 = len(s_caps) if len(s_rows) else 0
    s_cnt = np.bincount(s_inv, minlength=S1).astype(np.int64)
    s_here = np.bincount(s_inv * E + s_b, minlength=S1 * E).reshape(S1, E)
    s_racked = rack_aware and bool((pb.rack_of[f[s_rows, 0]] >= 0).all()) if len(s_rows) else False
    ok_b = (rack_of_e < nr) if s_racked else np.ones(E, bool)   # (a racked one stays on a rack)
    # nodes: source, classes, (class, rack), single-replica topics, (topic, broker), racks, brokers, sink
    src = 0
    cn = 1 + np.arange(C)
    cq = 1 + C + np.arange(C * n_q)
    xn = 1 + C + C * n_q + np.arange(S1)
    xb = 1 + C + C * n_q + S1 + np.arange(S1 * E)
    qn = 1 + C + C * n_q + S1 + S1 * E + np.arange(n_q)
    bn = qn[-1] + 1 + np.arange(E)
    snk = int(bn[-1]) + 1 if E else int(qn[-1]) + 1
    tails, heads, lower, upper, costs = [], [], [], [], []

    def add(t, h, lo, hi, cost=0):
        t, h, lo, hi, cost = (np.atleast_1d(np.asarray(x, dtype=np.int64)) for x in (t, h, lo, hi, cost))
        if min(len(t), len(h), len(lo), len(hi), len(cost)) == 0:
            return
        n = max(len(t), len(h), len(lo), len(hi), len(cost))
        tails.append(np.broadcast_to(t, (n,)))
        heads.append(np.broadcast_to(h, (n,)))
        lower.append(np.broadcast_to(lo, (n,)))
        upper.append(np.broadcast_to(hi, (n,)))
        costs.append(np.broadcast_to(cost, (n,)))

    add(src, cn, cnt * c_k, cnt * c_k)
    q_all = np.flatnonzero(q_has)
    for c in range(C):
        kd, kc, sm = int(c_kind[c]), int(c_k[c]), int(c_stay[c])
        n = int(cnt[c])
        q = q_all
        in_s = np.array([(sm >> int(x)) & 1 if x < nr else 0 for x in q.tolist()], dtype=bool)
        if kd == 1:       # distinct racks outside S, one each, never a rack-less broker
            lo = np.zeros(len(q), np.int64)
            hi = np.where(~in_s & (q < nr), n, 0)
        elif kd == 2:     # every rack outside S at least once
            outside = ~in_s & (q < nr)
            spare = kc - int(outside.sum())
            lo = np.where(outside, n, 0)
            hi = n * np.maximum(np.minimum(np.where(outside, spare + 1, spare), per_q[q]), 0)
        elif kd == 3:     # `need` more racks: no rack more than k - need (+1 outside S) of them
            outside = ~in_s & (q < nr)
            lo = np.zeros(len(q), np.int64)
            hi = n * np.minimum(np.maximum(kc - int(c_need[c]) + outside, 0), per_q[q])
        else:
            lo = np.zeros(len(q), np.int64)
            hi = n * np.minimum(kc, per_q[q])
        add(cn[c], cq[c * n_q + q], lo, hi)
        add(cq[c * n_q + q], qn[q], 0, INF, 1)               # a replica placed anew on the rack
        b_here = np.flatnonzero(here[c] > 0)
        add(cq[c * n_q + rack_of_e[b_here]], bn[b_here], 0, here[c, b_here], 0)   # one that stays
    if S1:
        add(src, xn, s_cnt, s_cnt)
        xs = np.repeat(np.arange(S1), int(ok_b.sum()))
        bs = np.tile(np.flatnonzero(ok_b), S1)
        add(xn[xs], xb[xs * E + bs], 0, s_here[xs, bs], 0)   # stays
        add(xn[xs], xb[xs * E + bs], 0, INF, 1)              # moves there
        add(xb[xs * E + bs], bn[bs], 0, s_caps[xs])
    add(qn[rack_of_e], bn, 0, INF)
    broker_arc0 = sum(len(x) for x in tails)
    add(bn, snk, 0, INF)
    return _Net(np.concatenate(tails), np.concatenate(heads), np.concatenate(lower), np.concatenate(upper),
                int(snk + 1), src, int(snk), int((cnt * c_k).sum() + s_cnt.sum()), broker_arc0,
                fixed_b, e_idx, rack_of_e, list(pb.rack_names) + ["(no rack)"], np.concatenate(costs),
                bool((c_kind == 3).any()))


def _feasible(net: _Net, lo_b: np.ndarray, hi_b: np.ndarray) -> bool:
    """Does a flow exist that gives each eligible broker a total (staying replicas included) in [lo_b, hi_b]?
    Lower bounds by the usual reduction: a circulation with a sink->source arc, checked by one max flow from a
    super source that must saturate every lower bound."""
    lo = net.lower.copy()
    hi = net.upper.copy()
    E = len(net.e_idx)
    j = net.broker_arc0 + np.arange(E)
    lo[j] = np.maximum(0, lo_b - net.fixed)
    hi[j] = hi_b - net.fixed
    if (hi < lo).any():
        return False
    n = net.n_nodes
    s2, t2 = n, n + 1
    excess = np.zeros(n, np.int64)
    np.add.at(excess, net.heads, lo)
    np.subtract.at(excess, net.tails, lo)
    mf = max_flow.SimpleMaxFlow()
    mf.add_arcs_with_capacity(net.tails.astype(np.int32), net.heads.astype(np.int32), hi - lo)
    mf.add_arc_with_capacity(net.sink, net.source, INF)
    pos = np.flatnonzero(excess > 0)
    neg = np.flatnonzero(excess < 0)
    if len(pos):
        mf.add_arcs_with_capacity(np.full(len(pos), s2, np.int32), pos.astype(np.int32), excess[pos])
    if len(neg):
        mf.add_arcs_with_capacity(neg.astype(np.int32), np.full(len(neg), t2, np.int32), -excess[neg])
    need = int(excess[pos].sum())
    if need == 0:
        return True
    if mf.solve(s2, t2) != mf.OPTIMAL:
        return False
    return mf.optimal_flow() == need


def transport_bound(net: _Net, lo_b: np.ndarray, hi_b: np.ndarray) -> int | None:
    """The fewest replicas placed anew that bring every eligible broker into [lo_b, hi_b] under the class
    rules (None when no placement does): a min-cost flow over the classes where a replica that stays on its
    broker costs nothing and one placed anew costs one. Every real plan maps onto such a flow with the same
    number of new replicas (per class: how many stay on each broker, how many are placed on each rack), so
    this is a lower bound on its moves that knows which racks a replica may change to."""
    E = len(net.e_idx)
    lo = net.lower.copy()
    hi = net.upper.copy()
    j = net.broker_arc0 + np.arange(E)
    lo[j] = np.maximum(0, lo_b - net.fixed)
    hi[j] = hi_b - net.fixed
    if (hi < lo).any():
        return None
    m = _min_cost_flow(net, lo, np.minimum(hi, net.supply + 1), net.costs)
    if m is None:
        return None
    return int(m.optimal_cost() + (net.costs * lo).sum())


def _min_cost_flow(net: _Net, lo: np.ndarray, hi: np.ndarray,
                   cost: np.ndarray) -> min_cost_flow.SimpleMinCostFlow | None:
    """The network's supply sent from source to sink with per-arc bounds [lo, hi] at least cost; solved, or
    None when no flow fits. Lower bounds become supplies: each arc's lower part is sent first."""
    m = min_cost_flow.SimpleMinCostFlow()
    m.add_arcs_with_capacity_and_unit_cost(net.tails.astype(np.int32), net.heads.astype(np.int32), hi - lo, cost)
    sup = np.zeros(net.n_nodes, np.int64)
    np.subtract.at(sup, net.tails, lo)
    np.add.at(sup, net.heads, lo)
    sup[net.source] += net.supply
    sup[net.sink] -= net.supply
    m.set_nodes_supplies(np.arange(net.n_nodes, dtype=np.int32), sup)
    return m if m.solve() == m.OPTIMAL else None


def _rack_range(net: _Net, q: int) -> tuple[int, int]:
    """Least and most replicas the brokers of rack node q can hold (staying ones included), any counts
    elsewhere: a min-cost flow with a unit cost (or gain) on those brokers' arcs to the sink."""
    mine = net.broker_arc0 + np.flatnonzero(net.rack_of_e == q)
    out = []
    for sign in (1, -1):
        cost = np.zeros(len(net.tails), np.int64)
        cost[mine] = sign
        m = _min_cost_flow(net, net.lower, np.minimum(net.upper, net.supply + 1), cost)
        if m is None:
            return 0, 0
        flows = np.asarray(m.flows(mine.astype(np.int32)), dtype=np.int64) + net.lower[mine]
        out.append(int(flows.sum() + net.fixed[net.rack_of_e == q].sum()))
    return out[0], out[1]


def reach(pb: Problem, eligible: np.ndarray, total: int | None = None) -> Reach:
    """The most level band of replica counts any rebalance can reach over the eligible brokers (see module)."""
    net = _network(pb, eligible)
    E = len(net.e_idx)
    tot = net.supply + int(net.fixed.sum()) if total is None else total
    lo_l, hi_l = band(tot, E)
    if E == 0:
        return Reach(0, 0, 0, 0, 0, None, [])
    big = tot + 1
    ones = np.ones(E, np.int64)
    if not _feasible(net, 0 * ones, big * ones):  # the current placement breaks the rules it is held to
        return Reach(lo_l, hi_l, hi_l - lo_l, lo_l, hi_l, None, [])
    # largest L with every broker >= L reachable, least U with every broker <= U reachable
    a, b = 0, lo_l
    while a < b:
        mid = (a + b + 1) // 2
        if _feasible(net, mid * ones, big * ones):
            a = mid
        else:
            b = mid - 1
    low = a
    a, b = hi_l, tot
    while a < b:
        mid = (a + b) // 2
        if _feasible(net, 0 * ones, mid * ones):
            b = mid
        else:
            a = mid + 1
    high = a
    if not _feasible(net, low * ones, high * ones):  # never expected (see module); widen until it holds
        while not _feasible(net, low * ones, high * ones) and (low > 0 or high < tot):
            low, high = max(0, low - 1), min(tot, high + 1)
    racks = []
    reason = None
    if high - low > 1:
        for q in np.unique(net.rack_of_e).tolist():
            n_q = int((net.rack_of_e == q).sum())
            least, most = _rack_range(net, q)
            racks.append({"rack": net.rack_names[q], "brokers": n_q, "least": least, "most": most})
        over = [r for r in racks if r["least"] > r["brokers"] * hi_l]
        under = [r for r in racks if r["most"] < r["brokers"] * lo_l]
        if over:
            r = max(over, key=lambda x: x["least"] / x["brokers"])
            reason = (f"rack {r['rack']} has {r['brokers']} eligible broker(s) and must hold at least {r['least']:,} "
                      f"replicas ({r['least'] / r['brokers']:,.1f} per broker, level is {hi_l:,}): {WHY}")
        elif under:
            r = min(under, key=lambda x: x["most"] / x["brokers"])
            reason = (f"rack {r['rack']} has {r['brokers']} eligible broker(s) and can hold at most {r['most']:,} "
                      f"replicas ({r['most'] / r['brokers']:,.1f} per broker, level is {lo_l:,}): {WHY}")
        else:
            reason = ("the racks' constraints together (no single rack explains it): the brokers that stay "
                      "fixed or partitions' rack rules leave no more level placement")
    moves = transport_bound(net, low * ones, high * ones)
    return Reach(low, high, high - low, lo_l, hi_l, reason, racks, moves, not net.relaxed)
