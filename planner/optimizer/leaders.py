"""Preferred-leader order ("distinct leading replicas"): which replica of each partition goes first.

Leaders are placed by reordering replica lists only (no data moves). Priorities, in order:
1. within every topic, the most partitions one broker leads is the minimum the placement allows (a bottleneck
   b-matching, found with max flows: `topic_bounds`);
2. per-broker leader counts as level as possible around the ideal (convex costs);
3. as few partitions as possible change their preferred leader.

One min-cost flow does 2 and 3 under the hard caps of 1. It is written as a *circulation around the current
order* so the flow only has to carry the changes:

    broker a --(lose arcs)-- hub --(gain arcs)-- broker b
    home(t, a) --[cap 1, cost 1]--> partition p (led by a today) --[cap 1]--> home(t, b)   (b another replica)

`home(t, b)` is broker b's node, or a (topic, broker) node capped at the topic's bound where that cap could
bind. A partition whose leader must change anyway (its leader left, or it has none) supplies one unit.
Level costs are weighted above the total change cost, so balance always wins over fewer changes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.optimizer.checks import Infeasible
from planner.optimizer.mcf import BIG_CAP, FlowGraph, band, level_arcs, unique
from planner.optimizer.problem import Problem


@dataclass
class LeaderResult:
    ordered: np.ndarray      # (P, R) final replica lists, leader first
    leader: np.ndarray       # (P,) broker index of replicas[0] (-1 when none)
    topic_bound: np.ndarray  # (T,) the per-topic bound used (0 for topics with nothing to place)
    changes: int             # partitions whose preferred leader changed (reorders and moved leaders)
    method: str = "exact"    # "exact" (one min-cost flow) | "decomposed" (per topic, then balancing rounds)
    necessary: int = 0       # of `changes`: partitions whose preferred leader the placement takes away
    optional: int = 0        # of `changes`: partitions whose leader still holds a replica, led elsewhere


def necessary_changes(pb: Problem, final: np.ndarray, eligible: np.ndarray, active: np.ndarray) -> np.ndarray:
    """(P,) bool: partitions that must get a new preferred leader on placement `final`: the current one no
    longer holds a replica, or (among the `active` partitions, those the plan may reorder) it is not registered
    while another replica's broker may lead. Excluded and in-flight partitions never count."""
    orig = pb.replicas
    if not orig.shape[1]:
        return np.zeros(len(orig), dtype=bool)
    prev = orig[:, 0]
    cand = _candidates(final, eligible)
    stays = ((cand == prev[:, None]) & (prev >= 0)[:, None]).any(axis=1)
    gone = (prev >= 0) & ~(final == prev[:, None]).any(axis=1)
    return ~pb.fixed & (gone | (active & ~stays & (cand >= 0).any(axis=1)))


def _candidates(final: np.ndarray, eligible: np.ndarray) -> np.ndarray:
    return np.where((final >= 0) & eligible[np.maximum(final, 0)], final, -1)


