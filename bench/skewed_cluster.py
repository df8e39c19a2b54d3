"""Skewed clusters for the planner benchmarks (issue 11): the shape real clusters have, not a uniform deal.

`skewed_cluster` builds, fully vectorized:
- `brokers` brokers on `racks` racks (broker i on rack i % racks), the last `new_brokers` of them new and
  nearly empty (each holds a few replicas, as a broker just added with a topic or two created since);
- topics with Zipf-distributed partition counts (numpy's zipf(a), clipped to `max_topic`; the largest topic
  has exactly `max_topic` partitions) until `partitions` partitions exist;
- a replication factor per topic drawn from `rf_weights` (RF 1..4);
- rack-aware placement (a partition's replicas on distinct racks, as Kafka places them), with brokers drawn
  by weight within a rack: `hot_brokers` brokers weigh between 1.3 and 2.0 (they hold up to twice their
  share), the new brokers 0.002, the others 1;
- partition sizes log-normal per topic (a topic's partitions have similar sizes).
Deterministic for a seed.
"""

from __future__ import annotations

import numpy as np

from planner.synth import SynthCluster


def zipf_topic_sizes(rng: np.random.Generator, partitions: int, max_topic: int, a: float) -> np.ndarray:
    """Partition counts per topic: Zipf(a) draws clipped to max_topic, the first topic exactly max_topic,
    the last one trimmed so that the counts sum to `partitions`."""
    sizes = [np.array([min(max_topic, partitions)])]
    total = int(sizes[0][0])
    while total < partitions:
        draw = np.minimum(rng.zipf(a, 4096), max_topic)
        sizes.append(draw)
        total += int(draw.sum())
    out = np.concatenate(sizes).astype(np.int64)
    end = int(np.searchsorted(np.cumsum(out), partitions))
    out = out[: end + 1]
    out[-1] -= int(out.sum()) - partitions
    return out[out > 0]


def skewed_cluster(brokers: int = 100, racks: int = 4, partitions: int = 200_000, new_brokers: int = 8,
                   hot_brokers: int = 6, max_topic: int = 2000, zipf_a: float = 1.5,
                   rf_weights: tuple[float, ...] = (0.10, 0.25, 0.55, 0.10), seed: int = 11,
                   sizes: bool = True) -> SynthCluster:
    rng = np.random.default_rng(seed)
    b_ids = np.arange(1, brokers + 1, dtype=np.int32)
    rack_of = np.arange(brokers) % racks
    rack_names = [f"rack-{r + 1}" for r in rack_of.tolist()]
    weight = np.ones(brokers)
    new = np.arange(brokers - new_brokers, brokers)
    weight[new] = 0.002
    old = np.arange(brokers - new_brokers)
    hot = rng.choice(old, size=min(hot_brokers, len(old)), replace=False)
    weight[hot] = rng.uniform(1.3, 2.0, len(hot))

    n_t = zipf_topic_sizes(rng, partitions, max_topic, zipf_a)
    T = len(n_t)
    topic_names = [f"topic-{i:05d}" for i in range(T)]
    topic_of = np.repeat(np.arange(T, dtype=np.int32), n_t)
    part = (np.arange(partitions) - np.repeat(np.cumsum(n_t) - n_t, n_t)).astype(np.int32)
    w = np.asarray(rf_weights, dtype=float)
    topic_rf = rng.choice(np.arange(1, len(w) + 1), size=T, p=w / w.sum())
    topic_rf = np.minimum(topic_rf, racks)
    p_rf = topic_rf[topic_of]
    width = int(topic_rf.max())

    # racks of each partition's replicas: a random permutation of the racks, first RF of them
    rack_perm = np.argsort(rng.random((partitions, racks)), axis=1)[:, :width]
    reps = np.full((partitions, width), -1, dtype=np.int32)
    for r in range(racks):
        members = np.flatnonzero(rack_of == r)
        cum = np.cumsum(weight[members])
        cum /= cum[-1]
        hit = rack_perm == r
        draw = rng.random(int(hit.sum()))
        reps[hit] = b_ids[members[np.minimum(np.searchsorted(cum, draw), len(members) - 1)]]
    reps[np.arange(width)[None, :] >= p_rf[:, None]] = -1

    size = None
    if sizes:
        topic_mean = rng.lognormal(19, 1.6, T)
        size = (topic_mean[topic_of] * rng.lognormal(0, 0.3, partitions)).astype(np.int64)
    t_min = np.where(topic_rf >= 3, 2, 1).astype(np.int32)
    return SynthCluster(b_ids, rack_names, topic_names, topic_of, part, reps, reps[:, 0].copy(), reps.copy(),
                        size, t_min, np.zeros(T, dtype=bool))


def live_state(c: SynthCluster, seed: int = 7, lagging: int = 2, lag_fraction: float = 0.25,
               shrunk_fraction: float = 0.01, restarted: int = 3, moved_fraction: float = 0.02,
               unclean_fraction: float = 0.05, new_brokers: int = 8) -> SynthCluster:
    """The cluster as a running one looks between maintenance windows, for the risk benchmark (issue 22):
    - ISRs shrunk where replicas lag: `lagging` brokers (a slow disk, a busy neighbour) are out of the ISR of
      `lag_fraction` of the partitions they follow, and `shrunk_fraction` of the other followers lag too;
    - non-preferred leaders: the partitions that `restarted` brokers prefer are led by the next in-sync
      replica in assignment order (where their controlled shutdowns moved them; no preferred election has run
      since), and `moved_fraction` of the others by another in-sync replica;
    - `unclean_fraction` of the topics allow unclean election.
    Deterministic for a seed; the `new_brokers` (the last ones: `skewed_cluster`'s new, nearly empty brokers)
    are neither slow nor restarted."""
    rng = np.random.default_rng(seed)
    reps = c.replicas
    n, width = reps.shape
    rf = (reps >= 0).sum(axis=1)
    new = c.broker_ids[len(c.broker_ids) - new_brokers:] if len(c.broker_ids) > 2 * new_brokers else c.broker_ids[:0]
    picks = rng.choice(np.setdiff1d(c.broker_ids, new), size=lagging + restarted, replace=False)
    slow, back = picks[:lagging], picks[lagging:]
    col = np.arange(width)[None, :]
    follower = (col > 0) & (col < rf[:, None])
    out = follower & ((np.isin(reps, slow) & (rng.random(reps.shape) < lag_fraction))
                      | (rng.random(reps.shape) < shrunk_fraction))
    isr = np.where(out, -1, reps)
    isr = np.take_along_axis(isr, np.argsort(isr < 0, axis=1, kind="stable"), axis=1).astype(np.int32)
    # the leader: the preferred replica, else (restarted, or a random few) the next in-sync one
    leader = reps[:, 0].copy()
    second = isr[:, 1] if width > 1 else np.full(n, -1, np.int32)
    move = (np.isin(reps[:, 0], back) | (rng.random(n) < moved_fraction)) & (second >= 0)
    leader[move] = second[move]
    unclean = rng.random(len(c.topic_names)) < unclean_fraction
    return SynthCluster(c.broker_ids, c.racks, c.topic_names, c.topic_of, c.partition, reps, leader, isr,
                        c.size_bytes, c.topic_min_isr, unclean, c.alive, c.capacity_bytes, c.disk_used_bytes)
