"""The fewest new replicas that bring every eligible broker into a band of counts, per partition: a bound that
is exact for the rack rules, and its flow a placement that meets it.

reach.py's class flow groups partitions by rule and relaxes distinctness inside a rack, so its transport bound
can be well below what any placement needs (issue 25: 736 where the fewest placements need 898, on an uneven
5-rack cluster whose smallest rack must take a replica of every partition). Here every movable partition has
its own nodes, so nothing is relaxed:

  partition p (supply k, its replicas on eligible brokers)
    -> (p, rack q) directly, capacity 1, for each rack outside S (the racks its staying replicas cover)
    -> dup_p, capacity k - m, with m = required_racks - |S| (checks.required_racks)  -> (p, q), any rack
  (p, q) -> (topic, b) for each broker b of rack q, capacity 1 (distinct brokers), cost 0 where p held b
           before the plan, else 1; (topic, b) -> room_b up to the topic's leader cap, (topic, b) -> b beyond
           it (a tie-break cost: below); room_b -> b
  broker -> sink within [low, high] less the replicas that stay on it (excluded / fixed partitions).

With `room`, room_b -> b carries at least the leader level each broker must lead for leader spread <= 1
(floor(partitions / brokers), less what it leads of partitions that stay): the flow through room_b is at most
the broker's leader room (room.room_per_broker: of each topic the partitions it holds, up to the cap), so the
placements are exactly those that also leave every broker room to lead its share. No leader order of spread
<= 1 within the caps exists on a placement without that room, so the fewest new replicas of this flow are a
lower bound for the whole goal too (bounds.Bound.leader_room), at least the one without it (issue 25: 2 of 36
generated clusters kept leader spread 3, a broker 2 short of room, where a placement with room needed no more
moves than the plan made).

With `floors` as well, each (topic, broker) node passes into room_b at least the partitions of the topic that
broker must lead whatever the others lead: the topic's partitions less the room every other broker has within
the cap (`_lead_floors`; a topic of 1,514 partitions with cap 152 on 10 brokers leaves 146 to each). A leader
order within the caps leads at least that many there, so the flow still admits every placement that keeps
today's leader results possible, and refuses more of those that do not (issue 25: on a generated 10-broker
cluster whose one-broker rack holds the band's top, the room flow allowed a maximum of 5,286 where no placement
with at most 5,286 per broker leaves each topic's floors: 5,287 is the proven best there).

At least m units take the direct arcs, one per rack, so p spans at least m new racks; and any placement that
keeps the rule routes that way (one replica per rack it covers outside S directly, the rest through dup_p):
the flows are exactly the placements. A single-replica partition is led where it is, so it reaches a broker
through a (topic, broker) node capped at the room its topic's leader cap leaves there (as rebalance._singles).
Leader caps of partitions with more replicas are not in the flow (the rebalance repairs them after, and
bounds.py's joint bound counts what they add).

The flow has about partitions x (eligible brokers + 2 racks) arcs, so it is used up to `ARC_LIMIT`.
"""

from __future__ import annotations

import numpy as np
from ortools.graph.python import min_cost_flow

from planner.optimizer.checks import popcount, required_racks
from planner.optimizer.problem import Problem, rack_masks

ARC_LIMIT = 250_000   # ~0.3 s of flow on 2 cores (superlinear: 0.7 s at 310k arcs, 5.7 s at 1.2M); 200k left a
# generated 19-broker, 8,132-partition cluster (203k arcs) to the count rounds: 1,412 moves for a bound of 1,398
# (1.0100x), here 1,399


def arcs_needed(pb: Problem, eligible: np.ndarray) -> int:
    """About how many arcs the flow has (the rows that may change x (eligible brokers + 2 x racks))."""
    n_q = len(pb.rack_names) + 1 if pb.rack_aware else 0
    return int((~pb.fixed).sum()) * (int(eligible.sum()) + 2 * n_q + 1)


def _lead_floors(pb: Problem, rows: np.ndarray, fr: np.ndarray, on_r: np.ndarray, topics: np.ndarray,
                 room: np.ndarray, apart: np.ndarray) -> np.ndarray:
    """(topics, E): partitions of each topic every broker must lead whatever the others lead: the topic's
    partitions in the flow that hold only eligible brokers (their leader is one of them), less the room all other
    brokers have within the cap; 0 for topics whose cap is not enforced and for those in `apart` (topics with
    single-replica and other partitions: they reach a broker through two nodes, so neither carries the floor)."""
    if not len(topics):
        return np.zeros_like(room)
    whole = on_r.sum(axis=1) == (fr >= 0).sum(axis=1)
    tp = np.searchsorted(topics, pb.topic_of[rows[whole]])
    ok = (tp < len(topics)) & (topics[np.minimum(tp, len(topics) - 1)] == pb.topic_of[rows[whole]])
    n_t = np.bincount(tp[ok], minlength=len(topics))
    low = n_t[:, None] - (room.sum(axis=1, keepdims=True) - room)
    low[pb.excluded_topic[topics] | np.isin(topics, apart)] = 0
    return np.clip(low, 0, room)


