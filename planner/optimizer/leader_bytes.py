"""Leader load: where sizes are known, level the bytes each broker leads (docs/PLAN.md "Leader load").

A leader serves every produce and fetch of its partition, so bytes led is the load that follows leadership.
It comes after the replica balance and the preferred-leader spread and never at their cost: this step runs
on the finished leader order and only *swaps* leadership between two partitions of the same topic, p led by
a (with a replica on b) and q led by b (with a replica on a), so that
- no replica moves (placement, replica balance, rack coverage: unchanged);
- every broker leads as many partitions as before, and every topic's leaders per broker are unchanged
  (leader spread and topic bounds: unchanged);
- the number of partitions whose preferred leader changes does not grow (a swap is taken only when it does
  not add a change), and only partitions the leader scope lets the plan reorder take part.
Each swap moves (size(p) - size(q)) of led bytes from the broker leading the most bytes to the one leading
the least; swaps repeat while the spread of bytes led shrinks.
"""

from __future__ import annotations

import numpy as np

from planner.optimizer.problem import Problem


def level_bytes_led(pb: Problem, ordered: np.ndarray, eligible: np.ndarray, active: np.ndarray,
                    max_swaps: int | None = None, budget: int | None = None) -> tuple[np.ndarray, int]:
    """(the leader order with bytes led levelled, swaps made). `active`: rows the plan may reorder; `budget`:
    preferred-leader changes the swaps may add (None: any; a swap that adds none is always preferred)."""
    if not pb.sizes_known or not ordered.shape[1] or not active.any():
        return ordered, 0
    B = pb.num_brokers
    ordered = ordered.copy()
    size = np.maximum(pb.sizes, 0).astype(np.int64)
    lead_all = ordered[:, 0].astype(np.int64)
    led = np.bincount(lead_all[lead_all >= 0], weights=size[lead_all >= 0], minlength=B).astype(np.int64)
    rows = np.flatnonzero(active & (lead_all >= 0))
    sub = ordered[rows]                      # the rows that may take part, kept in step with `ordered`
    lead = lead_all[rows]
    orig = pb.replicas[rows, 0].astype(np.int64)
    e_idx = np.flatnonzero(eligible)
    if len(e_idx) < 2 or not len(rows):
        return ordered, 0
    limit = max_swaps if max_swaps is not None else 2 * len(e_idx) + 50
    swaps = 0
    # positions (in `rows`) led by each broker, ascending, kept in step with `lead` (a pass over every row per
    # broker pair cost ~25 ms at 1M partitions, for up to 9 pairs a swap)
    o = np.argsort(lead, kind="stable")
    cut = np.searchsorted(lead[o], np.arange(B + 1))
    by_lead = [o[cut[k]:cut[k + 1]] for k in range(B)]
    while swaps < limit:
        order = e_idx[np.argsort(led[e_idx], kind="stable")]
        found = None
        for a in order[::-1][:3].tolist():          # the heaviest brokers against the lightest
            for b in order[:3].tolist():
                if led[a] <= led[b]:
                    continue
                gap = int(led[a] - led[b])
                led_a, led_b = by_lead[a], by_lead[b]
                ip = led_a[(sub[led_a] == b).any(axis=1)]
                iq = led_b[(sub[led_b] == a).any(axis=1)]
                best = _best_pair(pb, rows, ip, iq, size, gap, orig, a, b, budget)
                if best is not None:
                    found = (a, b, *best)
                    break
            if found:
                break
        if found is None:
            break
        a, b, ip, iq, added = found
        if budget is not None:
            budget -= added
        for i, to in ((ip, b), (iq, a)):
            _lead_with(sub, i, to)
            ordered[rows[i]] = sub[i]
            frm = int(lead[i])
            by_lead[frm] = by_lead[frm][by_lead[frm] != i]
            by_lead[to] = np.insert(by_lead[to], np.searchsorted(by_lead[to], i), i)
            lead[i] = to
        d = int(size[rows[ip]] - size[rows[iq]])
        led[a] -= d
        led[b] += d
        swaps += 1
    return ordered, swaps


def _best_pair(pb: Problem, rows: np.ndarray, ip: np.ndarray, iq: np.ndarray, size_all: np.ndarray, gap: int,
               orig: np.ndarray, a: int, b: int, budget: int | None) -> tuple[int, int, int] | None:
    """(p, q, changes added): positions (in `rows`) of the same-topic pair (p led by a, q led by b) whose size
    difference lies in (0, gap), preferring pairs that add no preferred-leader change, then the difference
    closest to gap / 2."""
    if not len(ip) or not len(iq):
        return None
    # a swap adds no change when [b != o_p] - [a != o_p] + [a != o_q] - [b != o_q] <= 0
    cost_p = (b != orig[ip]).astype(np.int64) - (a != orig[ip]).astype(np.int64)
    cost_q = (a != orig[iq]).astype(np.int64) - (b != orig[iq]).astype(np.int64)
    topic = pb.topic_of[rows].astype(np.int64)
    size = size_all[rows]
    rows_p, rows_q = ip, iq
    best: tuple[int, int, int, int, int] | None = None    # (adds a change, |2 diff - gap|, p, q, added)
    for cq, cp in ((x, y) for x in (-1, 0, 1) for y in (-1, 0, 1)):
        added = cp + cq
        if budget is not None and added > budget:
            continue
        sel_q = rows_q[cost_q == cq]
        sel_p = rows_p[cost_p == cp]
        if not len(sel_q) or not len(sel_p):
            continue
        tq = topic[sel_q]
        key_q = tq * (1 << 42) + size[sel_q]
        o = np.argsort(key_q, kind="stable")
        key_q, sel_q = key_q[o], sel_q[o]
        tp = topic[sel_p]
        want = tp * (1 << 42) + np.maximum(size[sel_p] - gap // 2, 0)   # q's size closest to size_p - gap/2
        pos = np.searchsorted(key_q, want)
        for shift in (0, -1):
            j = np.clip(pos + shift, 0, len(key_q) - 1)
            same = (key_q[j] >> 42) == tp
            diff = size[sel_p] - size[sel_q[j]]
            good = same & (diff > 0) & (diff < gap)
            if not good.any():
                continue
            score = np.abs(2 * diff - gap)
            k = int(np.argmin(np.where(good, score, np.iinfo(np.int64).max)))
            cand = (int(added > 0), int(score[k]), int(sel_p[k]), int(sel_q[j[k]]), added)
            if best is None or cand < best:
                best = cand
    return None if best is None else (best[2], best[3], best[4])


def _lead_with(ordered: np.ndarray, row: int, broker: int) -> None:
    """Put `broker` first in the row, the others keeping their order."""
    r = ordered[row]
    ordered[row] = np.concatenate([[broker], r[r != broker]])
