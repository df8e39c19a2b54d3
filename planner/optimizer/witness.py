"""The leadership witness of a rebalance: a planned leader per partition within its topic's cap.

A rebalance must leave every topic with at most ceil(partitions / brokers) preferred leaders per broker (or
the least any placement allows). Before moving anything, each partition gets a planned leader within that cap
(`witness`: a max flow, or a min-cost flow steering leaders away from brokers about to shed replicas); a topic
that no assignment can serve gets the fewest replica moves that serve it (`repair`: one min-cost flow per
topic), else its cap is raised by one (`leader_caps`). Later moves of a planned leader's replica keep the
target within the cap, so the final leader flow can always reach it.
"""

from __future__ import annotations

from collections.abc import Callable

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


def witness_holds(pb: Problem, st: State, eligible: np.ndarray) -> bool:
    """Whether the planned leaders are still a witness: every partition that may change and holds an eligible
    replica has one, on an eligible broker holding it, and no topic has more than its cap on a broker (moves
    carry a planned leader along with its replica, so after moves only the caps can break; then `witness`
    must be computed again)."""
    f = st.final
    rows = np.flatnonzero(~pb.fixed & ((f >= 0) & eligible[np.maximum(f, 0)]).any(axis=1))
    lead = st.lead[rows]
    if (lead < 0).any() or not eligible[lead].all() or not (f[rows] == lead[:, None]).any(axis=1).all():
        return False
    if not st.lcount:
        return True
    keys = np.fromiter(st.lcount.keys(), np.int64, len(st.lcount))
    vals = np.fromiter(st.lcount.values(), np.int64, len(st.lcount))
    return bool((vals <= st.cap[keys // pb.num_brokers]).all())


def leader_cap0(pb: Problem, eligible: np.ndarray) -> np.ndarray:
    """(T,) each topic's leader cap before any is raised: ceil(partitions / eligible brokers), none for an
    excluded topic."""
    n_e = max(1, int(eligible.sum()))
    cap = -(-np.bincount(pb.topic_of, minlength=len(pb.topic_names)) // n_e)
    cap[pb.excluded_topic] = BIG_CAP
    return cap


def leader_caps(pb: Problem, st: State, eligible: np.ndarray, budget_m: int, budget_b: int,
                unreached: list[str], shed: np.ndarray | None = None, gain: np.ndarray | None = None
                ) -> tuple[int, list[str], int, np.ndarray]:
    """Per topic cap ceil(partitions / brokers); partitions that no leader assignment can serve get one
    replica moved (`repair`); a topic where even that fails gets its cap raised by one, and so on. A topic
    whose repair the move or byte budget stops keeps its cap but not its witness: it is named in `unreached`
    and returned. Returns (moves made, topics the budget stopped, deficiency, the topics with a deficiency):
    the deficiency is a lower bound
    on the moves any plan needs for the caps: the partitions the first (maximum) witness leaves unserved in
    the topics whose cap stayed put, since a replica move adds one partition-broker pair and so serves at most
    one more partition. `shed` / `gain` (per broker, what the level plan takes off and puts on each broker)
    steer the repair moves to those that level the counts anyway (`_repair_direct`)."""
    T = len(pb.topic_names)
    budgets = (shed.copy(), gain.copy()) if shed is not None and gain is not None else None
    n_t = np.bincount(pb.topic_of, minlength=T)
    st.cap = leader_cap0(pb, eligible)
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
        done, by_budget, unserved = repair(pb, st, eligible, rows, budget_m, budget_b, budgets=budgets)
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
    topics = np.unique(pb.topic_of[first]) if first is not None else np.zeros(0, np.int64)
    return made, names, deficiency, topics


def repair(pb: Problem, st: State, eligible: np.ndarray, rows: np.ndarray, budget_m: int, budget_b: int,
           max_arcs: int = 4_000_000, budgets: tuple[np.ndarray, np.ndarray] | None = None
           ) -> tuple[int, list[int], list[int]]:
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
    if budgets is not None:
        # which partitions move: those whose moves level the counts anyway, as far as the caps allow; a few
        # topics at a time, each chunk's moves made before the next is chosen (the budgets they use up count)
        made, failed, hard_l = 0, [], []
        counts = broker_counts(st.final, pb.num_brokers)

        def realize(movers: np.ndarray) -> None:
            nonlocal made
            m, f_, h_ = _repair_direct(pb, st, eligible, e_idx, req, bits, movers, budget_m, budget_b, budgets,
                                       counts=counts)
            made += m
            failed.extend(f_)
            hard_l.append(h_)

        choose_movers(pb, st, eligible, np.unique(pb.topic_of[rows]), budgets, realize=realize)
        hard = np.concatenate(hard_l) if hard_l else np.zeros(0, np.int64)
    else:
        made, failed, hard = _repair_direct(pb, st, eligible, e_idx, req, bits, rows, budget_m, budget_b, budgets)
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


def choose_movers(pb: Problem, st: State, eligible: np.ndarray, topics: np.ndarray,
                  budgets: tuple[np.ndarray, np.ndarray], chunk_arcs: int = 5_000,
                  realize: Callable[[np.ndarray], None] | None = None) -> np.ndarray:
    """Which partitions of `topics` move a replica so that every partition has a leader within its topic's
    cap: among the many maximum witnesses, the one whose unserved partitions can move where the level plan
    (`budgets`: what it still sheds from and adds to each broker) moves replicas anyway.

    Per topic one min-cost flow (a few topics per flow, they share nothing; bounds.py's flow with the level
    plan in place of today's counts): a partition is led by a broker holding it (free) or moves a replica (1,
    +1 when no broker holding it sheds, +1 when the receiver does not fill: the moves that need another one to
    undo their effect on the level), at most the cap per broker, fixed partitions' leaders counted. Sets the
    planned leader of every partition the flow serves without a move, clears it on the movers, and returns
    the movers: `_repair_direct` then picks each one's replica and receiver with the budgets as they are used
    up (the flow sees neither the budgets' sizes nor racks and distinct brokers on the receiving side). With
    `realize`, each chunk's movers are handed to it before the next chunk's flow (which then sees the budgets
    they used up)."""
    shed, gain = budgets
    B = pb.num_brokers
    e_idx = np.flatnonzero(eligible)
    E = len(e_idx)
    R = st.final.shape[1]
    starts = np.searchsorted(pb.topic_of, topics)
    ends = np.searchsorted(pb.topic_of, topics, side="right")
    size = (ends - starts) * (R + 2) + 2 * E
    movers: list[np.ndarray] = []
    k = 0
    while k < len(topics):
        j = k + 1
        while j < len(topics) and size[k:j + 1].sum() <= chunk_arcs:
            j += 1
        nt = j - k
        lens = ends[k:j] - starts[k:j]
        rows = np.concatenate([np.arange(a, b) for a, b in zip(starts[k:j].tolist(), ends[k:j].tolist(),
                                                                  strict=True)])
        tpos = np.repeat(np.arange(nt), lens)
        f = st.final[rows]
        on = (f >= 0) & eligible[np.maximum(f, 0)]
        fixed = pb.fixed[rows]
        lead0 = f[:, 0]
        fx = fixed & (lead0 >= 0) & eligible[np.maximum(lead0, 0)]
        used = np.zeros((nt, B), np.int64)
        np.add.at(used, (tpos[fx], lead0[fx]), 1)
        live = ~fixed & on.any(axis=1)
        rows, tpos, f, on = rows[live], tpos[live], f[live], on[live]
        n = len(rows)
        caps = np.maximum(0, st.cap[topics[k:j]][:, None] - used).reshape(-1)
        k = j
        if not n:
            continue
        g = FlowGraph()
        snk = g.node()
        pn = g.nodes(n)
        mv = g.nodes(2 * nt)                           # per topic: movers from a shedding broker, the others
        tb = g.nodes(nt * B)
        g.set_supply(pn, 1)
        g.set_supply(snk, -n)
        ii, jj = np.nonzero(on)
        keep = g.arcs(pn[ii], tb[tpos[ii] * B + f[ii, jj]], 1, 0)
        useful = (on & (shed[np.maximum(f, 0)] > 0)).any(axis=1)
        to_mv = g.arcs(pn, mv[2 * tpos + (~useful)], 1, 1 + (~useful))
        mt = np.repeat(np.arange(2 * nt), E)
        mb = np.tile(e_idx, 2 * nt)
        g.arcs(mv[mt], tb[(mt // 2) * B + mb], n, (gain[mb] <= 0).astype(np.int64))
        g.arcs(tb, snk, caps, 0)
        none = g.arcs(pn, snk, 1, 4 * n + 4)          # no leader within the cap at all (the next round)
        flows, _ = g.solve_min_cost("leader-cap movers")
        kept = flows[keep] > 0
        old = st.lead[rows].copy()
        st.lead[rows] = -1
        st.lead[rows[ii[kept]]] = f[ii[kept], jj[kept]]
        _relead(pb, st, rows, old)
        chosen = rows[(flows[to_mv] > 0) | (flows[none] > 0)]
        if realize is not None:
            realize(chosen)
        else:
            movers.append(chosen)
    return np.concatenate(movers) if movers else np.zeros(0, np.int64)


def _relead(pb: Problem, st: State, rows: np.ndarray, old: np.ndarray) -> None:
    """st.lcount after the planned leaders of `rows` changed from `old` to st.lead[rows]."""
    B = pb.num_brokers
    t = pb.topic_of[rows].astype(np.int64)
    for keys, d in (((t * B + old)[old >= 0], -1), ((t * B + st.lead[rows])[st.lead[rows] >= 0], 1)):
        k, c = np.unique(keys, return_counts=True)
        for key, n in zip(k.tolist(), c.tolist(), strict=True):
            st.lcount[key] = st.lcount.get(key, 0) + d * n


def _move_options(pb: Problem, F: np.ndarray, eligible: np.ndarray, e_idx: np.ndarray, req: np.ndarray,
                  bits: np.ndarray) -> np.ndarray:
    """(n, R, E) bool: replica slot s of row i may move to eligible broker j (racks kept, j not holding it)."""
    n, R = F.shape
    E = len(e_idx)
    ES = (F >= 0) & eligible[np.maximum(F, 0)]
    holds = (F[:, :, None] == e_idx[None, None, :]).any(axis=1)   # (n, E)
    if pb.rack_aware:
        others = np.repeat(F[:, None, :], R, axis=1)               # (n, R, R) row without slot s
        s_ar = np.arange(R)
        others[:, s_ar, s_ar] = -1
        om = rack_masks(others.reshape(-1, R), bits).reshape(n, R)
        ok = popcount((om[:, :, None] | bits[e_idx][None, None, :]).reshape(-1)).reshape(n, R, E) >= req[:, None, None]
    else:
        ok = np.ones((n, R, E), dtype=bool)
    return ok & ES[:, :, None] & ~holds[:, None, :]


def _best_move(ok_i: np.ndarray, row: np.ndarray, room: np.ndarray, counts: np.ndarray, e_idx: np.ndarray,
               budgets: tuple[np.ndarray, np.ndarray] | None) -> tuple[int, int, int] | None:
    """(usefulness 0..2, slot, receiver position) of the best move of one row: usefulness counts a source the
    level plan still sheds and a receiver it still fills; ties go from the fullest source to the emptiest
    receiver. None when the row has no move to a broker with room."""
    E = len(e_idx)
    src_b = np.maximum(row, 0)
    shed_ok = (budgets[0][src_b] > 0) if budgets is not None else np.zeros(len(row), bool)
    score = np.where(ok_i, (shed_ok * (1 << 30) + counts[src_b])[:, None], -1)   # (R, E)
    sl = np.argmax(score, axis=0)
    best = score[sl, np.arange(E)]
    cand = np.flatnonzero((best >= 0) & (room > 0))
    if not len(cand):
        return None
    src_use = best[cand] >= (1 << 30)
    dst_use = (budgets[1][e_idx[cand]] > 0) if budgets is not None else np.zeros(len(cand), bool)
    useful = src_use.astype(np.int64) + dst_use
    rc = counts[e_idx[cand]]
    k = int(np.lexsort((cand, rc - (best[cand] % (1 << 30)), -useful))[0])
    return int(useful[k]), int(sl[cand[k]]), int(cand[k])


def _best_moves(ok: np.ndarray, rows: np.ndarray, room: np.ndarray, counts: np.ndarray, e_idx: np.ndarray,
                budgets: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_best_move` of several rows at once: (usefulness, slot, receiver position) per row, usefulness -1
    where the row has no move to a broker with room (same choice and ties as `_best_move`)."""
    n, R, E = ok.shape
    src_b = np.maximum(rows, 0)
    score = np.where(ok, ((budgets[0][src_b] > 0) * (1 << 30) + counts[src_b])[:, :, None], -1)   # (n, R, E)
    sl = np.argmax(score, axis=1)                                                             # (n, E)
    best = np.take_along_axis(score, sl[:, None, :], axis=1)[:, 0, :]
    cand = (best >= 0) & (room > 0)[None, :]
    useful = np.where(cand, (best >= (1 << 30)).astype(np.int64) + (budgets[1][e_idx] > 0)[None, :], -1)
    # per row: most useful, then the emptiest receiver against the fullest source, then the first receiver
    tie = counts[e_idx][None, :] - best % (1 << 30)
    ii, jj = np.nonzero(cand)
    out_u = np.full(n, -1, np.int64)
    out_s = np.zeros(n, np.int64)
    out_j = np.zeros(n, np.int64)
    if len(ii):
        o = np.lexsort((jj, tie[ii, jj], -useful[ii, jj], ii))
        first = o[np.concatenate([[True], ii[o][1:] != ii[o][:-1]])]
        r_i, r_j = ii[first], jj[first]
        out_u[r_i], out_s[r_i], out_j[r_i] = useful[r_i, r_j], sl[r_i, r_j], r_j
    return out_u, out_s, out_j


def _repair_direct(pb: Problem, st: State, eligible: np.ndarray, e_idx: np.ndarray, req: np.ndarray,
                   bits: np.ndarray, rows: np.ndarray, budget_m: int, budget_b: int,
                   budgets: tuple[np.ndarray, np.ndarray] | None = None, max_swap: int = 48,
                   counts: np.ndarray | None = None) -> tuple[int, list[int], np.ndarray]:
    """One move per unserved row, in row order, to a broker where its topic has room under the cap.

    With `budgets` (what the level plan sheds from and adds to each broker, used up as moves are made): a
    move from a broker still to shed to one still to fill levels the counts anyway, any other move needs
    another to undo it. When the row's own best move is not such a move, a partition of the same topic led
    from one of the row's brokers may be: the row takes over its leadership there, and that partition moves
    instead (one alternating step, up to `max_swap` partitions tried). Without budgets: from a broker above
    the level to one below first. Ties: to the emptiest receiver from the fullest source. Returns (moves
    made, rows refused by the budget, rows with no such move: left for the flow). `counts` (per broker, kept
    up to date here) saves recounting when the caller calls this chunk by chunk."""
    B = pb.num_brokers
    E = len(e_idx)
    F = st.final[rows]
    ok = _move_options(pb, F, eligible, e_idx, req[rows], bits)
    if counts is None:
        counts = broker_counts(st.final, B)
    lo, hi = band(int(counts[e_idx].sum()), E)
    if budgets is None:  # levelling brokers: above the level and below it
        budgets = (np.maximum(0, counts - hi), np.maximum(0, lo - counts))
    made = 0
    failed: list[int] = []
    hard: list[int] = []
    sizes = np.maximum(pb.sizes, 0)
    fixed = pb.fixed
    t_room = -1
    room = np.zeros(E, np.int64)
    t_start = pb.topic_start
    for i, r in enumerate(rows.tolist()):
        t = int(pb.topic_of[r])
        if t != t_room:   # the topic's room per broker (kept up to date below while its rows last)
            room = st.cap[t] - np.array([st.lcount.get(t * B + int(b), 0) for b in e_idx.tolist()])
            t_room = t
        own = _best_move(ok[i], st.final[r], room, counts, e_idx, budgets)
        if own is None:
            hard.append(r)
            continue
        mover, use, slot, j = r, own[0], own[1], own[2]
        if use < 2:
            # a partition of the topic led from one of this row's brokers, with a better move
            mine = st.final[r][(st.final[r] >= 0) & eligible[np.maximum(st.final[r], 0)]]
            seg = np.arange(t_start[t], t_start[t + 1])
            q = seg[np.isin(st.lead[seg], mine) & ~fixed[seg] & (seg != r)][:max_swap]
            if len(q):
                okq = _move_options(pb, st.final[q], eligible, e_idx, req[q], bits)
                u_q, s_q, j_q = _best_moves(okq, st.final[q], room, counts, e_idx, budgets)
                k = int(np.argmax(u_q))    # the first of the best (what trying them in order found)
                if u_q[k] > use:
                    mover, use, slot, j = int(q[k]), int(u_q[k]), int(s_q[k]), int(j_q[k])
        if st.moves + 1 > budget_m or st.bytes + int(sizes[mover]) > budget_b:
            failed.append(r)
            continue
        b = int(e_idx[j])
        a = int(st.final[mover, slot])
        if mover != r:  # r takes over the leadership the mover had, the mover leads from its new broker
            st.lead[r] = st.lead[mover]   # (the count of leaders at that broker stays)
            st.lead[mover] = -1
        apply_move(pb, st, mover, slot, b)
        budgets[0][a] -= 1
        budgets[1][b] -= 1
        counts[a] -= 1
        counts[b] += 1
        st.lead[mover] = b
        st.lcount[t * B + b] = st.lcount.get(t * B + b, 0) + 1
        room[j] -= 1
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