def _member(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a[:, :, None] == b[:, None, :]).any(axis=2)


def misses_floors(pb: Problem, eligible: np.ndarray, final: np.ndarray, caps: np.ndarray) -> bool:
    """Some eligible broker holds fewer partitions of a topic than it must lead whatever the others lead
    (`_lead_floors`, with every partition of the topic counted and every broker's room the cap): then no leader
    order within the caps exists on `final`."""
    e_idx = np.flatnonzero(eligible)
    E = len(e_idx)
    valid = final >= 0
    whole = (valid & eligible[np.maximum(final, 0)]).sum(axis=1) == valid.sum(axis=1)
    t_of = pb.topic_of.astype(np.int64)
    n_t = np.bincount(t_of[whole & valid.any(axis=1)], minlength=len(caps))
    need = n_t - (E - 1) * caps
    need[pb.excluded_topic] = 0
    hot = np.flatnonzero(need > 0)
    if not len(hot) or not E:
        return False
    pos = np.full(pb.num_brokers, -1, np.int64)
    pos[e_idx] = np.arange(E)
    r, s = np.nonzero(valid & np.isin(t_of, hot)[:, None])
    b = pos[final[r, s]]
    ok = b >= 0
    held = np.zeros((len(caps), E), np.int64)
    np.add.at(held, (t_of[r[ok]], b[ok]), 1)
    return bool((held[hot] < need[hot][:, None]).any())


