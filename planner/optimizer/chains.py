"""Chains of moves for what the broker-level rounds leave outside the band: augmenting paths over brokers.

R1 (rebalance.py) plans single moves of replica classes; where every replica a broker above the band could
give is blocked (racks, a partition already there, a planned leader whose topic is full on the receiver: a
single-replica partition is always its own leader), it stops. A chain still works: broker a gives a replica to
x, x gives another to y, ..., the last gives to a broker below the band; every broker in between keeps its
count. `augment` finds the shortest such chain by a breadth-first search over brokers (an arc a -> x exists
when some replica on a may move to x under every rule), applies it, and repeats while a broker is outside the
band and a chain exists. Each chain costs its length in moves for one unit of level, so the rounds do the
bulk and this only the remainder.
"""

from __future__ import annotations

import numpy as np

from planner.optimizer.checks import popcount, required_racks
from planner.optimizer.problem import rack_masks
from planner.optimizer.state import State, apply_move, broker_counts, is_new, level_band, movable, rack_ok


def _lead_counts(st: State) -> tuple[np.ndarray, np.ndarray]:
    """st.lcount as sorted (keys, values) arrays, for looking many keys up at once."""
    if not st.lcount:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    keys = np.fromiter(st.lcount.keys(), dtype=np.int64, count=len(st.lcount))
    vals = np.fromiter(st.lcount.values(), dtype=np.int64, count=len(st.lcount))
    o = np.argsort(keys)
    return keys[o], vals[o]


def _lookup(lk: tuple[np.ndarray, np.ndarray], keys: np.ndarray) -> np.ndarray:
    k, v = lk
    if not len(k):
        return np.zeros(keys.shape, np.int64)
    i = np.minimum(np.searchsorted(k, keys), len(k) - 1)
    return np.where(k[i] == keys, v[i], 0)


