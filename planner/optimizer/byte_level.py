"""Byte levelling of a rebalance (sizes known): best-fit moves from the fullest to the emptiest broker until
every broker is within 5 % of the mean bytes. Sizes per broker are sorted once, so each move is a binary
search plus a few checks; moves are large and few, and never overshoot the gap by more than the tolerance,
so the bytes moved stay near the sum of the brokers' excesses. A replica this plan already moves may move
again (to a third broker or back) at no cost in moves or bytes.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from planner.optimizer.checks import popcount, required_racks
from planner.optimizer.problem import Problem, rack_masks
from planner.optimizer.state import State, apply_move, bytes_per_broker, is_new


def _levels(pb: Problem, st: State, eligible: np.ndarray, tolerance: float):
    """What both levellers start from: the eligible brokers, the sizes (unknown as 0), the bytes per broker,
    their mean and the tolerance in bytes, the racks each partition needs and the brokers' rack bits; None
    when fewer than two brokers can take part."""
    e_idx = np.flatnonzero(eligible)
    if len(e_idx) < 2:
        return None
    sizes = np.maximum(pb.sizes, 0)
    load = bytes_per_broker(st.final, sizes, pb.num_brokers)
    mean = load[e_idx].mean()
    return e_idx, sizes, load, mean, tolerance * mean, required_racks(pb, eligible), pb.rack_bits()


def level_bytes(pb: Problem, st: State, eligible: np.ndarray, budget_m: int, budget_b: int,
                  tolerance: float = 0.05) -> int:
    """Best-fit moves from the fullest to the emptiest broker until all are within `tolerance` of the mean.

    A replica this plan already moves may move again (to a third broker, or back): that changes where it
    lands, not how many replicas or bytes the plan moves, so fixing the receivers among themselves is free.
    """
    lv = _levels(pb, st, eligible, tolerance)
    if lv is None:
        return 0
    B = pb.num_brokers
    e_idx, sizes, load, mean, tol, req, bits = lv
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
        if _levelled(dev, tol):
            break
        done = False
        for ai, bi, a, b in _pairs(dev, e_idx, tol, blocked):
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
        if not done:
            break
        steps += 1
    return steps


def _levelled(dev: np.ndarray, tol: float) -> bool:
    """Every broker within the tolerance of the mean (`dev`: each eligible broker's load minus the mean)."""
    return bool(dev.max() <= tol and -dev.min() <= tol)


def _pairs(dev: np.ndarray, e_idx: np.ndarray, tol: float, blocked: set[tuple[int, int]], wide: bool = False
           ) -> Iterator[tuple[int, int, int, int]]:
    """The pairs a levelling step tries, the 8 heaviest brokers by the 8 lightest, heaviest first: (ai, bi, a, b)
    with a above the mean and b below it, not blocked (read as the pairs are tried), and not both within the
    tolerance (moving between those only reshuffles). ai / bi index `dev`, a / b are broker positions.
    `wide`: then each of the 8 heaviest, outside the tolerance, with every lighter broker, lightest first (`swap_bytes`: a
    heavy broker whose replicas may only go to a few brokers, as those of a rack every partition of three or
    more replicas needs, passes bytes through a broker of its own rack near the mean)."""
    over = np.argsort(-dev, kind="stable")
    under = np.argsort(dev, kind="stable")
    for ai in over[:8].tolist():
        for bi in under[:8].tolist():
            a, b = int(e_idx[ai]), int(e_idx[bi])
            if (a, b) in blocked or dev[ai] <= 0 or dev[bi] >= 0 or (dev[ai] <= tol and -dev[bi] <= tol):
                continue
            yield ai, bi, a, b
    if not wide:
        return
    for ai in over[:8].tolist():
        for bi in under.tolist():
            a, b = int(e_idx[ai]), int(e_idx[bi])
            if dev[bi] >= dev[ai] or (dev[ai] <= tol and -dev[bi] <= tol) or (a, b) in blocked:
                continue
            if (ai in over[:8] and bi in under[:8] and dev[ai] > 0 and dev[bi] < 0):
                continue          # tried above
            yield ai, bi, a, b


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


def swap_bytes(pb: Problem, st: State, eligible: np.ndarray, budget_m: int, budget_b: int,
               tolerance: float = 0.05, max_steps: int = 100_000) -> int:
    """Bring every broker within `tolerance` of the mean bytes without changing any broker's replica count:
    pairs of moves, a larger replica from a heavy broker to a light one and a smaller one back. `level_bytes`
    moves single replicas, so where the count levels and the byte levels pull apart (new, empty brokers
    filled with many small replicas) the two alternate without meeting; a swap keeps the counts where the
    count rounds left them. Per pair of brokers (the 8 heaviest x the 8 lightest) the swap whose difference
    in size is closest to the smaller of the two gaps and below their difference (so the sum of squared
    deviations falls and swaps cannot cycle); a planned leader moves only where its topic has room. Returns
    the swaps made."""
    lv = _levels(pb, st, eligible, tolerance)
    if lv is None:
        return 0
    e_idx, sizes, load, mean, tol, req, bits = lv
    swaps = 0
    blocked: set[tuple[int, int]] = set()
    pools = _pools(pb, st)
    for _ in range(max_steps):
        dev = load[e_idx] - mean
        if _levelled(dev, tol):
            break
        done = False
        for ai, bi, a, b in _pairs(dev, e_idx, tol, blocked, wide=True):
            # the bytes that bring the heavier within the tolerance, or, between two on one side of the mean,
            # that even them out; never the difference or more (the sum of squared deviations falls)
            gap = min(dev[ai], -dev[bi]) if dev[ai] > 0 > dev[bi] else (dev[ai] - dev[bi]) / 2
            pick = _best_swap(pb, st, a, b, gap, 0.999 * (dev[ai] - dev[bi]), sizes, req,
                              bits, budget_m, budget_b, pools, eligible)
            if pick is not None and not _lead_aside(pb, st, pick, a, b, eligible):
                pick = None
            if pick is None:
                blocked.add((a, b))
                continue
            (rx, sx), (ry, sy) = pick
            d = int(sizes[rx]) - int(sizes[ry])
            apply_move(pb, st, rx, sx, b)
            apply_move(pb, st, ry, sy, a)
            load[a] -= d
            load[b] += d
            blocked = {(x, y) for x, y in blocked if x not in (a, b) and y not in (a, b)}
            swaps += 1
            done = True
            break
        if not done:
            break
    return swaps


def _pools(pb: Problem, st: State) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, slots, start): the replicas of partitions that may change, by broker (broker a's are
    start[a]:start[a + 1]), for `_movers` (a replica that moves later is skipped where it is no more)."""
    ri, si = np.nonzero((st.final >= 0) & ~pb.fixed[:, None])
    owner = st.final[ri, si]
    o = np.argsort(owner, kind="stable")
    return ri[o], si[o], np.searchsorted(owner[o], np.arange(pb.num_brokers + 1))


def _other_leader(pb: Problem, st: State, rows: np.ndarray, a: int, eligible: np.ndarray) -> np.ndarray:
    """(n,) per row (a partition planned to be led from `a`): another of its eligible brokers whose topic has
    leader room there (below the cap), which can take over its planned leadership; -1 where none can."""
    B = pb.num_brokers
    f = st.final[rows]
    t = pb.topic_of[rows].astype(np.int64)
    cand = np.where((f >= 0) & (f != a) & eligible[np.maximum(f, 0)], f, -1)
    keys = t[:, None] * B + np.maximum(cand, 0)
    used = np.array([st.lcount.get(k, 0) for k in keys.ravel().tolist()], np.int64).reshape(keys.shape)
    ok = (cand >= 0) & (used < st.cap[t][:, None])
    j = np.argmax(ok, axis=1)
    return np.where(ok.any(axis=1), cand[np.arange(len(rows)), j], -1)


def _lead_aside(pb: Problem, st: State, pick: tuple, a: int, b: int, eligible: np.ndarray) -> bool:
    """Before a swap (x from a to b, y from b to a): a planned leader whose topic has no room on the other
    broker hands its planned leadership to another of its brokers (`_other_leader`) first. False (and nothing
    changed) when one of them cannot."""
    B = pb.num_brokers
    done: list[tuple[int, int, int]] = []
    for (r, _s), frm, to in ((pick[0], a, b), (pick[1], b, a)):
        t = int(pb.topic_of[r])
        if st.lead[r] != frm or st.lcount.get(t * B + to, 0) < st.cap[t]:
            continue
        c = int(_other_leader(pb, st, np.array([r]), frm, eligible)[0])
        if c < 0:
            for r0, frm0, c0 in done:       # put back what the first one changed
                t0 = int(pb.topic_of[r0])
                st.lcount[t0 * B + c0] -= 1
                st.lcount[t0 * B + frm0] = st.lcount.get(t0 * B + frm0, 0) + 1
                st.lead[r0] = frm0
            return False
        st.lcount[t * B + frm] -= 1
        st.lcount[t * B + c] = st.lcount.get(t * B + c, 0) + 1
        st.lead[r] = c
        done.append((r, frm, c))
    return True


def _movers(pb: Problem, st: State, a: int, b: int, req: np.ndarray, bits: np.ndarray,
            pools: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
            eligible: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(rows, slots) of the replicas on `a` that may move to `b`: b does not hold the partition, its racks
    stay covered, the partition is not excluded or fixed, and a planned leader's topic has room on b (its
    cap, not counting what the swap's other move frees) or, with `eligible`, another of its brokers can take
    over its planned leadership (`_other_leader`). With `pools` (`_pools`), among those listed there."""
    if pools is None:
        ri, si = np.nonzero((st.final == a) & ~pb.fixed[:, None])
    else:
        ri, si = pools[0][pools[2][a]:pools[2][a + 1]], pools[1][pools[2][a]:pools[2][a + 1]]
        here = st.final[ri, si] == a
        ri, si = ri[here], si[here]
    rows = st.final[ri]
    ok = ~(rows == b).any(axis=1)
    lead = np.flatnonzero(st.lead[ri] == a)
    if len(lead):
        t = pb.topic_of[ri[lead]].astype(np.int64)
        used = np.array([st.lcount.get(k, 0) for k in (t * pb.num_brokers + b).tolist()], dtype=np.int64)
        full = lead[used >= st.cap[t]]
        if eligible is not None and len(full):
            full = full[_other_leader(pb, st, ri[full], a, eligible) < 0]
        ok[full] = False
    if pb.rack_aware and len(ri):
        others = rows.copy()
        others[np.arange(len(ri)), si] = -1
        ok &= popcount(rack_masks(others, bits) | bits[b]) >= req[ri]
    return ri[ok], si[ok]


