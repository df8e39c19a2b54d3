"""Byte levelling of a rebalance (sizes known): best-fit moves from the fullest to the emptiest broker until
every broker is within 5 % of the mean bytes. Sizes per broker are sorted once, so each move is a binary
search plus a few checks; moves are large and few, and never overshoot the gap by more than the tolerance,
so the bytes moved stay near the sum of the brokers' excesses. A replica this plan already moves may move
again (to a third broker or back) at no cost in moves or bytes.
"""

from __future__ import annotations

import numpy as np

from planner.optimizer.checks import popcount, required_racks
from planner.optimizer.problem import Problem, rack_masks
from planner.optimizer.state import State, apply_move, bytes_per_broker, is_new


def level_bytes(pb: Problem, st: State, eligible: np.ndarray, budget_m: int, budget_b: int,
                  tolerance: float = 0.05) -> int:
    """Best-fit moves from the fullest to the emptiest broker until all are within `tolerance` of the mean.

    A replica this plan already moves may move again (to a third broker, or back): that changes where it
    lands, not how many replicas or bytes the plan moves, so fixing the receivers among themselves is free.
    """
    B = pb.num_brokers
    e_idx = np.flatnonzero(eligible)
    if len(e_idx) < 2:
        return 0
    sizes = np.maximum(pb.sizes, 0)
    load = bytes_per_broker(st.final, sizes, B)
    mean = load[e_idx].mean()
    tol = tolerance * mean
    req = required_racks(pb, eligible)
    bits = pb.rack_bits()
    f = st.final
    mov = (f >= 0) & eligible[np.maximum(f, 0)] & ~pb.fixed[:, None]
    ri, si = np.nonzero(mov)
    owner = f[ri, si].astype(np.int64)
    sz = sizes[ri]
    # per broker: its movable replicas sorted by size (entries that left are skipped when met); a replica
    # that arrives is added to the broker's `extra` list so it can move again
    order = np.lexsort((si, ri, sz, owner))
    ri, si, owner, sz = ri[order], si[order], owner[order], sz[order]
    start = np.searchsorted(owner, np.arange(B + 1))
    pools = {int(b): (ri[start[b]:start[b + 1]], si[start[b]:start[b + 1]], sz[start[b]:start[b + 1]])
             for b in e_idx.tolist()}
    extra: dict[int, list[tuple[int, int, int]]] = {int(b): [] for b in e_idx.tolist()}
    steps = 0
    blocked: set[tuple[int, int]] = set()
    while True:
        dev = load[e_idx] - mean
        over = np.argsort(-dev, kind="stable")
        under = np.argsort(dev, kind="stable")
        if dev[over[0]] <= tol and -dev[under[0]] <= tol:
            break
        done = False
        for ai in over[:8].tolist():
            a = int(e_idx[ai])
            for bi in under[:8].tolist():
                b = int(e_idx[bi])
                if a == b or (a, b) in blocked or dev[ai] <= 0 or dev[bi] >= 0:
                    continue
                if dev[ai] <= tol and -dev[bi] <= tol:
                    continue  # both within the tolerance: moving between them only reshuffles
                # aim at closing the gap of whichever side is further out; the other side may overshoot
                # the mean by up to most of the tolerance
                gap = min(dev[ai] + 0.8 * tol, -dev[bi]) if dev[ai] <= tol else \
                    min(dev[ai], -dev[bi] + 0.8 * tol) if -dev[bi] <= tol else min(dev[ai], -dev[bi])
                # a move of s bytes lowers the sum of squared deviations iff s < dev[a] - dev[b]: every move
                # does, so the levelling cannot cycle (a replica moved before moves again for free)
                limit = min(min(dev[ai], -dev[bi]) + tol, 0.999 * (dev[ai] - dev[bi]))
                pick = _best_fit(pb, st, a, b, gap, limit, pools[a], extra[a], req, bits, budget_m, budget_b)
                if pick is None:
                    blocked.add((a, b))
                    continue
                r, s, size = pick
                apply_move(pb, st, r, s, b)
                extra[b].append((r, s, size))
                load[a] -= size
                load[b] += size
                # pairs without a or b keep their gaps: they stay blocked
                blocked = {(x, y) for x, y in blocked if x not in (a, b) and y not in (a, b)}
                done = True
                break
            if done:
                break
        if not done:
            break
        steps += 1
    return steps


def _best_fit(pb: Problem, st: State, a: int, b: int, gap: float, limit: float, pool, extra_a, req, bits,
              budget_m: int, budget_b: int, window: int = 512) -> tuple[int, int, int] | None:
    """(row, slot, size) of the replica on `a` whose size is closest to `gap` (never above `limit`) that may
    move to `b` within the budgets; replicas this plan already moves are preferred on ties (they are free)."""
    p_ri, p_si, p_sz = pool
    p = int(np.searchsorted(p_sz, gap, side="right"))
    idx = np.arange(max(0, p - window), min(len(p_sz), p + 64))
    c_r = p_ri[idx]
    c_s = p_si[idx]
    c_z = p_sz[idx]
    if extra_a:
        ex = np.array(extra_a, dtype=np.int64)
        c_r = np.concatenate([c_r, ex[:, 0]])
        c_s = np.concatenate([c_s, ex[:, 1]])
        c_z = np.concatenate([c_z, ex[:, 2]])
    here = (st.final[c_r, c_s] == a) & (c_z > 0) & (c_z <= limit)
    c_r, c_s, c_z = c_r[here], c_s[here], c_z[here]
    fresh = ~is_new(pb, c_r, c_s, st.final[c_r, c_s])
    order = np.lexsort((c_s, c_r, fresh, np.abs(c_z - gap)))
    c_r, c_s, c_z, fresh = c_r[order], c_s[order], c_z[order], fresh[order]
    # every check at once over the window (a replica listed twice, in the pool and as arrived, counts once)
    R = st.final.shape[1]
    _, first = np.unique(c_r.astype(np.int64) * R + c_s, return_index=True)
    ok = np.zeros(len(c_r), dtype=bool)
    ok[first] = True
    rows = st.final[c_r]
    ok &= ~(rows == b).any(axis=1)
    new_move = fresh & is_new(pb, c_r, c_s, b)
    ok &= ~(new_move & ((st.moves + 1 > budget_m) | (st.bytes + c_z > budget_b)))
    if pb.rack_aware:
        others = rows.copy()
        others[np.arange(len(c_r)), c_s] = -1
        ok &= popcount(rack_masks(others, bits) | bits[b]) >= req[c_r]
    lead = ok & (st.lead[c_r] == a)
    if lead.any():
        B = pb.num_brokers
        t = pb.topic_of[c_r[lead]].astype(np.int64)
        used = np.array([st.lcount.get(k, 0) for k in (t * B + b).tolist()], dtype=np.int64)
        ok[np.flatnonzero(lead)[used >= st.cap[t]]] = False
    hit = np.flatnonzero(ok)
    if not len(hit):
        return None
    k = int(hit[0])
    return int(c_r[k]), int(c_s[k]), int(c_z[k])