def _targets(pb, st: State, eligible: np.ndarray, x: int, req: np.ndarray, budget_b: int,
             leaders_free: bool = False, lk: tuple[np.ndarray, np.ndarray] | None = None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(receivers, row, slot): for each broker some replica on `x` may move to, one such replica. (All
    receivers at once: (replicas on x) x (eligible brokers) arrays; `lk` is `_lead_counts(st)`.)"""
    B = pb.num_brokers
    mov = movable(pb, st, eligible)
    ri, si = np.nonzero(mov & (st.final == x))
    e_idx = np.flatnonzero(eligible)
    e_idx = e_idx[e_idx != x]
    if not len(ri) or not len(e_idx):
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    if lk is None:
        lk = _lead_counts(st)
    n, E = len(ri), len(e_idx)
    rows = st.final[ri]
    sizes = np.maximum(pb.sizes[ri], 0)
    fresh = ~is_new(pb, ri, si, np.full(n, x))            # the replica has not moved yet in this plan
    lead = st.lead[ri] == x
    t_all = pb.topic_of[ri].astype(np.int64)
    ok = ~(rows[:, :, None] == e_idx[None, None, :]).any(axis=1)                         # (n, E)
    if pb.rack_aware:
        others = rows.copy()
        others[np.arange(n), si] = -1
        om = rack_masks(others, pb.rack_bits())
        ok &= popcount((om[:, None] | pb.rack_bits()[e_idx][None, :]).ravel()).reshape(n, E) >= req[ri][:, None]
    if lead.any() and not leaders_free:
        # a planned leader's replica may leave when its topic has room where it goes, or on another of the
        # partition's brokers (which then leads: `_hand_over`)
        li = np.flatnonzero(lead)
        z = rows[li]
        okz = (z >= 0) & (z != x) & eligible[np.maximum(z, 0)]
        free = _lookup(lk, t_all[li][:, None] * B + np.maximum(z, 0)) < st.cap[t_all[li]][:, None]
        other = (okz & free).any(axis=1)
        full = _lookup(lk, t_all[li][:, None] * B + e_idx[None, :]) >= st.cap[t_all[li]][:, None]
        ok[li] &= ~(full & ~other[:, None])
    over = fresh & (st.bytes + sizes > budget_b)
    if over.any():
        was = (pb.replicas[ri][:, :, None] == e_idx[None, None, :]).any(axis=1)
        ok &= ~(over[:, None] & ~was)
    # per receiver the first allowed replica: one this plan already moves first (moving it on costs nothing),
    # then followers, smallest
    order = np.lexsort((sizes, lead, fresh))
    oks = ok[order]
    first = np.argmax(oks, axis=0)
    hit = oks[first, np.arange(E)]
    k = order[first[hit]]
    return e_idx[hit].astype(np.int64), ri[k].astype(np.int64), si[k].astype(np.int64)


def _hand_over(pb, st: State, eligible: np.ndarray, r: int, s: int) -> bool:
    """Make another broker of partition r, with room in its topic, its planned leader (before the replica in
    slot s leaves); False when none has room."""
    B = pb.num_brokers
    t = int(pb.topic_of[r])
    x = int(st.final[r, s])
    for z in st.final[r].tolist():
        if z >= 0 and z != x and eligible[z] and st.lcount.get(t * B + z, 0) < st.cap[t]:
            st.lcount[t * B + x] -= 1
            st.lcount[t * B + z] = st.lcount.get(t * B + z, 0) + 1
            st.lead[r] = z
            return True
    return False


def augment(pb, st: State, eligible: np.ndarray, budget_m: int, budget_b: int, max_chains: int = 2000,
            max_depth: int = 6, leaders_free: bool = False) -> int:
    """Chains (module) while a broker is outside the band; returns the moves made. With `leaders_free` a
    planned leader's replica may move even where its topic has no room: the caller then re-plans the leaders
    over the whole placement (a maximum witness finds room by moving other leaders aside) and repairs what
    it cannot serve."""
    B = pb.num_brokers
    lo, hi = level_band(st, eligible)
    req = required_racks(pb, eligible)
    made = 0
    for _ in range(max_chains):
        counts = broker_counts(st.final, B)
        e = np.flatnonzero(eligible)
        over = e[counts[e] > hi]
        under = e[counts[e] < lo]
        if not len(over) and not len(under):
            break
        # sources: above the band (or at its top when only brokers below remain), sinks the other way
        src = over if len(over) else e[counts[e] == hi]
        dst = under if len(under) else e[counts[e] == lo]
        if not len(src) or not len(dst) or lo == hi and not (len(over) and len(under)):
            break
        sink = np.zeros(B, bool)
        sink[dst] = True
        prev: dict[int, tuple[int, int, int]] = {int(a): (-1, -1, -1) for a in src.tolist()}
        frontier = [int(a) for a in src[np.argsort(-counts[src], kind="stable")].tolist()]
        found = -1
        lk = _lead_counts(st)
        for _depth in range(max_depth):
            nxt = []
            for x in frontier:
                bs, rs, ss = _targets(pb, st, eligible, x, req, budget_b, leaders_free, lk)
                for b, r, s in zip(bs.tolist(), rs.tolist(), ss.tolist(), strict=True):
                    if b in prev:
                        continue
                    prev[b] = (x, r, s)
                    if sink[b]:
                        found = b
                        break
                    nxt.append(b)
                if found >= 0:
                    break
            if found >= 0 or not nxt:
                break
            frontier = nxt
        if found < 0:
            break
        path = []
        b = found
        while prev[b][0] >= 0:
            x, r, s = prev[b]
            path.append((r, s, b))
            b = x
        if st.moves + len(path) > budget_m:
            break
        for r, s, b in reversed(path):   # from the source on: each move stays valid, rows differ or are re-checked
            row = st.final[r]
            if (row == b).any() or not rack_ok(pb, row[None, :], np.array([s]), np.array([b]), req[r:r + 1])[0]:
                return made
            t = int(pb.topic_of[r])
            if st.lead[r] == row[s] and st.lcount.get(t * B + b, 0) >= st.cap[t] and not leaders_free \
                    and not _hand_over(pb, st, eligible, r, s):
                return made
            apply_move(pb, st, r, s, b)
            made += 1
    return made
