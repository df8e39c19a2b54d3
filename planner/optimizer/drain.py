"""Drain placement: where each replica on a leaving broker goes, all leaving brokers planned jointly.

Only the replicas on drained brokers move (the lower bound), so the only freedom is the destination. One
min-cost flow decides all of them at once:

    partition --(cap 1)--> broker --(convex level arcs)--> sink

A partition with m replicas to move supplies m units; unit-capacity arcs to the brokers it may use (alive,
not drained, not already holding it) keep its replicas distinct. Rack coverage: if it must gain `need` new
racks, `need` of its units start at a "cover" node whose arcs reach each new rack once
(cover -> (partition, rack) [cap 1] -> brokers of that rack), so those units land on distinct new racks.
Convex costs on each broker's final count make the result as level as the constraints allow (the water
level), which is "within one of each other whenever the starting counts allow it".
"""

from __future__ import annotations

import numpy as np

from planner.optimizer import capacity
from planner.optimizer.checks import Infeasible, group_by_topic, popcount, required_racks
from planner.optimizer.mcf import FlowGraph, band, level_arcs
from planner.optimizer.problem import Problem, rack_masks
from planner.text import count, size


def check_drain_request(pb: Problem, drained: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Refuse what no plan can do; returns (rows that move, on-drained mask of those rows)."""
    valid = pb.replicas >= 0
    on_d = valid & drained[np.maximum(pb.replicas, 0)]
    moved = on_d.any(axis=1)
    stuck = moved & pb.excluded_topic[pb.topic_of]
    if stuck.any():
        topics = sorted({pb.topic_names[t] for t in pb.topic_of[stuck].tolist()})
        raise Infeasible("excluded-untouched",
                         f"excluded topic(s) {', '.join(topics)} hold replicas on drained brokers, and "
                         f"excluded topics are never moved: {pb.names(np.flatnonzero(stuck))}")
    if pb.unknown_state is not None:
        stuck = moved & pb.unknown_state
        if stuck.any():
            raise Infeasible("unknown-state", "partitions whose state is unknown (malformed state znode, see the "
                             "snapshot's warnings) hold replicas on drained brokers; a plan cannot judge their "
                             "leaders and ISR: fix the znode and take the snapshot again: "
                             f"{pb.names(np.flatnonzero(stuck))}")
    stuck = moved & pb.in_flight
    if stuck.any():
        raise Infeasible("in-flight", "partitions being reassigned now hold replicas on drained brokers; wait "
                         f"for that reassignment to finish: {pb.names(np.flatnonzero(stuck))}")
    rows = np.flatnonzero(moved)
    eligible = pb.receivers(drained)
    n_e = int(eligible.sum())
    reps = pb.replicas[rows]
    kept = np.where(valid[rows] & ~on_d[rows], reps, -1)
    kept_dead = ((kept >= 0) & ~eligible[np.maximum(kept, 0)]).sum(axis=1)
    rf = valid[rows].sum(axis=1)
    short = n_e + kept_dead < rf
    if short.any():
        t_name, t_rows = group_by_topic(pb, rows[short])[0]
        r = rf[short][0]
        raise Infeasible("replication-factor",
                         f"topic {t_name}: RF {r} but only {count(n_e + int(kept_dead[short][0]), 'eligible broker')} "
                         f"remain (registered, not drained) for partitions {pb.names(t_rows)}")
    # Rack coverage never makes a drain infeasible: a partition must gain at most
    # required - (racks its kept replicas span) new racks, required <= racks with eligible brokers, and every
    # such rack it does not span yet has an eligible broker that does not hold it.
    return rows, on_d[rows]


def _need(pb: Problem, rows: np.ndarray, kept: np.ndarray, eligible: np.ndarray) -> np.ndarray:
    if not pb.rack_aware:
        return np.zeros(len(rows), dtype=np.int32)
    req = required_racks(pb, eligible)[rows]
    return np.maximum(0, req - popcount(rack_masks(kept, pb.rack_bits()))).astype(np.int32)


def place_drain(pb: Problem, drained: np.ndarray) -> np.ndarray:
    """The final replica matrix of a drain (same slots; a moved replica takes its old slot)."""
    rows, on_d = check_drain_request(pb, drained)
    check_capacity_request(pb, drained)
    final = pb.replicas.copy()
    if not len(rows):
        return final
    eligible = pb.receivers(drained)
    e_idx = np.flatnonzero(eligible).astype(np.int32)
    n_e = len(e_idx)
    reps = pb.replicas[rows]
    valid = reps >= 0
    kept = np.where(valid & ~on_d, reps, -1)
    m = on_d.sum(axis=1).astype(np.int64)
    need = _need(pb, rows, kept, eligible).astype(np.int64)
    bits = pb.rack_bits()
    kept_mask = rack_masks(kept, bits)

    # allowed[i, j]: row i may put a replica on eligible broker e_idx[j] (it does not keep one there)
    pos_in_e = np.full(pb.num_brokers, -1, dtype=np.int64)
    pos_in_e[e_idx] = np.arange(n_e)
    allowed = np.ones((len(rows), n_e), dtype=bool)
    kpos = np.where(kept >= 0, pos_in_e[np.maximum(kept, 0)], -1)
    ri, ci = np.nonzero(kpos >= 0)
    allowed[ri, kpos[ri, ci]] = False
    e_bits = bits[e_idx]
    # new_rack[i, j]: broker j's rack is one row i does not span yet (only matters where need > 0)
    new_rack = (e_bits[None, :] & ~kept_mask[:, None]) != 0

    counts = np.bincount(pb.replicas[pb.replicas >= 0], minlength=pb.num_brokers).astype(np.int64)
    lo, hi = band(int(counts[e_idx].sum() + m.sum()), n_e)
    span = 16 + int(m.sum() // max(1, min(_rack_sizes(pb, e_idx)))) + 1
    # Rows moving one replica that must land on a new rack can use every eligible broker of those racks (their
    # kept brokers are on other racks), so rows with the same set of new racks are one supply node.
    grouped = (m == 1) & (need == 1)
    e_mask = np.bitwise_or.reduce(e_bits) if n_e else np.uint64(0)
    sig = e_mask & ~kept_mask[grouped]
    gsig, ginv = np.unique(sig, return_inverse=True)
    g_rows = np.flatnonzero(grouped)
    single = ~grouped
    while True:
        g = FlowGraph()
        bnodes = g.nodes(n_e)
        sink = g.node()
        g.set_supply(sink, -int(m.sum()))
        gnodes = g.nodes(len(gsig))
        g.set_supply(gnodes, np.bincount(ginv, minlength=len(gsig)))
        gi, gj = np.nonzero((e_bits[None, :] & gsig[:, None]) != 0)
        a_group = g.arcs(gnodes[gi], bnodes[gj], len(g_rows), 0)

        free = g.nodes(len(rows))
        g.set_supply(free[single], (m - need)[single])
        # free units: any allowed broker, except new-rack brokers of rows that need racks (they go through
        # the (row, rack) nodes so that a broker is reachable by one unit-capacity arc only)
        direct = allowed & ~((need > 0)[:, None] & new_rack) & (single & ((m - need) > 0))[:, None]
        di, dj = np.nonzero(direct)
        arc_sets = [g.arcs(free[di], bnodes[dj], 1, 0)]
        owner = [di]
        brk = [dj]
        nrows = np.flatnonzero(single & (need > 0))
        if len(nrows):
            cover = g.nodes(len(nrows))
            g.set_supply(cover, need[nrows])
            e_rack = pb.rack_of[e_idx]
            for r in sorted(set(e_rack[e_rack >= 0].tolist())):
                bit = np.uint64(1) << np.uint64(r)
                rr = nrows[(kept_mask[nrows] & bit) == 0]
                if not len(rr):
                    continue
                cov_of = np.searchsorted(nrows, rr)
                rnodes = g.nodes(len(rr))
                g.arcs(cover[cov_of], rnodes, 1, 0)
                extra = m[rr] - need[rr]
                has = extra > 0
                g.arcs(free[rr[has]], rnodes[has], extra[has], 0)
                cols = np.flatnonzero(e_rack == r)
                si, sj = np.nonzero(allowed[rr][:, cols])
                arc_sets.append(g.arcs(rnodes[si], bnodes[cols[sj]], 1, 0))
                owner.append(rr[si])
                brk.append(cols[sj])
        _, _, tails, _ = level_arcs(g, bnodes, sink, counts[e_idx], counts[e_idx], lo, hi, 1, span, lose=False)
        flows, _ = g.solve_min_cost("drain placement")
        if not flows[tails].any():
            break
        span *= 4
    used_arcs = np.concatenate(arc_sets)
    hit = flows[used_arcs] > 0
    o_single = np.concatenate(owner)[hit]
    b_single = np.concatenate(brk)[hit]
    # grouped rows: each group's rows (in row order) take the brokers its flow chose (in broker order)
    gf = flows[a_group]
    per = np.repeat(np.arange(len(gi)), gf)
    rank = np.arange(len(per)) - np.repeat(np.cumsum(gf) - gf, gf)  # k-th unit on that broker
    order = np.lexsort((gj[per], rank, gi[per]))  # round-robin over the group's brokers: a topic's
    b_group = gj[per][order]                       # partitions spread instead of filling one broker
    o_group = g_rows[np.argsort(ginv, kind="stable")]
    o = np.concatenate([o_single, o_group])
    b = e_idx[np.concatenate([b_single, b_group])]
    order = np.lexsort((b, o))
    o, b = o[order], b[order]
    # drained slots in (row, slot) order receive the chosen brokers in (row, broker) order
    si, sj = np.nonzero(on_d)
    assert len(si) == len(o) and (si == o).all(), "drain flow did not place every replica"
    final[rows[si], sj] = b
    return fit_capacity(pb, drained, final, rows, on_d)


def check_capacity_request(pb: Problem, drained: np.ndarray) -> None:
    """Refuse a drain no placement can fit on the remaining disks (docs/PLAN.md "Disk capacity"): a kept
    broker already above the limit, or more bytes to move than the kept brokers' room under it."""
    eligible = pb.alive & ~drained
    capacity.check_now(pb, eligible)
    lim = capacity.limits(pb)
    if not (eligible.any() and (lim[eligible] >= 0).all()):
        return   # a receiver of unknown capacity: no bound on the room (the plan warns)
    valid = pb.replicas >= 0
    on_d = (valid & drained[np.maximum(pb.replicas, 0)]).sum(axis=1)
    moving = int((on_d * np.maximum(pb.sizes, 0)).sum())
    room = np.maximum(0, lim - pb.disk_used_bytes)[eligible]
    if moving > int(room.sum()):
        ids = pb.broker_ids[eligible].tolist()
        shown = ", ".join(f"{b}: {size(r)}" for b, r in zip(ids[:10], room[:10].tolist(), strict=True))
        raise Infeasible("disk-capacity",
                         f"disk capacity: the drain of brokers {pb.broker_ids[drained].tolist()} moves "
                         f"{size(moving)}, but the {count(len(ids), 'broker')} that stay have only "
                         f"{size(int(room.sum()))} of room under {100 * pb.max_disk_usage:g} % of their "
                         f"capacity ({shown}{' ...' if len(ids) > 10 else ''})")


def fit_capacity(pb: Problem, drained: np.ndarray, final: np.ndarray, rows: np.ndarray, on_d: np.ndarray
                 ) -> np.ndarray:
    """Move moved-in replicas off brokers the placement takes above their disk limit onto brokers with room.

    The flow levels replica counts; where that overfills a disk, the largest replicas it gave that broker are
    taken back until it fits, then re-placed, largest first, each on the broker with the most room left that
    may hold it (registered, kept, not holding the partition, rack coverage kept, capacity known). Refused
    (Infeasible, naming brokers and bytes) when one fits nowhere."""
    lim = capacity.limits(pb)
    eligible = pb.alive & ~drained
    usage = capacity.usage_after(pb, final)
    over = eligible & (lim >= 0) & (usage > lim)
    if not over.any():
        return final
    si, sj = np.nonzero(on_d)
    r_all, s_all = rows[si], sj
    dest = final[r_all, s_all]
    size_e = np.maximum(pb.sizes[r_all], 0)
    evict: list[int] = []
    for b in np.flatnonzero(over).tolist():
        mine = np.flatnonzero(dest == b)
        mine = mine[np.argsort(-size_e[mine], kind="stable")]
        excess = int(usage[b] - lim[b])
        cum = np.cumsum(size_e[mine])
        k = int(np.searchsorted(cum, excess)) + 1
        evict.extend(mine[:k].tolist())
        usage[b] -= int(cum[min(k, len(cum)) - 1]) if len(cum) else 0
    room = np.where(eligible & (lim >= 0) & ~over, lim - usage, -1).astype(np.int64)
    bits = pb.rack_bits()
    need = required_racks(pb, eligible)
    evict.sort(key=lambda i: (-int(size_e[i]), int(r_all[i]), int(s_all[i])))
    for i in evict:
        r, s, z = int(r_all[i]), int(s_all[i]), int(size_e[i])
        row = final[r].copy()
        ok = room >= z
        ok[row[row >= 0]] = False
        cand = np.flatnonzero(ok)
        if pb.rack_aware and len(cand):
            others = row[(row >= 0) & (np.arange(len(row)) != s)]
            mask = np.bitwise_or.reduce(bits[others]) if len(others) else np.uint64(0)
            spans = popcount(np.bitwise_or(mask, bits[cand]))
            cand = cand[spans >= need[r]]
        if not len(cand):
            still = [capacity.Overfull(int(b), int(usage[b]) + z, int(lim[b]), z) for b in [int(dest[i])]]
            total_room = int(np.maximum(room, 0).sum())
            raise Infeasible("disk-capacity",
                             f"disk capacity: no broker that may hold {pb.names(np.array([r]))} ({size(z)}) has "
                             f"that much room under {100 * pb.max_disk_usage:g} % of its capacity (the kept "
                             f"brokers' room left: {size(total_room)}); placing it as the balance wants: "
                             f"{capacity.describe(pb, still)}")
        best = int(cand[np.argmax(room[cand])])
        final[r, s] = best
        room[best] -= z
    return final


def _rack_sizes(pb: Problem, e_idx: np.ndarray) -> list[int]:
    if not pb.rack_aware:
        return [len(e_idx)]
    r = pb.rack_of[e_idx]
    sizes = np.bincount(r[r >= 0]) if (r >= 0).any() else np.array([len(e_idx)])
    return [int(x) for x in sizes if x > 0] or [len(e_idx)]
