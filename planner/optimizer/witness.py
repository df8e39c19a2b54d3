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

from planner.optimizer.checks import required_racks
from planner.optimizer.mcf import BIG_CAP, FlowGraph
from planner.optimizer.problem import Problem
from planner.optimizer.state import State, apply_move, broker_counts, rack_ok


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
                 unreached: list[str]) -> int:
    """Per topic cap ceil(partitions / brokers); partitions that no leader assignment can serve get one
    replica moved (`_repair`); a topic where even that fails gets its cap raised by one, and so on."""
    T = len(pb.topic_names)
    n_e = max(1, int(eligible.sum()))
    n_t = np.bincount(pb.topic_of, minlength=T)
    st.cap = -(-n_t // n_e)
    st.cap[pb.excluded_topic] = BIG_CAP
    made = 0
    for _ in range(int(n_t.max(initial=0)) + 1):
        witness(pb, st, eligible)
        rows = np.flatnonzero(~pb.fixed & (st.lead < 0) & ((st.final >= 0) & eligible[np.maximum(st.final, 0)])
                              .any(axis=1))
        if not len(rows):
            break
        done, failed = repair(pb, st, eligible, rows, budget_m, budget_b)
        made += done
        if not failed:
            break
        over_budget = [r for r in failed if st.moves >= budget_m]
        if over_budget:
            unreached.append(f"{pb.names(np.array(over_budget))}: no leader within the topic's bound "
                             "(move budget spent)")
            break
        st.cap[np.unique(pb.topic_of[failed])] += 1
    return made


def repair(pb: Problem, st: State, eligible: np.ndarray, rows: np.ndarray, budget_m: int, budget_b: int
            ) -> tuple[int, list[int]]:
    """Topics whose partitions cannot all get a planned leader within the cap. Per such topic one min-cost flow:
    each partition takes a leader among its registered replicas (cost 0) or on a broker it may move a replica
    to (cost 1: one move, and the moved replica leads), at most cap per broker. So the topic gets served with
    the fewest moves that serve it by moving leaders' replicas. Returns (moves made, rows not served)."""
    B = pb.num_brokers
    e_idx = np.flatnonzero(eligible)
    req = required_racks(pb, eligible)
    made = 0
    failed: list[int] = []
    for t in sorted({int(pb.topic_of[r]) for r in rows.tolist()}):
        t_rows = np.flatnonzero(pb.topic_of == t)
        f = st.final[t_rows]
        fixed = pb.fixed[t_rows]
        lead0 = f[:, 0]
        fx = fixed & (lead0 >= 0) & eligible[np.maximum(lead0, 0)]
        used = np.bincount(lead0[fx], minlength=B)
        live = t_rows[~fixed & ((f >= 0) & eligible[np.maximum(f, 0)]).any(axis=1)]
        counts = broker_counts(st.final, B)
        P = len(st.final) * max(1, st.final.shape[1])
        per_move = (4 * P + 1) * (len(live) + 1)
        tails, heads, costs, slot_of = [], [], [], []
        for i, r in enumerate(live.tolist()):
            row = st.final[r]
            for b in row[(row >= 0)].tolist():
                if eligible[b]:
                    tails.append(i)
                    heads.append(b)
                    costs.append(0)
                    slot_of.append(-1)
            slots = np.flatnonzero((row >= 0) & eligible[np.maximum(row, 0)])
            for b in e_idx.tolist():
                if b in row:
                    continue
                ok = [sl for sl in slots.tolist()
                      if rack_ok(pb, row[None, :], np.array([sl]), np.array([b]), req[r:r + 1])[0]]
                if ok:
                    sl = max(ok, key=lambda x, row=row: (counts[row[x]], -x))  # from the fullest broker
                    tails.append(i)
                    heads.append(b)
                    # fewest moves first; among those, moves from full to empty brokers (they count toward
                    # the balance later anyway)
                    costs.append(per_move + int(counts[b] - counts[row[sl]]) + 2 * P)
                    slot_of.append(sl)
        g = FlowGraph()
        snk = g.node()
        pn = g.nodes(len(live))
        bn = g.nodes(B)
        g.set_supply(pn, 1)
        g.set_supply(snk, -len(live))
        arcs = g.arcs(pn[np.array(tails, np.int64)], bn[np.array(heads, np.int64)], 1, np.array(costs, np.int64))
        over = g.arcs(pn, snk, 1, per_move * (len(live) + 2))
        g.arcs(bn, snk, np.maximum(0, st.cap[t] - used), 0)
        flows, _ = g.solve_min_cost("topic leader repair")
        if flows[over].any():
            failed.extend(live[flows[over] > 0].tolist())
            continue
        for k in np.flatnonzero(flows[arcs] > 0).tolist():
            if slot_of[k] < 0:
                continue
            r = int(live[tails[k]])
            size = max(0, int(pb.sizes[r]))
            if st.moves + 1 > budget_m or st.bytes + size > budget_b:
                failed.append(r)
                continue
            apply_move(pb, st, r, slot_of[k], heads[k])
            made += 1
    return made, failed
