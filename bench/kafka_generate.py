"""Kafka's `kafka-reassign-partitions.sh --generate`, reimplemented for comparison (vectorized over partitions).

`--generate` re-deals every partition of the named topics over the given brokers with
`AdminUtils.assignReplicasToBrokers` (docs/KAFKA_ZK.md §3), ignoring where replicas are now:
- rack-unaware: first replica of partition p at (p + start) % n, followers at
  (first + 1 + (shift + j) % (n - 1)) % n, where `shift` grows by one every n partitions;
- rack-aware: the same over a rack-alternated broker list (brokers taken round-robin from the racks in rack
  name order), skipping a follower candidate whose rack (or broker) already holds a replica until every rack
  (or broker) does, with shift multiplied by the number of racks.
`start` and the initial `shift` are random per topic (Kafka draws them per call); here from a seeded RNG.
"""

from __future__ import annotations

import numpy as np


def rack_alternated(broker_ids: list[int], racks: list[str]) -> list[int]:
    """AdminUtils.getRackAlternatedBrokerList: one broker from each rack in turn (racks and brokers sorted)."""
    by_rack: dict[str, list[int]] = {}
    for b, r in sorted(zip(broker_ids, racks, strict=True)):
        by_rack.setdefault(r, []).append(b)
    names = sorted(by_rack)
    its = {r: iter(by_rack[r]) for r in names}
    out: list[int] = []
    i = 0
    while len(out) < len(broker_ids):
        nxt = next(its[names[i]], None)
        if nxt is not None:
            out.append(nxt)
        i = (i + 1) % len(names)
    return out


def generate(topic_of: np.ndarray, partition: np.ndarray, rf: np.ndarray, broker_ids: list[int],
             racks: list[str] | None, seed: int = 0) -> np.ndarray:
    """(P, max RF) new replica lists (broker ids, -1 padded) for every partition, one assignment per topic."""
    rng = np.random.default_rng(seed)
    n_topics = int(topic_of.max()) + 1 if len(topic_of) else 0
    rack_aware = racks is not None and len(set(racks)) > 1
    arranged = np.array(rack_alternated(broker_ids, racks) if rack_aware else broker_ids, dtype=np.int64)
    n = len(arranged)
    start = rng.integers(0, n, n_topics)[topic_of]
    shift0 = rng.integers(0, n, n_topics)[topic_of]
    pid = partition.astype(np.int64)
    shift = shift0 + pid // n  # +1 each time the partition id reaches a multiple of n (p > 0)
    first = (pid + start) % n
    width = int(rf.max()) if len(rf) else 0
    out = np.full((len(pid), width), -1, dtype=np.int64)
    out[:, 0] = arranged[first]
    if width <= 1 or n < 2:
        return out
    if not rack_aware:
        for j in range(width - 1):
            idx = (first + 1 + (shift + j) % (n - 1)) % n
            out[:, j + 1] = np.where(rf > j + 1, arranged[idx], -1)
        return out
    rack_names = sorted(set(racks))
    rack_of_id = {b: rack_names.index(r) for b, r in zip(broker_ids, racks, strict=True)}
    arr_rack = np.array([rack_of_id[b] for b in arranged.tolist()], dtype=np.int64)
    n_racks = len(rack_names)
    rack_mask = np.left_shift(np.uint64(1), arr_rack[first].astype(np.uint64))
    n_rack_used = np.ones(len(pid), np.int64)
    k = np.zeros(len(pid), np.int64)
    chosen_idx = [first]
    for j in range(width - 1):
        need = rf > j + 1
        pending = need.copy()
        pick = np.full(len(pid), -1, np.int64)
        while pending.any():
            rows = np.flatnonzero(pending)
            idx = (first[rows] + 1 + (shift[rows] * n_racks + k[rows]) % (n - 1)) % n
            rk = arr_rack[idx]
            bit = np.left_shift(np.uint64(1), rk.astype(np.uint64))
            rack_ok = ((rack_mask[rows] & bit) == 0) | (n_rack_used[rows] == n_racks)
            n_have = j + 1
            broker_ok = np.ones(len(rows), bool)
            for c in chosen_idx:
                broker_ok &= c[rows] != idx
            broker_ok |= n_have == n
            ok = rack_ok & broker_ok
            acc = rows[ok]
            pick[acc] = idx[ok]
            new_rack = (rack_mask[acc] & bit[ok]) == 0
            rack_mask[acc] |= bit[ok]
            n_rack_used[acc] += new_rack
            k[rows] += 1
            pending[acc] = False
        chosen_idx.append(np.where(need, pick, -1))
        out[:, j + 1] = np.where(need, arranged[np.maximum(pick, 0)], -1)
    return out