def _best_swap(pb: Problem, st: State, a: int, b: int, gap: float, limit: float, sizes: np.ndarray,
               req: np.ndarray, bits: np.ndarray, budget_m: int, budget_b: int,
               pools: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None, eligible: np.ndarray | None = None
               ) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """((row, slot) on a, (row, slot) on b) whose size difference is closest to `gap`, in (0, limit], within
    the move and byte budgets; None when there is none."""
    xr, xs = _movers(pb, st, a, b, req, bits, pools, eligible)
    yr, ys = _movers(pb, st, b, a, req, bits, pools, eligible)
    if not len(xr) or not len(yr):
        return None
    zx, zy = sizes[xr], sizes[yr]
    o = np.argsort(zy, kind="stable")
    yr, ys, zy = yr[o], ys[o], zy[o]
    j = np.searchsorted(zy, zx - gap)
    best = None
    for jj in (np.minimum(j, len(zy) - 1), np.maximum(j - 1, 0)):
        d = zx - zy[jj]
        ok = (d > 0) & (d <= limit)
        new = is_new(pb, xr, xs, np.full(len(xr), b)).astype(np.int64) + is_new(pb, yr[jj], ys[jj],
                                                                               np.full(len(xr), a))
        moved = (~is_new(pb, xr, xs, np.full(len(xr), a))).astype(np.int64) + \
            ~is_new(pb, yr[jj], ys[jj], np.full(len(xr), b))
        grow = new - (2 - moved)    # replicas new to their partitions after the swap, less those before it
        ok &= st.moves + np.maximum(grow, 0) <= budget_m
        ok &= st.bytes + np.maximum(grow, 0) * np.maximum(zx, zy[jj]) <= budget_b
        if ok.any():
            k = int(np.flatnonzero(ok)[np.argmin(np.abs(d[ok] - gap))])
            if best is None or abs(d[k] - gap) < best[0]:
                best = (abs(d[k] - gap), (int(xr[k]), int(xs[k])), (int(yr[jj][k]), int(ys[jj][k])))
    return None if best is None else (best[1], best[2])


