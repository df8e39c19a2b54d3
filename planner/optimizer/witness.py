"""The leadership witness of a rebalance: a planned leader per partition within its topic's cap.

A rebalance must leave every topic with at most ceil(partitions / brokers) preferred leaders per broker (or
the least any placement allows). Before moving anything, each partition gets a planned leader within that cap
(`witness`: a max flow, or a min-cost flow steering leaders away from brokers about to shed replicas); a topic
that no assignment can serve gets the fewest replica moves that serve it (`repair`: one min-cost flow per
topic), else its cap is raised by one (`leader_caps`). Later moves of a planned leader's replica keep the
target within the cap, so the final leader flow can always reach it.
"""

from __future__ import annotations

import numpy as np

from planner.optimizer.checks import popcount, required_racks
from planner.optimizer.mcf import BIG_CAP, FlowGraph, band
from planner.optimizer.problem import Problem, rack_masks
from planner.optimizer.state import State, apply_move, broker_counts


def witness(pb: Problem, st: State, eligible: np.ndarray, avoid: np.ndarray | None = None) -> None:
    # avoid: (B,) extra cost of a planned leader on each broker
    """Planned leaders: one per partition, at most `st.cap[t]` per topic and broker: any (a max flow), or with
    `avoid` a min-cost flow that prefers brokers outside it (those about to shed replicas, so their replicas
    stay free to move) and then today's leader. Partitions no assignment can serve keep lead = -1."""
    B = pb.num_brokers
    f = st.final
    cand = np.where((f >= 0) & eligible[np.maximum(f, 0)], f, -1)
    fixed = pb.fixed
    st.lcount = {}
    st.lead[:] = -1
    lead0 = f[:, 0] if f.shape[1] else np.full(len(f), -1)
    fr = np.flatnonzero(fixed & (lead0 >= 0) & eligible[np.maximum(lead0, 0)])
    for k in (pb.topic_of[fr].astype(np.int64) * B + lead0[fr]).tolist():
        st.lcount[k] = st.lcount.get(k, 0) + 1
    st.lead[fr] = lead0[fr]
    rows = np.flatnonzero(~fixed & (cand >= 0).any(axis=1))
    if not len(rows):
        return
    c = cand[rows]
    ii, jj = np.nonzero(c >= 0)
    b_of = c[ii, jj]
    keys = pb.topic_of[rows][ii].astype(np.int64) * B + b_of
    uk, inv = np.unique(keys, return_inverse=True)
    used = np.array([st.lcount.get(k, 0) for k in uk.tolist()], dtype=np.int64)
    g = FlowGraph()
    if avoid is None:  # any witness will do: a max flow (fast)
        src, snk = g.node(), g.node()
        pn = g.nodes(len(rows))
        kn = g.nodes(len(uk))
        g.arcs(src, pn, 1)
        arcs = g.arcs(pn[ii], kn[inv], 1)
        g.arcs(kn, snk, np.maximum(0, st.cap[uk // B] - used))
        flows = g.solve_max_flow(src, snk)
    else:
        snk = g.node()
        pn = g.nodes(len(rows))
        kn = g.nodes(len(uk))
        g.set_supply(pn, 1)
        g.set_supply(snk, -len(rows))
        cost = (b_of != pb.replicas[rows[ii], 0]).astype(np.int64) + avoid[b_of].astype(np.int64)
        arcs = g.arcs(pn[ii], kn[inv], 1, cost)
        g.arcs(pn, snk, 1, 2 + int(cost.max(initial=0)) * 2)  # no leader within the cap
        g.arcs(kn, snk, np.maximum(0, st.cap[uk // B] - used), 0)
        flows, _ = g.solve_min_cost("planned leaders")
    hit = flows[arcs] > 0
    st.lead[rows[ii[hit]]] = b_of[hit]
    for k in keys[hit].tolist():
        st.lcount[k] = st.lcount.get(k, 0) + 1


def leader_caps(pb: Problem, st: State, eligible: np.ndarray, budget_m: int, budget_b: int,
                unreached: list[str]) -> tuple[int, list[str], int]:
    """Per topic cap ceil(partitions / brokers); partitions that no leader assignment can serve get one
    replica moved (`repair`); a topic where even that fails gets its cap raised by one, and so on. A topic
    whose repair the move or byte budget stops keeps its cap but not its witness: it is named in `unreached`
    and returned. Returns (moves made, topics the budget stopped, deficiency): the deficiency is a lower bound
    on the moves any plan needs for the caps: the partitions the first (maximum) witness leaves unserved in
    the topics whose cap stayed put, since a replica move adds one partition-broker pair and so serves at most
    one more partition."""
    T = len(pb.topic_names)
    n_e = max(1, int(eligible.sum()))
    n_t = np.bincount(pb.topic_of, minlength=T)
    st.cap = -(-n_t // n_e)
    st.cap[pb.excluded_topic] = BIG_CAP
    made = 0
    stopped = np.zeros(T, dtype=bool)
    cap0 = st.cap.copy()
    first: np.ndarray | None = None
    for _ in range(int(n_t.max(initial=0)) + 1):
        witness(pb, st, eligible)
        rows = np.flatnonzero(~pb.fixed & (st.lead < 0) & ((st.final >= 0) & eligible[np.maximum(st.final, 0)])
                              .any(axis=1))
        rows = rows[~stopped[pb.topic_of[rows]]]
        if first is None:
            first = rows
        if not len(rows):
            break
        done, by_budget, unserved = repair(pb, st, eligible, rows, budget_m, budget_b)
        made += done
        stopped[pb.topic_of[np.asarray(by_budget, dtype=np.int64)]] = True
        if len(unserved):
            st.cap[np.unique(pb.topic_of[np.asarray(unserved, dtype=np.int64)])] += 1
        elif not len(by_budget):
            break
    names = [pb.topic_names[t] for t in np.flatnonzero(stopped).tolist()]
    if names:
        shown = ", ".join(names[:10]) + (f" (+{len(names) - 10} more)" if len(names) > 10 else "")
        unreached.append(f"{len(names)} topics keep more preferred leaders on a broker than ceil(partitions / "
                         f"brokers): the move budget ran out before the replica moves that spread them ({shown})")
    deficiency = 0 if first is None else int((st.cap[pb.topic_of[first]] == cap0[pb.topic_of[first]]).sum())
    return made, names, deficiency


def repair(pb: Problem, st: State, eligible: np.ndarray, rows: np.ndarray, budget_m: int, budget_b: int,
           max_arcs: int = 4_000_000) -> tuple[int, list[int], list[int]]:
    """Serve `rows`, the partitions a maximum witness left without a planned leader within their topic's cap,
    with the fewest replica moves: a moved replica leads. Returns (moves made, rows not served).

    Each unserved partition moves one replica to a broker where its topic has room (`_repair_direct`). Topics
    where that fails for some partition get one min-cost flow per topic (topics solved together in chunks of
    about `max_arcs` arcs: they share nothing but the sink): each partition takes a leader among its registered
    replicas (cost 0) or on a broker it may move a replica to (one move), at most cap per broker, each move
    taken from the fullest of the partition's brokers the racks allow and preferring emptier receivers. A
    topic that cannot be served entirely is left as it is. Returns (moves made, rows the budget left unserved,
    rows of topics no move can serve within the cap)."""
    e_idx = np.flatnonzero(eligible)
    E = len(e_idx)
    R = st.final.shape[1]
    req = required_racks(pb, eligible)
    bits = pb.rack_bits()
    # Each unserved partition moves one replica to a broker where its topic has room and leads from there:
    # the fewest moves (a maximum witness leaves exactly these partitions unserved, and one move serves at most
    # one more). Topics where some partition has no such move are solved by a flow over the whole topic.
    made, failed, hard = _repair_direct(pb, st, eligible, e_idx, req, bits, rows, budget_m, budget_b)
    topics = np.unique(pb.topic_of[hard]) if len(hard) else np.zeros(0, np.int64)
    t_start = np.searchsorted(pb.topic_of, topics)
    t_end = np.searchsorted(pb.topic_of, topics, side="right")
    size_t = (t_end - t_start) * max(1, R) * (1 + max(1, E))
    k = 0
    unserved: list[int] = []
    while k < len(topics):
        j = k + 1
        while j < len(topics) and size_t[k:j + 1].sum() <= max_arcs:
            j += 1
        m, f, bad = _repair_chunk(pb, st, eligible, e_idx, req, bits, topics[k:j], t_start[k:j], t_end[k:j],
                                  budget_m, budget_b)
        made += m
        failed.extend(f)
        unserved.extend(np.flatnonzero(np.isin(pb.topic_of, topics[k:j][bad]) & (st.lead < 0) & ~pb.fixed).tolist())
        k = j
    return made, failed, unserved


def _repair_direct(pb: Problem, st: State, eligible: np.ndarray, e_idx: np.ndarray, req: np.ndarray,
                   bits: np.ndarray, rows: np.ndarray, budget_m: int, budget_b: int
                   ) -> tuple[int, list[int], np.ndarray]:
    """One move per unserved row, in row order: among the (slot, receiver) pairs that keep the row's racks and
    where its topic has room under the cap, a move that helps levelling (from a broker above the level, to one
    below) first, then to the emptiest receiver from the fullest source. Returns (moves made, rows refused by
    the budget, rows with no such move: left for the flow)."""
    B = pb.num_brokers
    E = len(e_idx)
    F = st.final[rows]
    n, R = F.shape
    ES = (F >= 0) & eligible[np.maximum(F, 0)]
    holds = (F[:, :, None] == e_idx[None, None, :]).any(axis=1)   # (n, E)
    if pb.rack_aware:
        others = np.repeat(F[:, None, :], R, axis=1)               # (n, R, R) row without slot s
        s_ar = np.arange(R)
        others[:, s_ar, s_ar] = -1
        om = rack_masks(others.reshape(-1, R), bits).reshape(n, R)
        ok = popcount((om[:, :, None] | bits[e_idx][None, None, :]).reshape(-1)).reshape(n, R, E) \
            >= req[rows][:, None, None]
    else:
        ok = np.ones((n, R, E), dtype=bool)
    ok &= ES[:, :, None] & ~holds[:, None, :]
    counts = broker_counts(st.final, B)
    lo, hi = band(int(counts[e_idx].sum()), E)
    made = 0
    failed: list[int] = []
    hard: list[int] = []
    sizes = np.maximum(pb.sizes, 0)
    for i, r in enumerate(rows.tolist()):
        t = int(pb.topic_of[r])
        room = st.cap[t] - np.array([st.lcount.get(t * B + int(b), 0) for b in e_idx.tolist()])
        src_c = np.where(ok[i], counts[np.maximum(F[i], 0)][:, None], -1)   # (R, E)
        sl = np.argmax(src_c, axis=0)
        best = src_c[sl, np.arange(E)]
        cand = np.flatnonzero((best >= 0) & (room > 0))
        if not len(cand):
            hard.append(r)
            continue
        if st.moves + 1 > budget_m or st.bytes + int(sizes[r]) > budget_b:
            failed.append(r)
            continue
        src = best[cand]
        rc = counts[e_idx[cand]]
        useful = (src > hi).astype(np.int64) + (rc < lo)
        pick = cand[np.lexsort((cand, rc - src, -useful))[0]]
        b = int(e_idx[pick])
        slot = int(sl[pick])
        a = int(st.final[r, slot])
        apply_move(pb, st, r, slot, b)
        counts[a] -= 1
        counts[b] += 1
        st.lead[r] = b
        st.lcount[t * B + b] = st.lcount.get(t * B + b, 0) + 1
        made += 1
    return made, failed, np.array(hard, dtype=np.int64)


def _repair_chunk(pb: Problem, st: State, eligible: np.ndarray, e_idx: np.ndarray, req: np.ndarray,
                  bits: np.ndarray, topics: np.ndarray, t_start: np.ndarray, t_end: np.ndarray, budget_m: int,
                  budget_b: int) -> tuple[int, list[int], np.ndarray]:
    """One chunk of `repair`: returns (moves made, rows left unserved by the budget, per topic whether it could
    not be served at all: then nothing of it changed)."""
    B = pb.num_brokers
    E = len(e_idx)
    t_rows = np.concatenate([np.arange(a, b) for a, b in zip(t_start.tolist(), t_end.tolist(), strict=True)])
    f = st.final[t_rows]
    fixed = pb.fixed[t_rows]
    lead0 = f[:, 0]
    fx = fixed & (lead0 >= 0) & eligible[np.maximum(lead0, 0)]
    tpos = np.searchsorted(topics, pb.topic_of[t_rows])          # topic position within the chunk
    used = np.zeros((len(topics), B), np.int64)                    # fixed leaders per (topic, broker)
    np.add.at(used, (tpos[fx], lead0[fx]), 1)
    el = (f >= 0) & eligible[np.maximum(f, 0)]
    live_sel = ~fixed & el.any(axis=1)
    live = t_rows[live_sel]
    F = f[live_sel]
    ES = el[live_sel]
    lt = tpos[live_sel]
    n = len(live)
    counts = broker_counts(st.final, B)
    # tie-break of a move: from the fullest replica's broker, to the emptiest receiver (0 .. 2 max + 1)
    cmax = int(counts.max(initial=0))
    n_t = np.bincount(lt, minlength=len(topics)).astype(np.int64)
    per_move = (2 * cmax + 2) * (n_t + 1) + 1                     # more than the tie-breaks of all moves
    over_cost = per_move * (n_t + 2)                               # more than serving every row by moves
    # keep arcs: a registered replica leads
    ki, kj = np.nonzero(ES)
    keep_b = F[ki, kj]
    # move arcs: (row, receiver) with the best slot that keeps the racks
    mv = np.arange(n)
    Fm, ESm = F[mv], ES[mv]
    holds = (Fm[:, :, None] == e_idx[None, None, :]).any(axis=1)  # (m, E)
    m, R = Fm.shape
    if pb.rack_aware:
        others = np.repeat(Fm[:, None, :], R, axis=1)              # (m, R, R) row without slot s
        s_ar = np.arange(R)
        others[:, s_ar, s_ar] = -1
        om = rack_masks(others.reshape(-1, R), bits).reshape(m, R)
        cover = popcount((om[:, :, None] | bits[e_idx][None, None, :]).reshape(-1)).reshape(m, R, E)
        ok = cover >= req[live[mv]][:, None, None]
    else:
        ok = np.ones((m, R, E), dtype=bool)
    ok &= ESm[:, :, None]
    src_count = counts[np.maximum(Fm, 0)]                          # (m, R)
    score = np.where(ok, (src_count * (R + 1) + (R - np.arange(R)[None, :]))[:, :, None], -1)
    sl = np.argmax(score, axis=1)                                  # (m, E)
    can = (np.take_along_axis(score, sl[:, None, :], axis=1)[:, 0, :] >= 0) & ~holds
    mj, me = np.nonzero(can)
    ms = sl[mj, me]
    src = Fm[mj, ms]
    mi = mv[mj]
    tie = counts[e_idx[me]] - counts[src] + cmax + 1
    g = FlowGraph()
    snk = g.node()
    pn = g.nodes(n)
    tbn = g.nodes(len(topics) * B)                                 # (topic, broker) nodes
    g.set_supply(pn, 1)
    g.set_supply(snk, -n)
    a_keep = g.arcs(pn[ki], tbn[lt[ki] * B + keep_b], 1, 0)
    a_move = g.arcs(pn[mi], tbn[lt[mi] * B + e_idx[me]], 1, per_move[lt[mi]] + tie)
    over = g.arcs(pn, snk, 1, over_cost[lt])
    cap_tb = np.maximum(0, st.cap[topics][:, None] - used).reshape(-1)
    g.arcs(tbn, snk, cap_tb, 0)
    flows, _ = g.solve_min_cost("topic leader repair")
    unserved = flows[over] > 0
    bad_t = np.zeros(len(topics), dtype=bool)
    bad_t[lt[unserved]] = True
    failed: list[int] = []
    made = 0
    hit = np.flatnonzero((flows[a_move] > 0) & ~bad_t[lt[mi]])
    # the repair flow is a leader assignment within the caps for its served topics: it becomes their witness
    good = ~bad_t[lt]
    new_lead = np.full(n, -1, np.int64)
    kh = flows[a_keep] > 0
    new_lead[ki[kh]] = keep_b[kh]
    for k in hit.tolist():
        r = int(live[mi[k]])
        size = max(0, int(pb.sizes[r]))
        if st.moves + 1 > budget_m or st.bytes + size > budget_b:
            failed.append(r)
            new_lead[mi[k]] = -1
            continue
        apply_move(pb, st, r, int(ms[k]), int(e_idx[me[k]]))
        new_lead[mi[k]] = int(e_idx[me[k]])
        made += 1
    st.lead[live[good]] = new_lead[good]
    _recount(pb, st)
    return made, failed, bad_t


def _recount(pb: Problem, st: State) -> None:
    """st.lcount from st.lead (planned leaders per topic and broker)."""
    ok = st.lead >= 0
    k, c = np.unique(pb.topic_of[ok].astype(np.int64) * pb.num_brokers + st.lead[ok], return_counts=True)
    st.lcount = dict(zip(k.tolist(), c.tolist(), strict=True))