def least_placement(pb: Problem, eligible: np.ndarray, low: int, high: int, caps: np.ndarray,
                    current: np.ndarray | None = None, keep: np.ndarray | None = None, room: bool = False,
                    floors: bool = False, hold: bool = False) -> tuple[int, np.ndarray] | None:
    """(the fewest new replicas, a placement with that many) bringing every eligible broker into [low, high]
    under the rack rules, with single-replica partitions within `caps` (per topic, less the fixed partitions'
    leaders there); None when no placement does. New means not in the partition's replicas before the plan
    (pb.replicas); `current` (default those) is the placement the slots are taken from: a replica that stays
    keeps its slot, a new one takes the slot of one that left. `keep` (P,), a broker per partition (-1 none):
    among the placements with the fewest new replicas, the flow keeps as many partitions on theirs as it can
    (the rebalance passes its planned leaders, which are within the topics' caps). `room`: every eligible
    broker also keeps room to lead its share (module); `floors`: and of each topic what it must lead whatever
    the others lead (module). `hold`: the planned leaders of topics with floors cost a new replica to leave
    their broker (the count returned is then the placement's new replicas, not the flow's minimum)."""
    B = pb.num_brokers
    e_idx = np.flatnonzero(eligible)
    E = len(e_idx)
    f = pb.replicas if current is None else current
    valid = f >= 0
    on_e = valid & eligible[np.maximum(f, 0)]
    rows = np.flatnonzero(~pb.fixed & on_e.any(axis=1))
    stays = np.ones(len(f), bool)
    stays[rows] = False
    fixed_b = np.bincount(f[on_e & stays[:, None]], minlength=B)[e_idx]
    if E == 0 or not len(rows):
        return None
    pos = np.full(B, -1, np.int64)
    pos[e_idx] = np.arange(E)
    fr, on_r = f[rows], on_e[rows]
    k = on_r.sum(axis=1).astype(np.int64)
    n = len(rows)
    rack_aware = pb.rack_aware and len(pb.rack_names) > 0
    nr = len(pb.rack_names) if rack_aware else 0
    q_of = np.where(pb.rack_of[e_idx] >= 0, pb.rack_of[e_idx], nr) if rack_aware else np.zeros(E, np.int64)
    n_q = nr + 1 if rack_aware else 1
    if rack_aware:
        bits = pb.rack_bits()
        stay = rack_masks(np.where(on_r, -1, fr), bits)
        m = np.clip(required_racks(pb, eligible)[rows] - popcount(stay), 0, k)
        outside = ((stay[:, None] >> np.arange(nr, dtype=np.uint64)[None, :]) & np.uint64(1)) == 0
        outside &= np.bincount(q_of, minlength=n_q)[None, :nr] > 0
    else:
        m = np.zeros(n, np.int64)
        outside = np.zeros((n, 0), bool)
    single = (pb.rf[rows] == 1) & ~pb.excluded_topic[pb.topic_of[rows]]
    # nodes: partitions, dup, (partition, rack), brokers, (topic, broker) for single-replica topics, sink
    pn = np.arange(n)
    dn = n + pn
    pq0 = 2 * n
    bn = pq0 + n * n_q + np.arange(E)
    s_topics = np.unique(pb.topic_of[rows[single]]).astype(np.int64)
    m_topics = np.unique(pb.topic_of[rows[~single]]).astype(np.int64)
    rn = int(bn[-1]) + 1 + np.arange(E)           # room_b
    tb0 = int(rn[-1]) + 1
    mb0 = tb0 + len(s_topics) * E
    sink = mb0 + len(m_topics) * E
    tails, heads, caps_a, costs = [], [], [], []

    def add(t, h, c, w=0):
        t, h = np.asarray(t, np.int64), np.asarray(h, np.int64)
        size = max(t.size, h.size)
        tails.append(np.broadcast_to(t, (size,)))
        heads.append(np.broadcast_to(h, (size,)))
        caps_a.append(np.broadcast_to(np.asarray(c, np.int64), (size,)))
        costs.append(np.broadcast_to(np.asarray(w, np.int64), (size,)))

    if rack_aware:
        ii, qq = np.nonzero(outside)
        add(pn[ii], pq0 + ii * n_q + qq, 1)
    add(pn, dn, k - m)
    ii, qq = np.repeat(pn, n_q), np.tile(np.arange(n_q), n)
    add(dn[ii], pq0 + ii * n_q + qq, k[ii])
    # (partition, rack) -> broker: cost W where the partition gains a replica it did not have before the plan,
    # plus 1 where it leaves the broker of `keep` (W above the sum of those, so the fewest new replicas win)
    here = np.zeros((n, E), bool)
    ri, si = np.nonzero(on_r)
    here[ri, pos[fr[ri, si]]] = True
    was = np.zeros((n, E), bool)
    o = pb.replicas[rows]
    oi, oj = np.nonzero((o >= 0) & eligible[np.maximum(o, 0)])
    was[oi, pos[o[oi, oj]]] = True
    W = 2 * int(k.sum()) + n + 1
    cost_pb = W * (~was).astype(np.int64)
    if keep is not None:
        kb = keep[rows]
        has = (kb >= 0) & eligible[np.maximum(kb, 0)]
        w_keep = np.ones(n, np.int64)
        if hold:
            # a planned leader of a topic with floors (`_lead_floors`) leaves its broker at the cost of a new
            # replica: the placement then keeps the witness's leaders where the caps leave little choice
            n_rt = np.bincount(pb.topic_of[rows], minlength=len(caps))
            hot = (n_rt - (E - 1) * caps > 0) & ~pb.excluded_topic
            w_keep[hot[pb.topic_of[rows]]] = W
        cost_pb[has] += w_keep[has][:, None]
        cost_pb[np.flatnonzero(has), pos[kb[has]]] -= w_keep[has]
    multi = np.flatnonzero(~single)
    ii, jj = np.repeat(multi, E), np.tile(np.arange(E), len(multi))
    # through a (topic, broker) node: replicas of a topic on a broker beyond its leader cap cost 1 each, so that
    # every broker keeps room to lead its share (a broker holding many partitions of few topics cannot)
    m_pos = np.searchsorted(m_topics, pb.topic_of[rows[multi]])
    add(pq0 + ii * n_q + q_of[jj], mb0 + np.repeat(m_pos, E) * E + jj, 1, cost_pb[ii, jj])
    mt, mj = np.repeat(np.arange(len(m_topics)), E), np.tile(np.arange(E), len(m_topics))
    # leaders of partitions that stay (fixed) are where they are: they take their topic's cap there and
    # count toward the broker's level
    lead0 = f[:, 0]
    fx = pb.fixed & (lead0 >= 0) & eligible[np.maximum(lead0, 0)]
    fixed_lead = np.bincount(pos[lead0[fx]], minlength=E)
    fx &= ~pb.excluded_topic[pb.topic_of]
    ft = pb.topic_of[fx].astype(np.int64)
    used_m = np.zeros((len(m_topics), E), np.int64)
    hit = np.isin(ft, m_topics)
    np.add.at(used_m, (np.searchsorted(m_topics, ft[hit]), pos[lead0[fx][hit]]), 1)
    room_m = np.maximum(0, caps[m_topics][:, None] - used_m)
    low_m = _lead_floors(pb, rows, fr, on_r, m_topics, room_m, s_topics) if floors else np.zeros_like(room_m)
    add(mb0 + mt * E + mj, rn[mj], room_m[mt, mj] - low_m[mt, mj], 0)
    add(mb0 + mt * E + mj, bn[mj], int(k.sum()), 1)
    if len(s_topics):
        one = np.flatnonzero(single)
        t_pos = np.searchsorted(s_topics, pb.topic_of[rows[one]])
        ii, jj = np.repeat(one, E), np.tile(np.arange(E), len(one))
        tj = np.repeat(t_pos, E)
        add(pq0 + ii * n_q + q_of[jj], tb0 + tj * E + jj, 1, cost_pb[ii, jj])
        # room: the topic's cap less the leaders of its fixed partitions on the broker
        used = np.zeros((len(s_topics), E), np.int64)
        hit = np.isin(ft, s_topics)
        np.add.at(used, (np.searchsorted(s_topics, ft[hit]), pos[lead0[fx][hit]]), 1)
        room_s = np.maximum(0, caps[s_topics][:, None] - used)
        low_s = _lead_floors(pb, rows, fr, on_r, s_topics, room_s, m_topics) if floors else np.zeros_like(room_s)
        tt, bb = np.nonzero(room_s >= 0)
        add(tb0 + tt * E + bb, rn[bb], room_s[tt, bb] - low_s[tt, bb])
    # room_b -> b: with `room`, at least the level less the leaders b keeps of partitions that stay
    n_lead = int(on_e.any(axis=1).sum())
    need = np.maximum(0, n_lead // E - fixed_lead) if room else np.zeros(E, np.int64)
    add(rn, bn, np.maximum(0, int(k.sum()) - need))
    lo_b = np.maximum(0, low - fixed_b)
    hi_b = high - fixed_b
    if (hi_b < lo_b).any():
        return None
    add(bn, sink, hi_b - lo_b)
    tails_a, heads_a = np.concatenate(tails), np.concatenate(heads)
    cap_a, cost_a = np.concatenate(caps_a), np.concatenate(costs)
    sup = np.zeros(sink + 1, np.int64)
    sup[pn] = k
    np.subtract.at(sup, bn, lo_b)       # each broker's lower bound sent to the sink first
    sup[rn] -= need                     # and each room_b -> b lower bound
    sup[bn] += need
    if floors:                          # and each (topic, b) -> room_b lower bound
        mt_, mj_ = np.nonzero(low_m)
        np.subtract.at(sup, mb0 + mt_ * E + mj_, low_m[mt_, mj_])
        np.add.at(sup, rn[mj_], low_m[mt_, mj_])
        if len(s_topics):
            st_, sj_ = np.nonzero(low_s)
            np.subtract.at(sup, tb0 + st_ * E + sj_, low_s[st_, sj_])
            np.add.at(sup, rn[sj_], low_s[st_, sj_])
    sup[sink] = -int(k.sum()) + int(lo_b.sum())
    mcf = min_cost_flow.SimpleMinCostFlow()
    mcf.add_arcs_with_capacity_and_unit_cost(tails_a.astype(np.int32), heads_a.astype(np.int32), cap_a, cost_a)
    mcf.set_nodes_supplies(np.arange(sink + 1, dtype=np.int32), sup)
    if mcf.solve() != mcf.OPTIMAL:
        return None
    flows = np.asarray(mcf.flows(np.arange(len(tails_a), dtype=np.int32)), dtype=np.int64)
    # the brokers each partition ends on: (partition, rack) -> broker or -> (topic, broker) arcs with flow
    to_b = (heads_a >= tb0) & (heads_a < sink) & (tails_a >= pq0) & (tails_a < bn[0]) & (flows > 0)
    p_of = (tails_a[to_b] - pq0) // n_q
    b_pos = (heads_a[to_b] - tb0) % E
    order = np.lexsort((b_pos, p_of))
    p_of, b_new = p_of[order], e_idx[b_pos[order]]
    out = f.copy()
    sub = out[rows]
    keep = np.zeros_like(on_r)
    got = np.zeros((n, E), bool)
    got[p_of, pos[b_new]] = True
    keep[ri, si] = got[ri, pos[fr[ri, si]]]
    free = on_r & ~keep                           # slots whose replica leaves
    fresh = ~here[p_of, pos[b_new]]               # brokers the partition gains
    p_new, b_add = p_of[fresh], b_new[fresh]
    fi, fs = np.nonzero(free)                     # row-major: per partition in slot order, as p_new is sorted
    assert len(fi) == len(p_new) and (fi == p_new).all()
    sub[fi, fs] = b_add
    out[rows] = sub
    if hold:      # the cost counts kept leaders too: count the new replicas
        return int(((out[rows] >= 0) & ~_member(out[rows], pb.replicas[rows])).sum()), out
    return int(mcf.optimal_cost()) // W, out
