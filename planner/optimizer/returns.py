"""Return placement: bring drained brokers back into service, moving replicas only onto them (as Strimzi's
rebalance in add-brokers mode does: every move has a returning broker as its destination).

Two stages. A returning broker never takes more than its disk limit allows (planner/optimizer/capacity.py:
max_disk_usage x its capacity, where known), and only brokers that may hold replicas (registered, not in
maintenance) give replicas to it.

1. Undo. For each move of the drain's plan that took a returning broker's replica away, and where the cluster
   still matches it (the partition's replica set is exactly the drain's target, and the partition is not
   excluded or reassigning), the partition gets its list from before the drain back, in its order, so the
   returning broker also leads again where it led: the drain is undone as far as the cluster allows, whatever
   the level (levelling the cluster is the nightly rebalance's job). A drained broker that is not returning
   keeps the replacement the drain gave it. Not taken back: a list that would now span fewer racks than
   min(RF, racks), or whose replacement broker is in maintenance now.
2. Balance, up to the returning brokers' share: floor..ceil of the mean replica count over the brokers that
   may hold replicas, the returning ones included. Each returning broker still below the floor takes replicas
   from the sources that hold the most, one at a time (partitions it does not hold, whose rack coverage stays
   at min(RF, racks), round-robin over topics), never taking a source below the floor; then, while a source
   holds more than the ceil, from that source up to the ceil.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from planner.optimizer import capacity
from planner.optimizer.checks import popcount, required_racks
from planner.optimizer.mcf import band
from planner.optimizer.problem import Problem, rack_masks
from planner.optimizer.state import rack_ok

DrainMove = tuple[str, int, Sequence[int], Sequence[int]]   # topic, partition, from ids, to ids


@dataclass
class ReturnInfo:
    goal: dict[int, tuple[int, int]]    # returning broker id -> (floor, ceil) of its share, in replicas
    lower_bound_moves: int              # replicas that must move for every returning broker to reach the floor
    drain_moves: int = 0                # moves of the drain's plan that took a returning broker's replica
    reversed: int = 0                   # of those, partitions given their list from before the drain
    stale: int = 0                      # of those, partitions the cluster no longer matches (moved since)
    held_back: int = 0                  # matching, but not reversed: the list from before the drain would now
    #                                     span too few racks, overfill a disk, or take from a broker in maintenance
    balanced: int = 0                   # replicas moved onto a returning broker from the fullest sources
    undo_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    warnings: list[str] = field(default_factory=list)


def undo_targets(pb: Problem, returning: np.ndarray, moves: Iterable[DrainMove]
                 ) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(rows, their pre-drain lists as broker indices (-1 padded), relevant drain moves, stale ones)."""
    ret_ids = {int(b) for b in pb.broker_ids[returning].tolist()}
    topic_index = {n: i for i, n in enumerate(pb.topic_names)}
    pos = {int(b): i for i, b in enumerate(pb.broker_ids.tolist())}
    keys = (pb.topic_of.astype(np.int64) << 32) | pb.partition.astype(np.int64)
    may_hold = pb.receivers(np.zeros(pb.num_brokers, bool))
    fixed = pb.fixed   # a property computed over every partition: once, not per move
    rows: list[int] = []
    targets: list[list[int]] = []
    relevant = stale = 0
    for topic, part, frm, to in moves:
        frm, to = [int(b) for b in frm], [int(b) for b in to]
        if not any(b in ret_ids and b not in to for b in frm):
            continue   # the drain took no returning broker's replica here
        relevant += 1
        t = topic_index.get(topic)
        i = int(np.searchsorted(keys, (t << 32) | int(part))) if t is not None else len(keys)
        if i >= len(keys) or keys[i] != ((t << 32) | int(part)) or fixed[i]:
            stale += 1
            continue
        cur = [int(pb.broker_ids[x]) for x in pb.replicas[i].tolist() if x >= 0]
        if sorted(cur) != sorted(to):
            stale += 1
            continue
        subst = iter([b for b in to if b not in frm])
        target = [b if (b in cur or b in ret_ids) else next(subst, -1) for b in frm]
        idx = [pos.get(b, -1) for b in target]
        if len(set(target)) != len(target) or min(idx, default=0) < 0 or len(target) != len(cur) \
                or not all(may_hold[j] or returning[j] for j in idx):
            stale += 1
            continue
        rows.append(i)
        targets.append(idx)
    width = pb.replicas.shape[1]
    out = np.full((len(rows), width), -1, dtype=np.int32)
    for k, idx in enumerate(targets):
        out[k, :len(idx)] = idx
    return np.array(rows, dtype=np.int64), out, relevant, stale


def _round_robin(pb: Problem, rows: np.ndarray) -> np.ndarray:
    """`rows` ordered partition 0 of every topic, then partition 1, ...: a topic's replicas spread out."""
    return rows[np.lexsort((pb.topic_of[rows], pb.partition[rows]))]


