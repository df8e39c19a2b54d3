"""Rebalance placement: level the registered brokers with the fewest replica moves.

Small clusters (partition x broker pairs <= exact.LIMIT) are solved exactly by CP-SAT (exact.py). Otherwise,
by network flows, in rounds:
  R1  broker level (`_r1`): movable replicas grouped into classes (same source broker, same racks they may
      move to; planned leaders apart) with per-destination capacities; a min-cost flow with convex level costs
      on the final counts (weighted above one unit per move) decides how many replicas each broker sheds and
      gains. A replica counts once (at its class node), so few choices are unrealisable. With a move budget the
      move cost is raised (Lagrangian search) until the flow fits in it. Its move count without a budget is
      the lower bound plan.json reports.
  R2  replica level (`_r2`): a transportation flow picks concrete replicas: shedding broker -> candidate
      replica -> destination broker with convex level costs (R1's receivers plus the emptiest others, so a
      tie R1 broke one way can be realised the other way). Arcs exist only where the partition does not live
      yet and keeps its racks; a planned leader's replica goes through a (topic, broker) node capped by the
      topic's leader cap; followers of one partition reach a broker through one (partition, broker) node.
      What R2 cannot place, the next round re-plans (after moving planned leaders off the stuck brokers).
Bytes mode (every size known): count rounds, then best-fit byte levelling to within 5 % of the mean
(byte_level.py), then count rounds with the smallest replicas and byte levelling again.

Before any of this, witness.py gives every partition a planned leader within its topic's cap
(ceil(partitions / brokers)), moving the fewest replicas where no assignment exists, so that the final leader
flow can always meet the cap.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from planner.optimizer.byte_level import level_bytes
from planner.optimizer.checks import popcount, required_racks
from planner.optimizer.exact import rebalance_exact
from planner.optimizer.mcf import BIG_CAP, FlowGraph, band, level_arcs, penalty, unique_inverse
from planner.optimizer.problem import Problem, rack_masks
from planner.optimizer.state import (
    State,
    apply_move,
    broker_counts,
    bytes_per_broker,
    is_new,
    member_rows,
    movable,
    rack_ok,
)
from planner.optimizer.witness import leader_caps, witness

NO_LIMIT = 1 << 62
REPLAN_LIMIT = 50_000  # partitions: up to here the leadership witness is re-planned every round


def _count_bound(counts: np.ndarray, total: int, mode: str) -> int:
    """Moves any plan needs to level `counts` (eligible brokers, before) to `total` replicas: each move takes
    one replica off one broker. Spread <= 1 (count mode) leaves ceil(mean) on the brokers that hold the most;
    at most ceil(mean) per broker (bytes mode)."""
    lo, hi = band(total, len(counts))
    ranked = np.sort(counts)[::-1]
    target = np.where(np.arange(len(ranked)) < total - lo * len(ranked), hi, lo) if mode == "count" else hi
    return int(np.maximum(0, ranked - target).sum())


@dataclass
class RebalanceInfo:
    mode: str
    lower_bound_moves: int          # max(count bound, leader-cap deficiency): no plan reaching both needs fewer
    excess_over_ceil_mean: int      # the formula: sum over brokers of max(0, count - ceil(mean))
    lower_bound_bytes: int | None   # sum over brokers of max(0, bytes - mean) when sizes are known
    repair_moves: int               # moves made so that every topic's leaders can spread
    rounds: int
    unreached: list[str] = field(default_factory=list)
    exact: bool = False             # solved by CP-SAT (small cluster), not by the flow decomposition
    leader_topics_stopped: list[str] = field(default_factory=list)  # topics the budget kept above their cap


def place_rebalance(pb: Problem, eligible: np.ndarray, balance: str = "auto", max_moves: int | None = None,
                    max_bytes: int | None = None, use_exact: bool = True) -> tuple[np.ndarray, RebalanceInfo]:
    B = pb.num_brokers
    mode = ("bytes" if pb.sizes_known else "count") if balance == "auto" else balance
    final = pb.replicas.copy()
    e_idx = np.flatnonzero(eligible)
    counts = broker_counts(final, B)
    counts0 = counts[e_idx].copy()
    lo, hi = band(int(counts[e_idx].sum()), len(e_idx))
    excess = int(np.maximum(0, counts[e_idx] - hi).sum())
    lb_bytes = None
    if pb.sizes_known and len(e_idx):
        by = bytes_per_broker(final, pb.sizes, B)[e_idx]
        lb_bytes = int(np.maximum(0.0, by - by.mean()).sum())
    st = State(final, np.full(len(final), -1, np.int32), {},
                np.zeros(len(pb.topic_names), np.int64))
    if mode == "count" and use_exact:
        done = rebalance_exact(pb, eligible, max_moves, max_bytes)
        if done is not None:
            moved = int(((done[0] >= 0) & ~member_rows(done[0], pb.replicas)).sum())
            return done[0], RebalanceInfo(mode, moved, excess, lb_bytes, 0, 0, [], exact=True)
    budget_m = max_moves if max_moves is not None else BIG_CAP
    budget_b = max_bytes if max_bytes is not None else NO_LIMIT
    unreached: list[str] = []
    repair, stopped, deficiency = leader_caps(pb, st, eligible, budget_m, budget_b, unreached)
    rounds = _count_rounds(pb, st, eligible, budget_m, budget_b, mode=mode)
    if mode == "bytes":
        # level bytes with few large moves, then level counts again with the smallest replicas (cheap in
        # bytes), then mend bytes if that pushed a broker out of the tolerance (the skewed 1M case needs about
        # a dozen alternations to reach spread 1; 3 left it at 306)
        rounds += level_bytes(pb, st, eligible, budget_m, budget_b)
        for _ in range(12):
            counts = broker_counts(st.final, B)[e_idx]
            if counts.max() - counts.min() <= 1:
                break
            rounds += _count_rounds(pb, st, eligible, budget_m, budget_b, mode=mode)
            rounds += level_bytes(pb, st, eligible, budget_m, budget_b)
    lb = max(_count_bound(counts0, int(broker_counts(st.final, B)[e_idx].sum()), mode), deficiency)
    return st.final, RebalanceInfo(mode, lb, excess, lb_bytes, repair, rounds, unreached,
                                   leader_topics_stopped=stopped)


@dataclass
class _Classes:
    """Movable replicas grouped into classes (see `_class_caps`)."""
    src: np.ndarray     # (C,) source broker's position among the eligible brokers
    count: np.ndarray   # (C,) replicas in the class
    cap: np.ndarray     # (C, E) how many of them may move to each eligible broker
    lead: np.ndarray    # (C,) the class holds planned leaders' replicas
    ri: np.ndarray      # (M,) member replicas: row,
    si: np.ndarray      # (M,) slot,
    cls: np.ndarray     # (M,) class
    bucket: np.ndarray  # (C,) size bucket (0 = smallest; all 0 unless classed by size)


SIZE_BUCKETS = 8  # bytes balance: replicas of a source are classed by size octile, smaller ones cheaper to move


def _class_caps(pb: Problem, st: State, eligible: np.ndarray, buckets: int = 1) -> _Classes:
    """Movable replicas grouped into classes of the same source broker and the same set of racks they may
    move to (planned leaders' replicas apart: their targets also need room in the topic), with per class the
    source position, the replicas in it, and (classes, E) how many of them may move to each eligible broker:
    rack coverage kept, the broker not holding the partition yet, room for a planned leader. With `buckets`
    > 1 a class also has one size bucket (size rank among the movable replicas), returned in `bucket`."""
    B = pb.num_brokers
    e_idx = np.flatnonzero(eligible)
    n_e = len(e_idx)
    pos = np.full(B, -1, np.int64)
    pos[e_idx] = np.arange(n_e)
    f = st.final
    ri, si = np.nonzero(movable(pb, st, eligible))
    a = pos[f[ri, si]]
    nr = len(pb.rack_names) if pb.rack_aware else 0
    q_of = np.where(pb.rack_of[e_idx] >= 0, pb.rack_of[e_idx], nr) if pb.rack_aware else np.zeros(n_e, np.int64)
    n_q = nr + 1
    allowed = np.ones((len(ri), n_q), dtype=bool)
    if pb.rack_aware:
        bits = pb.rack_bits()
        req = required_racks(pb, eligible)[ri]
        others = f[ri].copy()
        others[np.arange(len(ri)), si] = -1
        om = rack_masks(others, bits)
        for q in range(nr):
            allowed[:, q] = popcount(om | (np.uint64(1) << np.uint64(q))) >= req
        allowed[:, nr] = popcount(om) >= req
    lead = st.lead[ri] == f[ri, si]
    bucket = np.zeros(len(ri), np.int64)
    if buckets > 1 and len(ri):
        rank = np.empty(len(ri), np.int64)
        rank[np.lexsort((si, ri, np.maximum(pb.sizes[ri], 0)))] = np.arange(len(ri))
        bucket = rank * buckets // len(ri)
    a = a * buckets + bucket
    if n_q + 1 + int(n_e * buckets).bit_length() <= 62:  # one int64 key per replica (fast), else rows of a matrix
        code = (allowed.astype(np.int64) << np.arange(n_q, dtype=np.int64)).sum(axis=1)
        key1 = (a << (n_q + 1)) | (lead.astype(np.int64) << n_q) | code
        uk1, cls = unique_inverse(key1)
        bits_q = (uk1[:, None] >> np.arange(n_q, dtype=np.int64)) & 1
        uk = np.concatenate([(uk1 >> (n_q + 1))[:, None], ((uk1 >> n_q) & 1)[:, None], bits_q], axis=1)
    else:
        key = np.concatenate([a[:, None], lead[:, None].astype(np.int64), allowed.astype(np.int64)], axis=1)
        uk, cls = np.unique(key, axis=0, return_inverse=True)
    cls = np.asarray(cls).ravel()
    n_c = len(uk)
    count = np.bincount(cls, minlength=n_c).astype(np.int64)
    cap = np.where(uk[:, 2:][:, q_of].astype(bool), count[:, None], 0).astype(np.int64)
    # planned leaders: only brokers where the topic has room
    li = np.flatnonzero(lead)
    if len(li):
        T = len(pb.topic_names)
        full = np.zeros((T, n_e), dtype=bool)
        if st.lcount:
            keys = np.fromiter(st.lcount.keys(), dtype=np.int64)
            vals = np.fromiter(st.lcount.values(), dtype=np.int64)
            kb = keys % B
            on = (vals >= st.cap[keys // B]) & eligible[kb]
            full[keys[on] // B, pos[kb[on]]] = True
        # per lead class, how many of its members' topics are full on each broker (chunked: members x E)
        lc = cls[li]
        full_u8 = full.view(np.uint8)
        o = np.argsort(lc, kind="stable")
        li_s, lc_s = li[o], lc[o]
        sub = np.zeros((n_c, n_e), np.int64)
        step = max(1, 20_000_000 // max(1, n_e))
        for a0 in range(0, len(li_s), step):
            part, pc = li_s[a0:a0 + step], lc_s[a0:a0 + step]
            starts = np.flatnonzero(np.concatenate([[True], pc[1:] != pc[:-1]]))
            sums = np.add.reduceat(full_u8[pb.topic_of[ri[part]]], starts, axis=0, dtype=np.int32)
            np.add.at(sub, pc[starts], sums)
        cap -= sub * uk[:, 2:][:, q_of].astype(bool)
    # minus replicas whose partition already lives on b (and that would otherwise be counted there)
    rows_b = np.where(f[ri] >= 0, pos[np.maximum(f[ri], 0)], -1)
    for j in range(f.shape[1]):
        bp = rows_b[:, j]
        ok = (j != si) & (bp >= 0)
        ok &= allowed[np.arange(len(ri)), q_of[np.maximum(bp, 0)]]
        if len(li):
            t_all = pb.topic_of[ri]
            blocked = np.zeros(len(ri), bool)
            blocked[li] = full[t_all[li], np.maximum(bp[li], 0)]
            ok &= ~blocked
        cap -= np.bincount(cls[ok] * n_e + bp[ok], minlength=n_c * n_e).reshape(n_c, n_e)
    src = uk[:, 0] // buckets
    cap[np.arange(n_c), src] = 0
    return _Classes(src, count, np.maximum(cap, 0), uk[:, 1].astype(bool), ri, si, cls, uk[:, 0] % buckets)


def _r1(pb: Problem, st: State, eligible: np.ndarray, budget: int | None, span: int = 16, buckets: int = 1
        ) -> tuple[np.ndarray, np.ndarray, int, tuple]:
    """Broker level: (gross shed per broker, gross gain per broker, moves) of the most level counts reachable
    by moving replicas of the classes of `_class_caps` (a replica is counted once, at its class). Level costs
    are weighted above move costs; with a budget, the move cost is raised (a Lagrangian search) until the plan
    fits in it."""
    B = pb.num_brokers
    e_idx = np.flatnonzero(eligible)
    counts = broker_counts(st.final, B)[e_idx]
    cl = _class_caps(pb, st, eligible, buckets)
    c_src, c_count, cap = cl.src, cl.count, cl.cap
    ci, cb = np.nonzero(cap)
    extra = cl.bucket[ci]  # with size classes: a larger replica costs more to move (bytes balance)
    lo, hi = band(int(counts.sum()), len(e_idx))
    movable = np.bincount(c_src, weights=c_count, minlength=len(e_idx)).astype(np.int64)
    floor = np.maximum(counts - movable, 0)

    def solve(move_cost: int, weight: int) -> tuple[np.ndarray, int]:
        nonlocal span
        while True:
            g = FlowGraph()
            bn = g.nodes(len(e_idx))
            cn = g.nodes(len(c_src))
            hub = g.node()
            g.arcs(bn[c_src], cn, c_count, 0)
            arcs = g.arcs(cn[ci], bn[cb], cap[ci, cb], move_cost * buckets + extra)
            _, _, tails, _ = level_arcs(g, bn, hub, counts, floor, lo, hi, weight, span)
            flows, _ = g.solve_min_cost("rebalance broker levels")
            if not flows[tails].any():
                return flows[arcs], int(flows[arcs].sum())
            span *= 4

    pf, moves = solve(1, (2 * buckets) * int(c_count.sum()) + 1)
    if budget is not None and moves > budget:
        lo_c, hi_c = 1, 4 * (int(counts.max()) - int(counts.min()) + span) + 4
        best = None
        while lo_c <= hi_c:
            mid = (lo_c + hi_c) // 2
            f2, m2 = solve(mid, 1)  # (size classes only refine ties here)
            if m2 <= budget:
                best, hi_c = (f2, m2), mid - 1
            else:
                lo_c = mid + 1
        pf, moves = best if best is not None else (np.zeros(len(ci), np.int64), 0)
    shed = np.zeros(B, np.int64)
    gain = np.zeros(B, np.int64)
    np.add.at(shed, e_idx[c_src[ci]], pf)
    np.add.at(gain, e_idx[cb], pf)
    return shed, gain, moves, (cl, ci, cb, pf)


def _count_rounds(pb: Problem, st: State, eligible: np.ndarray, budget_m: int, budget_b: int,
                  max_rounds: int = 6, mode: str = "count") -> int:
    """Rounds of R1 (broker level) and its realisation (`_realize`, then `_r2` for what is left) until the
    counts are as level as R1 finds, the budget is spent or `max_rounds` pass. Count balance: receivers take
    replicas of topics they hold few of first (leaders can level later). Bytes balance: replicas are classed
    by size so that R1 moves the smallest it can."""
    buckets = SIZE_BUCKETS if mode == "bytes" and pb.sizes_known else 1
    spread_topics = mode == "count"
    rounds = 0
    factor = 4
    stuck = np.zeros(pb.num_brokers, np.int64)
    shed = np.zeros(pb.num_brokers, np.int64)
    for _ in range(max_rounds):
        left = budget_m - st.moves
        if left <= 0:
            break
        budget = None if left >= BIG_CAP // 2 else left
        shed, gain, total, plan = _r1(pb, st, eligible, budget, buckets=buckets)
        if total == 0:
            break
        if stuck.any() or pb.num_partitions <= REPLAN_LIMIT:
            # R1 counts a planned leader's replica as movable only where its topic has room: plan leaders
            # away from the brokers R1 wants to shed (and further from those a previous round could not
            # empty), and ask R1 again: fewer moves may now reach the same levels. (On large clusters only
            # after a round fell short: the witness flow costs seconds there and rarely matters.)
            witness(pb, st, eligible, avoid=2 * (shed > 0) + 4 * (stuck > 0))
            shed, gain, total, plan = _r1(pb, st, eligible, budget, buckets=buckets)
            if total == 0:
                break
        rounds += 1
        placed, shed_left, gain_left = _realize(pb, st, eligible, plan, budget_b, spread_topics)
        unplaced = shed_left
        if placed < total and shed_left.any() and gain_left.any():
            # what R1's classes could not realise one replica at a time: the transportation flow picks them
            more, unplaced = _r2(pb, st, eligible, shed_left, gain_left, factor, budget_b)
            placed += more
        if placed == total:
            break
        stuck += unplaced
        factor *= 4
    return rounds


def _realize(pb: Problem, st: State, eligible: np.ndarray, plan: tuple, budget_b: int,
             spread_topics: bool = True) -> tuple[int, np.ndarray, np.ndarray]:
    """Carry out R1's flow class by class: for each (class, receiver) arc with flow f, the first f members of
    the class (in preference order: replicas this plan already moves, then followers before the partition's
    preferred leader, then smallest / spread by a hash) that may still go there: the receiver does not hold
    the partition, its racks stay covered (re-checked against moves made in this round), a planned leader's
    topic has room on the receiver, the byte budget allows it; with `spread_topics` (count balance) replicas of
    topics the receiver holds fewer of than the topic's leader cap go first. Returns (moves made, per broker the shed and
    gain units not realised), which the transportation flow `_r2` then tries."""
    cl, ci, cb, pf = plan
    B = pb.num_brokers
    e_idx = np.flatnonzero(eligible)
    shed_left = np.zeros(B, np.int64)
    gain_left = np.zeros(B, np.int64)
    np.add.at(shed_left, e_idx[cl.src[ci]], pf)
    np.add.at(gain_left, e_idx[cb], pf)
    use = pf > 0
    ci, cb, pf = ci[use], cb[use], pf[use]
    if not len(ci):
        return 0, shed_left, gain_left
    ri, si, cls = cl.ri, cl.si, cl.cls
    a = st.final[ri, si].astype(np.int64)
    again = is_new(pb, ri, si, a)
    if pb.sizes_known:
        pref = np.maximum(pb.sizes[ri], 0).astype(np.float64)
    else:
        pref = ((ri.astype(np.uint64) * np.uint64(2654435761)) % np.uint64(1 << 32)).astype(np.float64)
    pref = np.where(again, -1.0, pref)
    order = np.lexsort((si, ri, pref, pb.replicas[ri, 0] == a, cls))
    ri, si, cls = ri[order], si[order], cls[order]
    start = np.searchsorted(cls, np.arange(len(cl.src) + 1))
    taken = np.zeros(len(ri), dtype=bool)
    req = required_racks(pb, eligible)
    sizes = np.maximum(pb.sizes, 0)
    # replicas per (topic, broker): a receiver takes replicas of topics it holds fewer than the topic's leader
    # cap of first, so that every broker ends with partitions it can lead (leaders level later)
    T = len(pb.topic_names)
    valid = st.final >= 0
    rtb = np.bincount((np.broadcast_to(pb.topic_of[:, None].astype(np.int64), st.final.shape)[valid] * B
                       + st.final[valid]), minlength=T * B).reshape(T, B)
    made = 0
    for c, j, f in zip(ci.tolist(), cb.tolist(), pf.tolist(), strict=True):
        b = int(e_idx[j])
        lo, hi = int(start[c]), int(start[c + 1])
        idx = lo + np.flatnonzero(~taken[lo:hi])
        r, sl = ri[idx], si[idx]
        rows = st.final[r]
        ok = (st.final[r, sl] >= 0) & ~(rows == b).any(axis=1)
        ok &= rack_ok(pb, rows, sl, np.full(len(r), b), req[r])
        cand = idx[ok]
        t_c = pb.topic_of[ri[cand]]
        if spread_topics:
            cand = cand[np.argsort(rtb[t_c, b] >= st.cap[t_c], kind="stable")]
        got = 0
        for k in cand.tolist():
            if got == f:
                break
            row, slot = int(ri[k]), int(si[k])
            src = int(st.final[row, slot])
            if (st.final[row] == b).any():
                continue  # another replica of this partition reached b earlier in this arc
            if not is_new(pb, row, slot, src) and st.bytes + int(sizes[row]) > budget_b:
                continue  # a replica this plan has not moved yet costs its bytes
            if st.lead[row] == src:
                t = int(pb.topic_of[row])
                if st.lcount.get(t * B + b, 0) >= st.cap[t]:
                    continue
            apply_move(pb, st, row, slot, b)
            t = int(pb.topic_of[row])
            rtb[t, src] -= 1
            rtb[t, b] += 1
            taken[k] = True
            shed_left[src] -= 1
            gain_left[b] -= 1
            got += 1
            made += 1
    return made, np.maximum(shed_left, 0), np.maximum(gain_left, 0)


def _r2(pb: Problem, st: State, eligible: np.ndarray, shed: np.ndarray, gain: np.ndarray, factor: int,
        budget_b: int) -> tuple[int, np.ndarray]:
    """Pick the replicas for R1's shed/gain figures; returns (how many were placed, per broker how many of
    its shed units were not).

    Candidates per surplus broker: replicas this plan already moves there (moving them on is free), then the
    cheapest others (smallest first when sizes are known), at most factor*shed + 32. Two moves chosen for one
    partition are re-checked together (distinct brokers, racks); a conflicting one waits for the next round."""
    B = pb.num_brokers
    mov = movable(pb, st, eligible)
    surplus = shed > 0
    ri, si = np.nonzero(mov & surplus[np.maximum(st.final, 0)])
    a = st.final[ri, si].astype(np.int64)
    size = np.maximum(pb.sizes[ri], 0)
    again = is_new(pb, ri, si, a)
    if pb.sizes_known:
        pref = size.astype(np.float64)
    else:
        pref = ((ri.astype(np.uint64) * np.uint64(2654435761)) % np.uint64(1 << 32)).astype(np.float64)
    pref = np.where(again, -1.0, pref)
    # followers before preferred leaders: moving replicas[0] changes the partition's preferred leader
    order = np.lexsort((si, ri, pref, pb.replicas[ri, 0] == a))
    ri, si, a, size, again = ri[order], si[order], a[order], size[order], again[order]
    order = np.lexsort((np.arange(len(ri)), a))  # stable by preference within each broker
    ri, si, a, size, again = ri[order], si[order], a[order], size[order], again[order]
    rank = np.arange(len(a)) - np.searchsorted(a, a)
    take = rank < factor * shed[a] + 32
    ri, si, a, size, again = ri[take], si[take], a[take], size[take], again[take]
    # a planned leader's replica is a candidate only when its partition has no follower candidate (moving a
    # follower never touches leadership; followers of one partition are kept apart below, so they never pick
    # the same broker)
    is_lead = st.lead[ri] == a
    keep = ~is_lead | ~np.isin(ri, ri[~is_lead])
    ri, si, a, size, again = ri[keep], si[keep], a[keep], size[keep], again[keep]
    # destinations: the brokers R1 wants to gain, plus the emptiest others that could take a replica without
    # going above the level R1 fills receivers to (R1 relaxes which replica moves; a tie it broke one way may
    # only be realisable the other way). Each destination's count carries convex level costs.
    counts = broker_counts(st.final, B)
    base = counts - shed
    want = gain > 0
    if not len(ri) or not want.any():
        return 0, shed.copy()
    top = int((base + gain)[want].max())
    extra = np.flatnonzero(eligible & ~want & (base + 1 <= top))
    extra = extra[np.lexsort((extra, base[extra]))][:16]
    d_idx = np.sort(np.concatenate([np.flatnonzero(want), extra]))
    # candidate x deficit broker arcs that keep replicas distinct and racks covered
    ci = np.repeat(np.arange(len(ri)), len(d_idx))
    tb = np.tile(d_idx, len(ri)).astype(np.int64)
    rows_f = st.final[ri]
    ok = ~(rows_f[ci] == tb[:, None]).any(axis=1)
    req = required_racks(pb, eligible)[ri]
    ci, tb = ci[ok], tb[ok]
    ok = rack_ok(pb, rows_f[ci], si[ci], tb, req[ci])
    ci, tb = ci[ok], tb[ok]
    # moving a planned leader's replica: the target must stay within the topic's leader cap
    t_of = pb.topic_of[ri].astype(np.int64)
    lead_arc = (st.lead[ri] == a)[ci]
    lk = t_of[ci] * B + tb
    g = FlowGraph()
    src, snk = g.node(), g.node()
    bn = g.nodes(B)    # source side: the broker a replica leaves
    dn = g.nodes(B)    # sink side: the broker it joins (separate, so a broker can shed and gain)
    cn = g.nodes(len(ri))
    total = int(shed.sum())
    g.set_supply(src, total)
    g.set_supply(snk, -total)
    s_idx = np.flatnonzero(surplus)
    g.arcs(src, bn[s_idx], shed[s_idx], 0)
    # move costs: 0 to move a replica this plan already moves, else 2 + 1 for a preferred leader's replica +
    # a size bucket (0-63, smallest first); level costs weigh more than any of them
    bucket = _size_bucket(size) if pb.sizes_known else np.zeros(len(ri), np.int64)
    move_cost = np.where(again, 0, 2 + bucket).astype(np.int64)
    move_cost += pb.replicas[ri, 0] == a
    w = 128
    e_tot = int(counts[eligible].sum())
    lo, hi = band(e_tot, int(eligible.sum()))
    span = 16 + int(gain.max())
    _, _, tails, _ = level_arcs(g, dn[d_idx], snk, base[d_idx], base[d_idx], lo, hi, w, span, lose=False)
    worst = w * int(penalty(np.array([int(base[d_idx].max()) + hi + span + 2]), lo, hi)[0]) + 200
    g.arcs(src, snk, total, worst)  # unplaceable units: dearer than any real move
    g.arcs(bn[a], cn, 1, move_cost)
    # followers of partitions with several candidates reach a broker through one (partition, broker) node
    n_cand = np.bincount(np.searchsorted(np.unique(ri), ri), minlength=len(np.unique(ri)))
    multi = (n_cand[np.searchsorted(np.unique(ri), ri)] > 1)[ci] & ~lead_arc
    plain = g.arcs(cn[ci[~lead_arc & ~multi]], dn[tb[~lead_arc & ~multi]], 1, 0)
    mk, minv = np.unique(ri[ci[multi]].astype(np.int64) * B + tb[multi], return_inverse=True)
    mn = g.nodes(len(mk))
    shared = g.arcs(cn[ci[multi]], mn[minv], 1, 0)
    g.arcs(mn, dn[mk % B], 1, 0)
    uk, inv = np.unique(lk[lead_arc], return_inverse=True)
    kn = g.nodes(len(uk))
    via = g.arcs(cn[ci[lead_arc]], kn[inv], 1, 0)
    used = np.array([st.lcount.get(k, 0) for k in uk.tolist()], dtype=np.int64)
    g.arcs(kn, dn[uk % B], np.maximum(0, st.cap[uk // B] - used), 0)
    flows, _ = g.solve_min_cost("rebalance replica choice")
    single = ~lead_arc & ~multi
    chosen_c = np.concatenate([ci[single][flows[plain] > 0], ci[lead_arc][flows[via] > 0],
                               ci[multi][flows[shared] > 0]])
    chosen_b = np.concatenate([tb[single][flows[plain] > 0], tb[lead_arc][flows[via] > 0],
                               tb[multi][flows[shared] > 0]])
    order = np.argsort(chosen_c, kind="stable")
    chosen_c, chosen_b = chosen_c[order], chosen_b[order]
    placed = 0
    left = shed.copy()
    req_all = required_racks(pb, eligible)
    touched: set[int] = set()
    for c_i, b in zip(chosen_c.tolist(), chosen_b.tolist(), strict=True):
        r, sl = int(ri[c_i]), int(si[c_i])
        if not again[c_i] and st.bytes + int(size[c_i]) > budget_b:
            continue
        if r in touched:  # a second move of the same partition this round: re-check against the first
            row = st.final[r]
            if (row == b).any() or not rack_ok(pb, row[None, :], np.array([sl]), np.array([b]),
                                               req_all[r:r + 1])[0]:
                continue
        touched.add(r)
        src = int(st.final[r, sl])
        apply_move(pb, st, r, sl, b)
        left[src] -= 1
        placed += 1
    return placed, left


def _size_bucket(size: np.ndarray) -> np.ndarray:
    """0..63 by rank of size among the candidates (a small cost range for min-cost flow)."""
    if not len(size):
        return np.zeros(0, np.int64)
    rank = np.empty(len(size), np.int64)
    rank[np.argsort(size, kind="stable")] = np.arange(len(size))
    return rank * 64 // len(size)