def topic_bounds(pb: Problem, rows: np.ndarray, cand: np.ndarray, fixed_tb: dict | None,
                 start: np.ndarray | None = None) -> np.ndarray:
    """Per topic, the least u such that the topic's `rows` can each pick a leader among `cand` with at most u
    per broker (counting fixed leaders `fixed_tb`: key t*B+b -> count). Max-flow feasibility tests, topics
    tested together; a deficient topic's next u skips values the deficit already rules out."""
    B = pb.num_brokers
    T = len(pb.topic_names)
    t_of = pb.topic_of[rows].astype(np.int64)
    valid = cand >= 0
    keys = (t_of[:, None] * B + np.maximum(cand, 0))[valid]
    own = np.repeat(np.arange(len(rows)), valid.sum(axis=1))
    fk = np.array(sorted(fixed_tb), dtype=np.int64) if fixed_tb else np.zeros(0, np.int64)
    fv = np.array([fixed_tb[k] for k in fk.tolist()], dtype=np.int64) if fixed_tb else np.zeros(0, np.int64)
    all_keys = unique(np.concatenate([keys, fk]))
    holders = np.bincount(all_keys // B, minlength=T)
    n_t = np.bincount(t_of, minlength=T) + np.bincount(fk // B, weights=fv, minlength=T).astype(np.int64)
    f_max = np.zeros(T, dtype=np.int64)
    np.maximum.at(f_max, fk // B, fv)
    u = np.where(holders > 0, -(-n_t // np.maximum(holders, 1)), 0)
    u = np.maximum(u, f_max)
    if start is not None:
        u = np.maximum(u, start)
    f_of_key = np.zeros(len(all_keys), dtype=np.int64)
    f_of_key[np.searchsorted(all_keys, fk)] = fv
    key_pos = np.searchsorted(all_keys, keys)
    # Topics whose current leaders already meet the lower bound need no test.
    test = np.zeros(T, dtype=bool)
    test[t_of] = True
    while test.any():
        sel_rows = test[t_of]
        sel_arc = sel_rows[own]
        g = FlowGraph()
        src, snk = g.node(), g.node()
        rn = g.nodes(int(sel_rows.sum()))
        row_node = np.full(len(rows), -1, np.int64)
        row_node[sel_rows] = rn
        k_used = unique(key_pos[sel_arc])
        kn = g.nodes(len(k_used))
        g.arcs(src, rn, 1)
        g.arcs(row_node[own[sel_arc]], kn[np.searchsorted(k_used, key_pos[sel_arc])], 1)
        cap = np.maximum(0, u[all_keys[k_used] // B] - f_of_key[k_used])
        g.arcs(kn, snk, cap)
        flows = g.solve_max_flow(src, snk)
        got = np.bincount(t_of[sel_rows], weights=flows[: len(rn)], minlength=T).astype(np.int64)
        want = np.bincount(t_of[sel_rows], minlength=T)
        deficit = np.where(test, want - got, 0)
        short = deficit > 0
        u[short] += -(-deficit[short] // np.maximum(holders[short], 1))
        test = short
    return u


@dataclass
class _Setup:
    rows: np.ndarray       # active partition rows
    cand: np.ndarray       # (n, R) eligible candidate leaders, -1 padded
    t_of: np.ndarray       # (n,) topic
    prev: np.ndarray       # (n,) leader before the plan
    assigned: np.ndarray   # (n,) prev is still a candidate
    fixed_b: np.ndarray    # (B,) leaders the plan does not choose, per broker
    fixed_tb: dict         # t*B+b -> fixed leaders
    bound: np.ndarray      # (T,)
    e_idx: np.ndarray      # eligible broker indices
    lo: int
    hi: int


def choose_leaders(pb: Problem, final: np.ndarray, eligible: np.ndarray, active: np.ndarray,
                   min_bound: np.ndarray | None = None, exact_limit: int = 20_000,
                   max_changes: int | None = None) -> LeaderResult:
    """Leaders for the `active` partitions of placement `final`; the others keep their order (a partition
    whose leader the placement takes away is always active: it has to be given one).

    Up to `exact_limit` partitions one exact flow (all three priorities at once); above it, a decomposition
    that scales: (a) per topic, the fewest changes that meet the topic's bound, then (b) rounds of a
    broker-level flow that levels the per-broker counts with single leader changes that keep every topic
    within its bound (see `_balance_rounds`). With `max_changes` (all leadership changes, necessary ones
    included) a Lagrangian search over exact flows (`_exact_budget`) at any size.
    """
    B = pb.num_brokers
    P = pb.num_partitions
    cand_all = _candidates(final, eligible)
    needed = necessary_changes(pb, final, eligible, active)
    active = (active | needed) & ~pb.fixed & (cand_all >= 0).any(axis=1)
    necessary = int(needed.sum())
    if max_changes is not None and max_changes < necessary:
        raise Infeasible("leader-changes", f"at most {max_changes} leadership changes were asked for, but "
                         f"{necessary} partitions lose their preferred leader's replica (or it leaves) in this "
                         f"plan and must be given a new one: allow at least {necessary}")
    rows = np.flatnonzero(active)
    cand = cand_all[rows]
    t_of = pb.topic_of[rows].astype(np.int64)
    prev = pb.replicas[rows, 0] if pb.replicas.shape[1] else np.full(len(rows), -1, np.int32)
    assigned = ((cand == prev[:, None]) & (cand >= 0)).any(axis=1)
    lead0 = final[:, 0] if final.shape[1] else np.full(P, -1, np.int32)
    fixed_rows = np.flatnonzero(~active & (lead0 >= 0) & eligible[np.maximum(lead0, 0)])
    fixed_b = np.bincount(lead0[fixed_rows], minlength=B).astype(np.int64)
    fk, fv = np.unique(pb.topic_of[fixed_rows].astype(np.int64) * B + lead0[fixed_rows], return_counts=True)
    fixed_tb = dict(zip(fk.tolist(), fv.tolist(), strict=True))
    bound = topic_bounds(pb, rows, cand, fixed_tb, min_bound)
    e_idx = np.flatnonzero(eligible)
    lo, hi = band(len(rows) + int(fixed_b[e_idx].sum()), len(e_idx))
    s = _Setup(rows, cand, t_of, prev, assigned, fixed_b, fixed_tb, bound, e_idx, lo, hi)
    method = "exact" if len(rows) <= exact_limit or max_changes is not None else "decomposed"
    if max_changes is not None:
        leader_rows = _exact_budget(pb, s, max_changes - necessary)
    elif method == "exact":
        leader_rows = _exact(pb, s)[0]
    else:
        leader_rows = _within_topics(pb, s)
        leader_rows = _balance_rounds(pb, s, leader_rows)
    leader = lead0.copy()
    leader[rows] = leader_rows
    ordered = final.copy()
    if len(rows):
        sub = final[rows]
        col = np.arange(sub.shape[1])[None, :]
        j = np.argmax(sub == leader_rows[:, None], axis=1)
        key = np.where(col == j[:, None], -1, col)
        ordered[rows] = np.take_along_axis(sub, np.argsort(key, axis=1, kind="stable"), axis=1)
    changed = (ordered[:, 0] != pb.replicas[:, 0]) if P and final.shape[1] else np.zeros(P, dtype=bool)
    changes = int(changed.sum())
    n_needed = int((changed & needed).sum())
    return LeaderResult(ordered, leader, bound, changes, method, n_needed, changes - n_needed)


def _fixed_of(s: _Setup, keys: np.ndarray) -> np.ndarray:
    if not s.fixed_tb:
        return np.zeros(len(keys), dtype=np.int64)
    return np.array([s.fixed_tb.get(k, 0) for k in keys.tolist()], dtype=np.int64)


def _home(key: np.ndarray, bind: np.ndarray, tb: np.ndarray, bnode: np.ndarray, B: int) -> np.ndarray:
    """The node a leadership unit of (topic, broker) `key` enters: its capped (topic, broker) node if it has
    one, else the broker's node."""
    if not len(bind):
        return bnode[key % B]
    pos = np.searchsorted(bind, key)
    pos_c = np.minimum(pos, len(bind) - 1)
    return np.where((pos < len(bind)) & (bind[pos_c] == key), tb[pos_c], bnode[key % B])


def _exact(pb: Problem, s: _Setup, span: int = 16, change_cost: int = 1, weight: int | None = None,
           square: bool = False, soft_cap: int | None = None) -> tuple[np.ndarray, int]:
    """The circulation described in the module docstring, solved exactly; returns (leader per row, optional
    changes made). By default level costs outweigh every total of change costs (balance always wins) and the
    topic bounds are hard. The budgeted search (`_exact_budget`) prices a change at `change_cost` against
    square level costs of weight 1 (`square`: the sum of squares of the per-broker counts, up to a constant)
    and makes the bounds soft at `soft_cap` per leader over a bound."""
    B = pb.num_brokers
    rows, cand, t_of, prev, assigned = s.rows, s.cand, s.t_of, s.prev, s.assigned
    is_prev = (cand == prev[:, None]) & (cand >= 0)
    cur_b = s.fixed_b + np.bincount(prev[assigned], minlength=B)
    cur_key = t_of[assigned] * B + prev[assigned]
    valid = cand >= 0
    keys = t_of[:, None] * B + np.maximum(cand, 0)
    # (topic, broker) pairs whose cap could bind: more candidates (plus fixed leaders) than the bound.
    kk, kc = np.unique(keys[valid], return_counts=True)
    kc = kc + _fixed_of(s, kk)
    bind = kk[kc > s.bound[kk // B]]
    w = weight if weight is not None else len(rows) + 1  # level costs outweigh every total of change costs
    while True:
        g = FlowGraph()
        bnode = np.full(B, -1, np.int64)
        bnode[s.e_idx] = g.nodes(len(s.e_idx))
        hub = g.node()
        tb = g.nodes(len(bind))
        tb_t, tb_b = bind // B, bind % B
        cur_tb = np.zeros(len(bind), dtype=np.int64)
        if len(bind):
            pos = np.searchsorted(bind, cur_key)
            hit = (pos < len(bind)) & (bind[np.minimum(pos, len(bind) - 1)] == cur_key)
            np.add.at(cur_tb, pos[hit], 1)
            cur_tb += _fixed_of(s, bind)
        over = np.maximum(0, cur_tb - s.bound[tb_t])
        g.arcs(tb, bnode[tb_b], np.maximum(0, s.bound[tb_t] - cur_tb), 0)
        g.arcs(bnode[tb_b], tb, BIG_CAP, 0)
        if soft_cap is not None:  # a leader above the bound (kept or gained) costs soft_cap
            g.arcs(tb, bnode[tb_b], BIG_CAP, soft_cap)
        g.set_supply(tb, over)  # a (topic, broker) over its bound must shed leaders (a lower bound on
        g.set_supply(bnode[tb_b], -over)  # broker -> tb flow, written as supplies)
        pn = g.nodes(len(rows))
        a_keep = g.arcs(_home(cur_key, bind, tb, bnode, B), pn[assigned], 1, change_cost)
        g.set_supply(pn[~assigned], 1)
        g.set_supply(hub, -int((~assigned).sum()))
        oi, oj = np.nonzero(valid & ~is_prev)
        a_out = g.arcs(pn[oi], _home(keys[oi, oj], bind, tb, bnode, B), 1, 0)
        _, _, tails, _ = level_arcs(g, bnode[s.e_idx], hub, cur_b[s.e_idx], s.fixed_b[s.e_idx], s.lo, s.hi, w,
                                    span, square=square)
        flows, _ = g.solve_min_cost("leader order")
        if not flows[tails].any():
            break
        span *= 4
    leader_rows = np.where(assigned, prev, -1).astype(np.int32)
    moved = flows[a_out] > 0
    leader_rows[oi[moved]] = cand[oi[moved], oj[moved]]
    assert (leader_rows >= 0).all(), "leader flow left a partition without a leader"
    return leader_rows, int(flows[a_keep].sum())


def _exact_budget(pb: Problem, s: _Setup, budget: int) -> np.ndarray:
    """At most `budget` optional leader changes: a Lagrangian search over the price of a change.

    Each solve minimises  over_cost x (leaders over topic bounds) + (sum of squares of per-broker counts) +
    price x (optional changes); the optional changes fall as the price rises, and the search keeps the lowest
    price whose solution fits. Such a solution is the least (leaders over bounds, then sum of squares) among
    all choices that make at most as many changes as it does: any better one would have been cheaper at that
    price. over_cost exceeds any sum of squares, so bounds come first."""
    n_tot = len(s.rows) + int(s.fixed_b.sum())
    over_cost = n_tot * n_tot + 1
    leader, used = _exact(pb, s, change_cost=1, weight=1, square=True, soft_cap=over_cost)
    if used <= budget:
        return leader
    lo, hi = 2, over_cost + 2 * n_tot + 2  # at `hi` no optional change can pay for itself
    best = np.where(s.assigned, s.prev, -1).astype(np.int32)
    while lo <= hi:
        mid = (lo + hi) // 2
        leader, used = _exact(pb, s, change_cost=mid, weight=1, square=True, soft_cap=over_cost)
        if used <= budget:
            best, hi = leader, mid - 1
        else:
            lo = mid + 1
    return best


def _within_topics(pb: Problem, s: _Setup, chunk: int = 1000) -> np.ndarray:
    """Per topic, the fewest leader changes that bring it within its bound (topics solved in chunks of
    independent sub-networks, ~`chunk` partitions each: on the skewed 1M cluster chunks of 1,000 took 2.4 s
    where 4,000 took 3.3-3.9 s and 20,000 4.6 s). Among equally few changes, leaders go to brokers that lead
    less."""
    B = pb.num_brokers
    cand, t_of, prev, assigned = s.cand, s.t_of, s.prev, s.assigned
    leader = np.where(assigned, prev, -1).astype(np.int32)
    key_now = t_of[assigned] * B + prev[assigned]
    kk, kc = np.unique(key_now, return_counts=True)
    kc = kc + _fixed_of(s, kk)
    bad_t = np.zeros(len(pb.topic_names), dtype=bool)
    bad_t[(kk // B)[kc > s.bound[kk // B]]] = True
    bad_t[t_of[~assigned]] = True
    work = np.flatnonzero(bad_t[t_of])
    if not len(work):
        return leader
    load = s.fixed_b + np.bincount(prev[assigned], minlength=B)
    tie = np.clip(load - s.lo + 500, 0, 999).astype(np.int64)  # prefer brokers that lead less
    # chunk boundaries at topic edges (rows are in topic order)
    wt = t_of[work]
    edges = np.flatnonzero(np.diff(wt)) + 1
    starts = np.concatenate([[0], edges])
    cut = [0]
    for st in starts.tolist():
        if st - cut[-1] >= chunk:
            cut.append(st)
    cut.append(len(work))
    for a, b in zip(cut[:-1], cut[1:], strict=True):
        sel = work[a:b]
        c = cand[sel]
        valid = c >= 0
        ii, jj = np.nonzero(valid)
        keys = t_of[sel][ii] * B + c[ii, jj]
        uk, inv = np.unique(keys, return_inverse=True)
        g = FlowGraph()
        sink = g.node()
        pn = g.nodes(len(sel))
        kn = g.nodes(len(uk))
        g.set_supply(pn, 1)
        g.set_supply(sink, -len(sel))
        changed = c[ii, jj] != prev[sel][ii]
        arcs = g.arcs(pn[ii], kn[inv], 1, np.where(changed, 1000 + tie[c[ii, jj]], 0))
        g.arcs(kn, sink, np.maximum(0, s.bound[uk // B] - _fixed_of(s, uk)), 0)
        flows, _ = g.solve_min_cost("leaders within topics")
        hit = flows[arcs] > 0
        leader[sel[ii[hit]]] = c[ii[hit], jj[hit]]
    return leader


def _balance_rounds(pb: Problem, s: _Setup, leader: np.ndarray, max_rounds: int = 60,
                    span: int = 16) -> np.ndarray:
    """Level per-broker leader counts with single leader changes that keep every topic within its bound.

    Each round solves a broker-level flow (nodes: brokers; arc a->b = "one partition led by a hands its
    leadership to its replica on b", capacity = how many partitions could, cost = change in the number of
    partitions whose leader differs from before the plan), with convex level costs weighted above change
    costs; then picks concrete partitions for the flow, one per topic and target broker per round so no
    topic's bound can be exceeded. Rounds repeat until the flow finds no improvement.
    """
    B = pb.num_brokers
    n = len(s.rows)
    cand, t_of, prev = s.cand, s.t_of, s.prev
    valid = cand >= 0
    ii, jj = np.nonzero(valid)
    tgt = cand[ii, jj].astype(np.int64)
    tkey = t_of[ii] * B + tgt
    uk, kinv = np.unique(tkey, return_inverse=True)
    cap_k = s.bound[uk // B] - _fixed_of(s, uk)
    w = 3 * n + 1
    for _ in range(max_rounds):
        cur = leader.astype(np.int64)
        load = s.fixed_b + np.bincount(cur, minlength=B)
        used_k = np.bincount(kinv[tgt == cur[ii]], minlength=len(uk))
        spare = cap_k - used_k
        ok = (tgt != cur[ii]) & (spare[kinv] > 0)
        e_i, e_b, e_k = ii[ok], tgt[ok], kinv[ok]
        e_a = cur[e_i]
        e_c = (e_b != prev[e_i]).astype(np.int64) - (e_a != prev[e_i]).astype(np.int64)
        if not len(e_i):
            break
        gkey = (e_a * B + e_b) * 3 + (e_c + 1)
        # the groups' sizes by counting (no sort of every edge each round: ~3M edges at 1M partitions); the
        # edges of the groups the flow uses are sorted after it, by group and, as np.nonzero gave them, by row
        if B * B * 3 <= 1 << 22:
            size = np.bincount(gkey, minlength=B * B * 3)
            gk = np.flatnonzero(size)
            gcount = size[gk]
        else:        # (thousands of brokers: a sort instead of a table of every pair)
            gk, gcount = np.unique(gkey, return_counts=True)
        g_a = gk // 3 // B
        g_b = gk // 3 % B
        g_c = gk % 3 - 1
        while True:
            g = FlowGraph()
            bnode = np.full(B, -1, np.int64)
            bnode[s.e_idx] = g.nodes(len(s.e_idx))
            hub = g.node()
            arcs = g.arcs(bnode[g_a], bnode[g_b], gcount, g_c + 2)
            _, _, tails, _ = level_arcs(g, bnode[s.e_idx], hub, load[s.e_idx], s.fixed_b[s.e_idx], s.lo, s.hi,
                                        w, span)
            flows, cost = g.solve_min_cost("leader balance")
            if not flows[tails].any():
                break
            span *= 4
        if cost >= 0 or not flows[arcs].any():
            break
        taken_row = bytearray(n)
        taken_key = bytearray(len(uk))
        got_r: list[int] = []
        got_b: list[int] = []
        f_arcs = flows[arcs]
        sel = np.flatnonzero(np.isin(gkey, gk[f_arcs > 0]))
        sel = sel[np.argsort(gkey[sel], kind="stable")]
        gkey, e_i, e_b, e_k = gkey[sel], e_i[sel], e_b[sel], e_k[sel]
        gstart = np.full(len(gk), -1, np.int64)
        first = np.flatnonzero(np.concatenate([[True], gkey[1:] != gkey[:-1]])) if len(gkey) else gkey
        gstart[np.searchsorted(gk, gkey[first])] = first
        for gi in np.flatnonzero(f_arcs > 0).tolist():
            want = int(f_arcs[gi])
            e, end = int(gstart[gi]), int(gstart[gi] + gcount[gi])
            while want and e < end:     # the group's edges in order, a slice at a time (as plain ints)
                stop = min(end, e + 2 * want + 64)
                for r, k, b in zip(e_i[e:stop].tolist(), e_k[e:stop].tolist(), e_b[e:stop].tolist(),
                                   strict=True):
                    if taken_row[r] or taken_key[k]:
                        continue
                    taken_row[r] = 1
                    taken_key[k] = 1
                    got_r.append(r)
                    got_b.append(b)
                    want -= 1
                    if not want:
                        break
                e = stop
        if not got_r:
            break
        leader[np.array(got_r, np.int64)] = np.array(got_b, leader.dtype)
    return leader