def place_return(pb: Problem, returning: np.ndarray, undo: Iterable[DrainMove] = ()
                 ) -> tuple[np.ndarray, ReturnInfo]:
    """The final replica matrix (leader order not yet chosen; undo rows in their pre-drain order) and what was
    done. `pb` must let the returning brokers receive (their maintenance lifted: make_plan does it)."""
    B = pb.num_brokers
    final = pb.replicas.copy()
    eligible = pb.receivers(np.zeros(B, bool))
    sources = eligible & ~returning
    valid = final >= 0
    counts = np.bincount(final[valid], minlength=B).astype(np.int64)
    lo, hi = band(int(counts[eligible].sum()), int(eligible.sum()))
    ret_idx = np.flatnonzero(returning)
    # disk (planner/optimizer/capacity.py): a returning broker takes no replica its limit has no room for
    lim = capacity.limits(pb)
    room = np.where(lim >= 0, lim - np.maximum(pb.disk_used_bytes, 0), np.iinfo(np.int64).max).astype(np.int64)
    cost = np.maximum(pb.sizes, 0)
    info = ReturnInfo({int(pb.broker_ids[r]): (lo, hi) for r in ret_idx},
                      int(np.maximum(0, lo - counts[ret_idx]).sum()))

    # 1. undo (a pre-drain list that would now span fewer racks than required is not taken back)
    req = required_racks(pb, eligible)
    bits = pb.rack_bits()
    rows, targets, info.drain_moves, info.stale = undo_targets(pb, returning, undo)
    seq = np.lexsort((pb.topic_of[rows], pb.partition[rows])) if len(rows) else np.zeros(0, np.int64)
    done: list[int] = []
    for k in seq.tolist():   # round-robin over topics
        i = int(rows[k])
        cur, tgt = final[i], targets[k]
        gains = [b for b in tgt.tolist() if b >= 0 and b not in cur]
        losses = [b for b in cur.tolist() if b >= 0 and b not in tgt]
        racks_ok = int(popcount(rack_masks(tgt[None, :], bits))[0]) >= req[i]
        if racks_ok and all(returning[g] and room[g] >= cost[i] for g in gains) and all(sources[x] for x in losses):
            final[i] = tgt
            counts[gains] += 1
            counts[losses] -= 1
            room[gains] -= cost[i]
            done.append(i)
        else:
            info.held_back += 1
    info.reversed = len(done)
    info.undo_rows = np.array(sorted(done), dtype=np.int64)
    undone = np.zeros(len(final), bool)
    undone[info.undo_rows] = True

    # 2. balance
    fixed = pb.fixed
    cands: dict[tuple[int, int], list[int]] = {}

    def candidates(s: int, r: int) -> list[int]:
        key = (s, r)
        if key not in cands:
            has_s = (final == s).any(axis=1)
            ok = has_s & ~(final == r).any(axis=1) & ~fixed & ~undone
            rr = np.flatnonzero(ok)
            slot = np.argmax(final[rr] == s, axis=1) if len(rr) else np.zeros(0, np.int64)
            good = rack_ok(pb, final[rr], slot, np.full(len(rr), r, np.int32), req[rr]) if len(rr) else rr.astype(bool)
            cands[key] = _round_robin(pb, rr[good]).tolist()[::-1]   # popped from the end
        return cands[key]

    def take(s: int, r: int) -> bool:
        lst = candidates(s, r)
        while lst:
            i = lst.pop()
            row = final[i]
            if undone[i] or not (row == s).any() or (row == r).any() or cost[i] > room[r]:
                continue
            j = int(np.argmax(row == s))
            if not rack_ok(pb, final[i:i + 1], np.array([j]), np.array([r], np.int32), req[i:i + 1])[0]:
                continue
            final[i, j] = r
            counts[s] -= 1
            counts[r] += 1
            room[r] -= cost[i]
            info.balanced += 1
            return True
        return False

    def fill(r: int, level: int, floor: int) -> None:
        exhausted: set[int] = set()
        while counts[r] < level:
            open_src = [s for s in np.flatnonzero(sources & (counts > floor)).tolist() if s not in exhausted]
            if not open_src:
                return
            s = max(open_src, key=lambda x: (counts[x], -x))
            if not take(s, r):
                exhausted.add(s)

    for r in ret_idx.tolist():
        fill(r, lo, lo)
    while True:   # sources still above the ceil give to the emptiest returning broker below it
        over = sources & (counts > hi)
        below = [r for r in ret_idx.tolist() if counts[r] < hi]
        if not over.any() or not below:
            break
        before = int(counts[ret_idx].sum())
        for r in sorted(below, key=lambda x: (counts[x], x)):
            fill(r, int(counts[r]) + 1, hi)
        if int(counts[ret_idx].sum()) == before:
            break
    for r in ret_idx.tolist():
        if counts[r] < lo:
            info.warnings.append(
                f"returning broker {int(pb.broker_ids[r])} reaches {int(counts[r])} replicas, below its share "
                f"{lo}..{hi}: no more partitions can move onto it (it holds them already, their rack coverage "
                "would drop, its disk limit has no room for them, or they are excluded or reassigning)")
    return final, info
