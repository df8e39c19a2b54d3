"""The order in which Kafka's ZooKeeper-mode controller visits brokers that die in one event.

`ZkReplicaStateMachine.handleStateChanges` (core/src/main/scala/kafka/controller/ReplicaStateMachine.scala,
Kafka 3.9) moves the replicas of the dead brokers to OfflineReplica with
`replicas.groupBy(_.replica).forKeyValue { (replicaId, replicas) => doHandleStateChanges(...) }`: one broker
at a time, each removing itself from the ISRs it is in unless it is the only member
(`doRemoveReplicasFromIsr`). `groupBy` returns a Scala 2.13 `immutable.HashMap`, a CHAMP trie, and
`forKeyValue` is its `foreachEntry`: so among the dead members of one ISR, the one the ISR keeps is the one
visited last in that map's order. That order is a function of the key set alone:

- the key of broker k is hashed as `scala.collection.Hashing.improve(k.##)` (`k.##` is k for an Int);
- the trie indexes 5 bits of that hash per level, lowest bits first (`Node.maskFrom(hash, shift)`), and a key
  sits at the shallowest level where no other key shares its bits so far;
- `foreachEntry` visits a node's own keys first (by their 5-bit index), then its sub-nodes (by index),
  depth first (`BitmapIndexedMapNode.foreachEntry`).

So the order depends on the whole key set (which keys share a sub-node), not only on each key: the keys are
the brokers of the event that hold at least one replica of a topic not queued for deletion
(`controllerContext.replicasOnBrokers(deadBrokers)`, then `newOfflineReplicasNotForDeletion`). Brokers 1..6
are visited 5, 1, 6, 2, 3, 4. Checked against the scala-library jar Kafka 3.9.2 ships
(tests/test_scala_hashmap_order.py runs the real `groupBy(...).foreachEntry` on the JVM).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

BITS = 5           # bits of the hash per trie level (BitPartitionSize)
LEVELS = 7         # ceil(32 / 5): a 32-bit hash has 7 chunks, the last one 2 bits wide


def improve(keys: np.ndarray | Iterable[int]) -> np.ndarray:
    """scala.collection.Hashing.improve on Int hash codes, as unsigned 32-bit values."""
    h = np.asarray(keys, dtype=np.int64).astype(np.uint32)
    h = h + ~(h << np.uint32(9))
    h ^= h >> np.uint32(14)
    h += h << np.uint32(4)
    return h ^ (h >> np.uint32(10))


def visit_order(keys: Iterable[int]) -> list[int]:
    """The keys (distinct Int broker ids) in the order `immutable.HashMap.foreachEntry` visits them.

    A key's position is decided by a sort key built level by level: at each level above its own, (1, the
    5-bit index of its sub-node); at its own level (the first where no other key shares its bits), (0, its
    index). Two keys first differ at the level where their paths part: there the one stored in the node
    (flag 0) precedes the one in a sub-node (flag 1), and otherwise the lower index goes first: exactly the
    depth-first, own-keys-first walk of foreachEntry."""
    ks = np.unique(np.asarray(list(keys), dtype=np.int64))
    if len(ks) <= 1:
        return ks.tolist()
    h = improve(ks).astype(np.int64)
    chunks = [(h >> (BITS * level)) & 31 for level in range(LEVELS)]
    # the trie path of each key, its lowest chunk most significant: a key shares the longest path prefix with
    # one of its neighbours in path order, and its level is the length of that prefix (distinct Int keys have
    # distinct improved hashes, so no two paths are equal)
    path = sum(c << (BITS * (LEVELS - 1 - level)) for level, c in enumerate(chunks))
    by_path = np.argsort(path, kind="stable")
    x = path[by_path][1:] ^ path[by_path][:-1]
    shared = sum((x >> (BITS * (LEVELS - 1 - level))) == 0 for level in range(LEVELS)).astype(np.int64)
    depth = np.empty(len(ks), dtype=np.int64)   # the level the key is stored at
    depth[by_path] = np.maximum(np.concatenate([[0], shared]), np.concatenate([shared, [0]]))
    sort_key = np.zeros(len(ks), dtype=np.int64)
    for level in range(LEVELS):
        chunk = chunks[level]
        flag = np.where(level == depth, 0, 1)
        part = np.where(level <= depth, (flag << BITS) | chunk, 0)
        sort_key |= part << ((BITS + 1) * (LEVELS - 1 - level))
    return ks[np.argsort(sort_key, kind="stable")].tolist()


def visit_rank(keys: Iterable[int], size: int) -> np.ndarray:
    """A lookup table of `size` entries: the position of each key in `visit_order`, -1 for other ids."""
    rank = np.full(size, -1, dtype=np.int32)
    order = visit_order(keys)
    if order:
        rank[np.asarray(order)] = np.arange(len(order), dtype=np.int32)
    return rank
