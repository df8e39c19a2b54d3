"""Batches: the order in which a plan is applied.

Batch 0 is leadership only (replica lists reordered, no data copied; apply follows it with a preferred
election). For a drain it also moves leadership off the drained brokers before any data moves: a partition led
from a drained broker gets, for now, its current replicas with a non-drained one first (the final leader if it
already holds a replica, else the first registered in-sync replica). Then data batches: first-fit in size
order (smallest first unless told otherwise), with at most `limit` moves per broker per batch, where a move
counts against every broker it adds a replica to or removes one from.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.optimizer.problem import Problem


@dataclass
class Batch:
    index: int
    kind: str              # "leadership" | "data"
    rows: np.ndarray       # partition rows, in apply order
    replicas: np.ndarray   # (len(rows), R) the lists this batch writes, -1 padded


def changed_sets(original: np.ndarray, final: np.ndarray) -> np.ndarray:
    """Rows whose replica *set* changes (data moves), as opposed to order-only changes."""
    a = np.sort(original, axis=1)
    b = np.sort(final, axis=1)
    return (a != b).any(axis=1)


def make_batches(pb: Problem, final: np.ndarray, drained: np.ndarray, limit: int = 5,
                 order: str = "smallest-first") -> list[Batch]:
    if limit < 1:
        raise ValueError("limit must be at least 1")
    orig = pb.replicas
    data = changed_sets(orig, final)
    leader_only = (orig != final).any(axis=1) & ~data
    batches: list[Batch] = []

    lead_rows = [np.flatnonzero(leader_only)]
    lead_lists = [final[leader_only]]
    if drained.any() and orig.shape[1]:
        eligible = pb.receivers(drained)
        first = orig[:, 0]
        off = data & (first >= 0) & drained[np.maximum(first, 0)]
        rows = np.flatnonzero(off)
        sub = orig[rows]
        ok = (sub >= 0) & eligible[np.maximum(sub, 0)]
        in_isr = _in_isr(pb, rows, sub)
        target = final[rows, 0]
        # preference: the final leader if it already is a replica, then registered in-sync, then registered
        score = np.where(sub == target[:, None], 3, 0) + np.where(ok & in_isr, 2, 0) + np.where(ok, 1, 0)
        score = np.where(ok, score, -1)
        j = np.argmax(score, axis=1)
        has = score[np.arange(len(rows)), j] >= 0
        rows, sub, j = rows[has], sub[has], j[has]
        col = np.arange(sub.shape[1])[None, :]
        key = np.where(col == j[:, None], -1, col)
        lead_rows.append(rows)
        lead_lists.append(np.take_along_axis(sub, np.argsort(key, axis=1, kind="stable"), axis=1))
    lr = np.concatenate(lead_rows)
    if len(lr):
        ll = np.concatenate(lead_lists)
        o = np.argsort(lr, kind="stable")
        batches.append(Batch(0, "leadership", lr[o], ll[o]))

    rows = np.flatnonzero(data)
    if len(rows):
        size = pb.sizes[rows]
        if pb.sizes_known:
            key = size if order == "smallest-first" else -size
            rows = rows[np.lexsort((rows, key))]
        for group in _first_fit(orig[rows], final[rows], limit, pb.num_brokers, _disk(pb, rows, final[rows])):
            r = rows[group]
            batches.append(Batch(len(batches), "data", r, final[r]))
    return batches


def _in_isr(pb: Problem, rows: np.ndarray, sub: np.ndarray) -> np.ndarray:
    if pb.isr is None or not pb.isr.shape[1]:
        return np.ones(sub.shape, dtype=bool)
    isr = pb.isr[rows]
    return ((sub[:, :, None] == isr[:, None, :]) & (sub[:, :, None] >= 0)).any(axis=2)


@dataclass
class _Disk:
    """The disk limit at batch boundaries, for the brokers where order matters ("tight": the bytes the plan
    adds to them, with nothing freed first, would take them above their limit)."""
    tight: np.ndarray        # bool (B,)
    room: np.ndarray         # int64 (B,) limit - usage now
    add: list[list[tuple[int, int]]]    # per move: (broker, bytes) it adds
    free: list[list[tuple[int, int]]]   # per move: (broker, bytes) it frees once its batch completes
    ids: np.ndarray          # broker ids, for messages


def _disk(pb: Problem, rows: np.ndarray, final: np.ndarray) -> _Disk | None:
    from planner.optimizer import capacity

    lim = capacity.limits(pb)
    if not (lim >= 0).any() or not pb.sizes_known:
        return None
    orig = pb.replicas[rows]
    added, _, _ = capacity.changes(pb, orig, final, rows)
    room = np.where(lim >= 0, lim - pb.disk_used_bytes, np.iinfo(np.int64).max // 4)
    tight = (lim >= 0) & (added > room)
    if not tight.any():
        return None
    add_m = (final >= 0) & ~(final[:, :, None] == orig[:, None, :]).any(axis=2)
    rem_m = (orig >= 0) & ~(orig[:, :, None] == final[:, None, :]).any(axis=2)
    own = np.where(pb.replica_sizes[rows] >= 0, pb.replica_sizes[rows], pb.sizes[rows][:, None])
    add = [[(int(b), int(pb.sizes[r])) for b in f[a] if tight[b]] for r, f, a in zip(rows, final, add_m, strict=True)]
    free = [[(int(b), int(w)) for b, w in zip(o[m], ow[m], strict=True) if tight[b]]
            for o, m, ow in zip(orig, rem_m, own, strict=True)]
    return _Disk(tight, room.astype(np.int64), add, free, pb.broker_ids)


def _touched(m: np.ndarray) -> list[list[int]]:
    """Each row's entries >= 0, in order, as a list (the brokers a move adds, then those it removes): one array
    pass per length instead of a numpy call per move (a 1M-partition plan has ~220k moves)."""
    if not len(m):
        return []
    ok = m >= 0
    col = np.arange(m.shape[1])[None, :]
    packed = np.take_along_axis(m, np.argsort(np.where(ok, col, m.shape[1]), axis=1, kind="stable"), axis=1)
    n = ok.sum(axis=1)
    out: list[list[int]] = [[]] * len(m)
    for k in np.unique(n).tolist():
        sel = np.flatnonzero(n == k)
        for i, lst in zip(sel.tolist(), packed[sel, :k].tolist(), strict=True):
            out[i] = lst
    return out


def _first_fit(orig: np.ndarray, final: np.ndarray, limit: int, n_brokers: int, disk: _Disk | None = None
               ) -> list[np.ndarray]:
    """Assign moves (in the given order) to the first batch where every broker they touch has room: at most
    `limit` moves, and, for brokers whose disk is tight, room under the disk limit in that batch and every
    later one (a batch holds its partitions on the old and new brokers; what it frees counts from the next
    batch on). A move that fits no batch yet waits until the moves placed after it free space; moves that
    never fit are refused (Infeasible, naming the brokers)."""
    added = (final >= 0) & ~(final[:, :, None] == orig[:, None, :]).any(axis=2)
    removed = (orig >= 0) & ~(orig[:, :, None] == final[:, None, :]).any(axis=2)
    touched = _touched(np.concatenate([np.where(added, final, -1), np.where(removed, orig, -1)], axis=1))
    load: list[list[int]] = []        # plain lists: this loop runs once per move (numpy scalars cost ~10x)
    first_free = [0] * n_brokers
    assign = np.full(len(touched), -1, dtype=np.int64)
    # disk: net[k][b] = bytes batch k adds minus what earlier batches freed... kept as per-batch adds/frees
    adds: list[dict[int, int]] = []
    frees: list[dict[int, int]] = []

    def peak_ok(i: int, k: int) -> bool:
        if disk is None or not disk.add[i]:
            return True
        for b, z in disk.add[i]:
            level = 0
            for j in range(len(load)):      # usage above now at batch j's peak: earlier net + j's adds
                peak = level + adds[j].get(b, 0) + (z if j >= k else 0)
                if peak > disk.room[b]:
                    return False
                level += adds[j].get(b, 0) - frees[j].get(b, 0)
            if k >= len(load) and level + z > disk.room[b]:
                return False
        return True

    # without disk limits: per broker, the next batch from k on where it has room, as pointers with path
    # compression, so that the search for the first batch where all of a move's brokers have room jumps over
    # each one's full batches instead of testing batch after batch (a 1M-partition bytes plan, its moves in
    # size order over ~5,900 batches, spent 8 s there)
    nxt: list[list[int]] = [[] for _ in range(n_brokers)]

    def room_from(b: int, k: int) -> int:
        p = nxt[b]
        r = k
        while r < len(p) and p[r] != r:
            r = p[r]
        while k < len(p) and k != r:
            p[k], k = r, p[k]
        return r

    waiting = list(range(len(touched)))
    while waiting:
        left = []
        for i in waiting:
            brokers = touched[i]
            if disk is None:
                k = 0
                while True:
                    k2 = max([room_from(b, k) for b in brokers]) if brokers else k
                    if k2 == k:
                        break
                    k = k2
                if k >= len(load):
                    load.append([0] * n_brokers)
                    for p in nxt:
                        p.append(len(load) - 1)
                lk = load[k]
                for b in brokers:
                    lk[b] += 1
                    if lk[b] >= limit:
                        nxt[b][k] = k + 1
                assign[i] = k
                continue
            k = max([first_free[b] for b in brokers]) if brokers else 0
            while True:
                if k >= len(load) and not peak_ok(i, k):
                    k = -1
                    break
                while k >= len(load):
                    load.append([0] * n_brokers)
                    adds.append({})
                    frees.append({})
                lk = load[k]
                if all(lk[b] < limit for b in brokers) and peak_ok(i, k):
                    break
                k += 1
            if k < 0:
                left.append(i)
                continue
            for b in brokers:
                load[k][b] += 1
                while first_free[b] < len(load) and load[first_free[b]][b] >= limit:
                    first_free[b] += 1
            if disk is not None:
                for b, z in disk.add[i]:
                    adds[k][b] = adds[k].get(b, 0) + z
                for b, z in disk.free[i]:
                    frees[k][b] = frees[k].get(b, 0) + z
            assign[i] = k
        if len(left) == len(waiting):
            from planner.optimizer.checks import Infeasible

            assert disk is not None
            stuck = sorted({int(disk.ids[b]) for i in left for b, _ in disk.add[i]})
            raise Infeasible("disk-capacity", f"disk capacity: {len(left)} moves cannot be ordered into batches "
                             f"that keep brokers {stuck} under the disk limit at every batch "
                             "boundary (each needs space another of them frees only later)")
        waiting = left
    order = np.argsort(assign, kind="stable")
    bounds = np.searchsorted(assign[order], np.arange(len(load) + 1))
    return [order[bounds[k]:bounds[k + 1]] for k in range(len(load)) if bounds[k + 1] > bounds[k]]


# The lowest throttle the plan suggests. A rate of bytes / batch_seconds alone can be absurd for a small batch
# (a 1 MB batch over an hour: 291 B/s), and a follower throttled below its partition's produce rate never
# joins the ISR, so the batch stalls instead of finishing late. 10 MiB/s is well under what Kafka's docs use
# as an example (50 MB/s) and above most single partitions' produce rates; --throttle overrides it.
MIN_SUGGESTED_THROTTLE = 10 * 1024 * 1024


def batch_traffic(pb: Problem, batches: list[Batch], seconds: int) -> list[dict]:
    """Per batch: bytes copied, the most one broker receives (`max_broker_bytes_in`: its follower throttle
    carries them) and sends (`max_broker_bytes_out`: the partition's leader serves every new replica, under
    its leader throttle), and the suggested throttle: the larger of the two over `seconds`, in bytes/s, since
    Kafka's throttle is a per-broker rate, and never below MIN_SUGGESTED_THROTTLE. The sender is the leader when the batch runs: the one the
    leadership batch put first, else the snapshot's leader if it still holds a replica and is registered,
    else the first registered replica (none for a partition without one: nothing can copy it). Byte figures
    are None when sizes are unknown; a leadership batch copies nothing."""
    B = pb.num_brokers
    orig = pb.replicas
    sender = pb.leader.copy() if pb.leader is not None else np.full(len(orig), -1, np.int32)
    ok = (sender >= 0) & pb.alive[np.maximum(sender, 0)] & (orig == sender[:, None]).any(axis=1)
    first_alive = np.where((orig >= 0) & pb.alive[np.maximum(orig, 0)], orig, -1)
    j = np.argmax(first_alive >= 0, axis=1) if orig.shape[1] else np.zeros(len(orig), np.int64)
    fallback = first_alive[np.arange(len(orig)), j] if orig.shape[1] else np.full(len(orig), -1)
    sender = np.where(ok, sender, fallback).astype(np.int64)
    out = []
    for b in batches:
        if b.kind == "leadership":
            sender[b.rows] = b.replicas[:, 0]
            out.append({"bytes": 0, "max_broker_bytes_in": 0, "max_broker_bytes_out": 0,
                        "suggested_throttle_bytes_per_s": None})
            continue
        o = orig[b.rows]
        added = (b.replicas >= 0) & ~(b.replicas[:, :, None] == o[:, None, :]).any(axis=2)
        if not pb.sizes_known:
            out.append({"bytes": None, "max_broker_bytes_in": None, "max_broker_bytes_out": None,
                        "suggested_throttle_bytes_per_s": None})
            continue
        size = np.maximum(pb.sizes[b.rows], 0)
        w_in = np.broadcast_to(size[:, None], added.shape)[added]
        bytes_in = np.bincount(b.replicas[added], weights=w_in, minlength=B)
        n_new = added.sum(axis=1)
        src = sender[b.rows]
        has = src >= 0
        bytes_out = np.bincount(src[has], weights=(size * n_new)[has], minlength=B)
        busiest = int(max(bytes_in.max(initial=0), bytes_out.max(initial=0)))
        out.append({"bytes": int((size * n_new).sum()), "max_broker_bytes_in": int(bytes_in.max(initial=0)),
                    "max_broker_bytes_out": int(bytes_out.max(initial=0)),
                    "suggested_throttle_bytes_per_s": max(-(-busiest // seconds), MIN_SUGGESTED_THROTTLE)
                    if busiest else 0})
    return out