def mend_room(pb: Problem, st: State, eligible: np.ndarray, budget_m: int, budget_b: int,
              tolerance: float = 0.05, max_swaps: int = 10_000) -> int:
    """Give every broker room to lead its share again after byte levelling, keeping counts and (within the
    tolerance) bytes: a broker's leader room is the partitions it could lead within the topics' caps, the sum
    over topics of min(its replicas of the topic, cap) (room.room_per_broker); byte moves ignore it, so a
    broker may end holding many replicas of few topics and the leader step cannot level the leader counts
    (leader spread 6-10 on 2 of 12 generated bytes clusters). Per broker short of ceil(partitions / brokers):
    swaps of followers with another broker, one of a topic it lacks in, one of a topic it holds more of than
    the cap out, closest in size, both brokers' bytes staying within the tolerance (or no further out than
    the furthest broker now). Returns the swaps made."""
    B = pb.num_brokers
    e_idx = np.flatnonzero(eligible)
    E = len(e_idx)
    if E < 2:
        return 0
    T = len(pb.topic_names)
    sizes = np.maximum(pb.sizes, 0)
    load = bytes_per_broker(st.final, sizes, B)
    mean = load[e_idx].mean()
    tol = max(tolerance * mean, float(np.abs(load[e_idx] - mean).max()))
    cap = np.where(pb.excluded_topic, 0, st.cap).astype(np.int64)
    valid = st.final >= 0
    rtb = np.bincount((np.broadcast_to(pb.topic_of[:, None].astype(np.int64), st.final.shape)[valid] * B
                       + st.final[valid]), minlength=T * B).reshape(T, B)
    room = np.minimum(rtb, cap[:, None]).sum(axis=0)
    n_lead = int((valid & eligible[np.maximum(st.final, 0)]).any(axis=1).sum())
    goal = -(-n_lead // E)
    goal += max(2, -(-goal // 50))     # and a margin, as the count rounds keep (rebalance._room_goal)
    req = required_racks(pb, eligible)
    bits = pb.rack_bits()
    swaps = 0
    if (room[e_idx] >= goal).all():
        return 0
    pools = _pools(pb, st)
    for b in e_idx[np.argsort(room[e_idx], kind="stable")].tolist():
        partners = [int(a) for a in e_idx[np.argsort(-room[e_idx], kind="stable")].tolist() if a != b]
        for a in partners:
            if room[b] >= goal or swaps >= max_swaps:
                break
            if room[a] <= goal:
                continue
            # the candidates once per pair (a swap changes neither side's other candidates: a partition on
            # both brokers is no candidate), then swaps while b is short and a has room to spare
            xr, xs = _movers(pb, st, a, b, req, bits, pools)
            yr, ys = _movers(pb, st, b, a, req, bits, pools)
            kx, ky = st.lead[xr] != a, st.lead[yr] != b
            xr, xs, yr, ys = xr[kx], xs[kx], yr[ky], ys[ky]
            o = np.argsort(sizes[yr], kind="stable")
            yr, ys = yr[o], ys[o]
            ux = np.zeros(len(xr), bool)
            uy = np.zeros(len(yr), bool)
            while room[b] < goal and room[a] > goal and swaps < max_swaps:
                tx, ty = pb.topic_of[xr], pb.topic_of[yr]
                cx = np.flatnonzero(~ux & (rtb[tx, b] < cap[tx]) & ((rtb[tx, a] > cap[tx]) | (room[a] - 1 >= goal)))
                cy = np.flatnonzero(~uy & (rtb[ty, b] > cap[ty]))
                if not len(cx) or not len(cy):
                    break
                zx, zy = sizes[xr[cx]], sizes[yr[cy]]
                j = np.searchsorted(zy, zx)
                best = None
                for jj in (np.minimum(j, len(zy) - 1), np.maximum(j - 1, 0)):
                    d = zx - zy[jj]                        # bytes a gives b
                    ok = (np.abs(load[a] - d - mean) <= tol) & (np.abs(load[b] + d - mean) <= tol)
                    if ok.any():
                        k = int(np.flatnonzero(ok)[np.argmin(np.abs(d[ok]))])
                        if best is None or abs(d[k]) < best[0]:
                            best = (abs(d[k]), int(cx[k]), int(cy[jj[k]]))
                if best is None:
                    break
                _, k, m = best
                rx, sx, ry, sy = int(xr[k]), int(xs[k]), int(yr[m]), int(ys[m])
                grow = int(is_new(pb, rx, sx, b)) + int(is_new(pb, ry, sy, a)) - \
                    int(is_new(pb, rx, sx, a)) - int(is_new(pb, ry, sy, b))
                if st.moves + max(0, grow) > budget_m or \
                        st.bytes + max(0, grow) * int(max(sizes[rx], sizes[ry])) > budget_b:
                    break
                t1, t2 = int(pb.topic_of[rx]), int(pb.topic_of[ry])
                apply_move(pb, st, rx, sx, b)
                apply_move(pb, st, ry, sy, a)
                ux[k] = uy[m] = True
                d = int(sizes[rx]) - int(sizes[ry])
                load[a] -= d
                load[b] += d
                for t, src, dst in ((t1, a, b), (t2, b, a)):
                    room[src] -= int(rtb[t, src] <= cap[t])
                    room[dst] += int(rtb[t, dst] < cap[t])
                    rtb[t, src] -= 1
                    rtb[t, dst] += 1
                swaps += 1
    return swaps
