"""Reference replay of Kafka's (ZooKeeper-mode) election rules, pure numpy: what a drain does, per partition.

This is the executable reading of docs/KAFKA_ZK.md §2 that the Spark job (planner.spark) is tested
against, partition by partition, and that sandbox runs will be compared with. Every rule is one function:
`offline_clean_election`, `offline_unclean_election`, `new_partition_leader`, `remove_from_isr`,
`hard_failure`, `controlled_shutdown`, `return_brokers`. They work on a batch of partitions at once
(dense matrices padded with -1), so a million-partition sweep has no Python loop over partitions.

Conventions the text of docs/KAFKA_ZK.md leaves open, fixed here (and followed by the Spark job):
- "Remove the dead brokers from the ISR unless it is the only member": Kafka removes the brokers that die in
  one controller event one at a time, in the iteration order of a Scala HashMap keyed by broker id
  (planner.scala_hashmap), each removal keeping a last member: where every ISR member dies, the one visited
  last stays. A broker that was already dead before the event is not part of it and is not removed.
  Deaths that may land in separate events (brokers killed "together") could leave another member: such rows
  are `order_dependent` and name the others (`alternatives`).
- Partitions with no state znode ("leaderless-new") get their first leader when the controller next
  handles a broker change, as Kafka's triggerOnlinePartitionStateChange does: leader = first live
  replica, ISR = the live replicas in assignment order; with no live replica they stay leaderless.
- Already-offline partitions (leader -1) are re-elected with the offline rule on every broker change.
- Rolling sequence: step k takes its brokers away from the state left by step k-1 *after* step k-1's
  brokers came back. On return, offline and leaderless partitions are elected first (offline rule, from
  the ISR as it was left), then the returning brokers that were in the ISR when their step began rejoin
  it (appended in that ISR's order) where the partition has a leader. Leaders stay where the previous
  step left them (no preferred election between steps); out-of-sync replicas stay out of sync.
- Restart steps (a restart plan's roll, kind "restart"): each step starts from the plan's state, because the
  roll's gates bring the cluster back to it before the next broker goes (the broker rejoined every ISR it was
  in, its leadership restored). Before the broker stops, `demote` moves its leadership off it, as the roll
  does (reordered replica lists, then a preferred election); then the step's rule applies.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from planner import risk_model as rm
from planner import scala_hashmap
from planner.codec import ReassignEntry
from planner.errors import BadInput
from planner.snapshot_io import Snapshot, list_to_matrix, matrix_to_list

# -------------------------------------------------------------------------------------- helpers


def _in(m: np.ndarray, lut: np.ndarray) -> np.ndarray:
    """Elementwise: is broker m (any shape, -1 = empty slot) in the set given by the boolean lookup table?"""
    return (m >= 0) & lut[np.maximum(m, 0)]


def _first(m: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per row: the first entry of m (in column order) where mask holds, else -1."""
    if m.shape[1] == 0:
        return np.full(len(m), -1, dtype=np.int32)
    idx = mask.argmax(axis=1)
    picked = m[np.arange(len(m)), idx]
    return np.where(mask.any(axis=1), picked, -1).astype(np.int32)


def _keep(m: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Per row: the entries of m where keep holds, moved left in their order, padded with -1."""
    keep = keep & (m >= 0)
    order = np.argsort(~keep, axis=1, kind="stable")
    return np.take_along_axis(np.where(keep, m, -1), order, axis=1).astype(np.int32)


def _member(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row: is a[i, j] among the entries of b[i, :]? (small widths: replica lists)"""
    return (a[:, :, None] == b[:, None, :]).any(axis=2) & (a >= 0)


def _size(m: np.ndarray) -> np.ndarray:
    return (m >= 0).sum(axis=1)


def _pad(m: np.ndarray, width: int) -> np.ndarray:
    if m.shape[1] >= width:
        return m
    return np.concatenate([m, np.full((len(m), width - m.shape[1]), -1, dtype=np.int32)], axis=1)


# ------------------------------------------------------------------------------------ cluster state


@dataclass
class ClusterState:
    """Everything the rules read, one row per partition, in snapshot order (topic, partition)."""

    topic_names: list[str]
    topic_idx: np.ndarray    # int32 (P,)
    partition: np.ndarray    # int32 (P,)
    replicas: np.ndarray     # int32 (P, W) -1 padded, assignment order
    isr: np.ndarray          # int32 (P, W) -1 padded, ISR order
    leader: np.ndarray       # int32 (P,) -1 = none
    has_state: np.ndarray    # bool (P,)
    min_isr: np.ndarray      # int32 (P,) topic's min.insync.replicas
    unclean: np.ndarray      # bool (P,) topic's unclean.leader.election.enable
    broker_ids: np.ndarray   # int32 (B,)
    alive: np.ndarray        # bool (B,)
    racks: list[str | None]  # (B,)
    deleting: np.ndarray | None = None  # bool (P,) the topic is queued for deletion (None: no topic is)

    @property
    def rf(self) -> np.ndarray:
        return _size(self.replicas).astype(np.int32)

    @property
    def num_partitions(self) -> int:
        return len(self.partition)

    def lut_size(self, extra: Iterable[int] = ()) -> int:
        hi = max([int(self.broker_ids.max(initial=0)), int(self.replicas.max(initial=0)),
                  int(self.isr.max(initial=0)), int(self.leader.max(initial=0)), *extra])
        return hi + 2

    def alive_lut(self, size: int) -> np.ndarray:
        lut = np.zeros(size, dtype=bool)
        lut[self.broker_ids[self.alive]] = True
        return lut

    def hosting_ids(self) -> np.ndarray:
        """The brokers holding a replica of a topic not queued for deletion (sorted): the brokers whose death
        makes replicas go offline (KafkaController.onReplicasBecomeOffline's newOfflineReplicasNotForDeletion)."""
        reps = self.replicas if self.deleting is None else self.replicas[~self.deleting]
        return np.unique(reps[reps >= 0]).astype(np.int32)

    def hosting_lut(self, size: int) -> np.ndarray:
        return _lut(self.hosting_ids().tolist(), size)

    @classmethod
    def from_snapshot(cls, snap: Snapshot) -> ClusterState:
        parts = snap.partitions
        if "state_error" in parts.column_names and parts.column("state_error").null_count < parts.num_rows:
            parts = parts.filter(parts.column("state_error").is_null())   # unknown state: not replayed
        topic = parts.column("topic")
        topic = pc.cast(topic, pa.string()) if pa.types.is_dictionary(topic.type) else topic
        enc = pc.dictionary_encode(topic).combine_chunks()
        names = enc.dictionary.to_pylist()
        tidx = enc.indices.to_numpy(zero_copy_only=False).astype(np.int32)
        topics = snap.topics
        by_name = {t: i for i, t in enumerate(topics.column("topic").to_pylist())}
        t_min = topics.column("min_insync_replicas").to_numpy(zero_copy_only=False)
        t_unclean = topics.column("unclean_leader_election").to_numpy(zero_copy_only=False)
        t_deleting = (np.asarray(topics.column("queued_for_deletion").fill_null(False).to_numpy(zero_copy_only=False),
                                 dtype=bool) if "queued_for_deletion" in topics.column_names
                      else np.zeros(topics.num_rows, dtype=bool))
        # A partition whose topic row is missing gets Kafka's defaults (min ISR 1, unclean off).
        rows = np.array([by_name.get(n, -1) for n in names], dtype=np.int64)
        min_by_topic = np.where(rows >= 0, t_min[np.maximum(rows, 0)] if len(t_min) else 1, 1)
        unclean_by_topic = np.where(rows >= 0, t_unclean[np.maximum(rows, 0)] if len(t_unclean) else False,
                                    False)
        deleting_by_topic = np.where(rows >= 0, t_deleting[np.maximum(rows, 0)] if len(t_deleting) else False,
                                     False).astype(bool)
        reps = list_to_matrix(parts.column("replicas"))
        isr = list_to_matrix(parts.column("isr"))
        width = max(reps.shape[1], isr.shape[1])
        b = snap.brokers
        return cls(
            topic_names=names,
            topic_idx=tidx,
            partition=parts.column("partition").to_numpy().astype(np.int32),
            replicas=_pad(reps, width),
            isr=_pad(isr, width),
            leader=parts.column("leader").to_numpy().astype(np.int32),
            has_state=parts.column("has_state").to_numpy(zero_copy_only=False).astype(bool),
            min_isr=min_by_topic[tidx].astype(np.int32),
            unclean=unclean_by_topic[tidx].astype(bool),
            broker_ids=b.column("broker").to_numpy().astype(np.int32),
            alive=b.column("alive").to_numpy(zero_copy_only=False).astype(bool),
            racks=b.column("rack").to_pylist(),
            deleting=deleting_by_topic[tidx] if deleting_by_topic.any() else None,
        )

    def row_index(self, topics: Sequence[str], partitions: Sequence[int]) -> np.ndarray:
        """Row of each (topic, partition), -1 where the snapshot has no such partition."""
        if self.num_partitions == 0:
            return np.full(len(topics), -1, dtype=np.int64)
        by_name = {t: i for i, t in enumerate(self.topic_names)}
        t = np.array([by_name.get(x, -1) for x in topics], dtype=np.int64)
        p = np.asarray(partitions, dtype=np.int64)
        span = int(self.partition.max()) + 1
        keys = self.topic_idx.astype(np.int64) * span + self.partition
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
        want = np.where((t >= 0) & (p < span), t * span + p, -1)
        pos = np.minimum(np.searchsorted(sorted_keys, want), len(keys) - 1)
        found = (want >= 0) & (sorted_keys[pos] == want)
        return np.where(found, order[pos], -1)

    def with_plan(self, entries: Sequence[ReassignEntry]) -> ClusterState:
        """The state once a reassignment completes: for each listed partition replicas = target, ISR = target,
        leader = target[0] (after the preferred election); partitions not listed are unchanged."""
        if not entries:
            return replace(self)
        rows = self.row_index([e.topic for e in entries], [e.partition for e in entries])
        missing = [f"{e.topic}-{e.partition}" for e, r in zip(entries, rows.tolist(), strict=True) if r < 0]
        if missing:
            raise BadInput(f"the plan names partitions the snapshot does not have: {', '.join(missing[:10])}"
                           + (f" (+{len(missing) - 10} more)" if len(missing) > 10 else ""))
        known = set(self.broker_ids.tolist())
        unknown = sorted({b for e in entries for b in e.replicas} - known)
        if unknown:
            raise BadInput(f"the plan's target replicas name unknown broker ids {unknown}")
        width = max(self.replicas.shape[1], max(len(e.replicas) for e in entries))
        target = np.full((len(entries), width), -1, dtype=np.int32)
        for i, e in enumerate(entries):
            target[i, : len(e.replicas)] = e.replicas
        reps = _pad(self.replicas.copy(), width)
        isr = _pad(self.isr.copy(), width)
        leader = self.leader.copy()
        has_state = self.has_state.copy()
        reps[rows] = target
        isr[rows] = target
        leader[rows] = target[:, 0]
        has_state[rows] = True
        return replace(self, replicas=reps, isr=isr, leader=leader, has_state=has_state)


# ------------------------------------------------------------------------------------ election rules


@dataclass
class Batch:
    """The partitions one rule is applied to (a subset of a ClusterState), and their current state."""

    replicas: np.ndarray
    isr: np.ndarray
    leader: np.ndarray
    has_state: np.ndarray
    unclean: np.ndarray

    @property
    def rf(self) -> np.ndarray:
        return _size(self.replicas)


@dataclass
class Outcome:
    """A batch's state after a rule, plus what happened on the way.

    leader_changes: how often the partition's leader changed during the scenario (each controlled-shutdown
    move, and the election when the brokers stopped); blocks_shutdown: the broker whose controlled shutdown
    this partition made fail (-1: none); clean_return: for partitions left without a leader, the dead ISR
    ISR members, the one the ISR keeps first: the partition comes back cleanly when one of its members returns
    (when all of them return, surely); order_dependent: several brokers of the event were its last members,
    and the one kept follows Kafka's order only if their deaths land in one controller event (otherwise the
    one noticed last stays); alternatives: for those rows, the others the ISR may keep instead."""

    leader: np.ndarray
    isr: np.ndarray
    has_state: np.ndarray
    unclean_taken: np.ndarray
    live_replica_exists: np.ndarray
    leader_changes: np.ndarray = None  # type: ignore[assignment]
    blocks_shutdown: np.ndarray = None  # type: ignore[assignment]
    clean_return: np.ndarray = None  # type: ignore[assignment]
    order_dependent: np.ndarray = None  # type: ignore[assignment]
    alternatives: np.ndarray = None  # type: ignore[assignment]


def offline_clean_election(replicas: np.ndarray, isr: np.ndarray, live: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Offline (clean): leader = first replica *in assignment order* that is live and in the ISR;
    new ISR = the old ISR restricted to live brokers, order kept. Leader -1 where there is no candidate."""
    leader = _first(replicas, _in(replicas, live) & _member(replicas, isr))
    return leader, _keep(isr, _in(isr, live))


def offline_unclean_election(replicas: np.ndarray, live: np.ndarray) -> np.ndarray:
    """Offline (unclean), used only when no ISR member is live and the topic allows it: the first live
    replica leads and the ISR becomes [leader]. Returns -1 where no replica is live."""
    return _first(replicas, _in(replicas, live))


def new_partition_leader(replicas: np.ndarray, live: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A partition with no state znode gets its first leader: the first live replica; ISR = live replicas."""
    return offline_unclean_election(replicas, live), _keep(replicas, _in(replicas, live))


def remove_from_isr(isr: np.ndarray, gone: np.ndarray) -> np.ndarray:
    """Remove the brokers in `gone` (lookup table), dying in one controller event, from each ISR, except that
    an ISR never empties: where every member is gone, the one Kafka visits last stays (`death_order`)."""
    return remove_visited(isr, scala_hashmap.visit_rank(np.flatnonzero(gone), len(gone)))[0]


def death_order(brokers: Iterable[int], registered: np.ndarray, hosting: np.ndarray) -> np.ndarray:
    """The brokers that die in one controller event as Kafka visits them (lookup table: visit position, -1
    for brokers not in the event): the ones of `brokers` that were registered and hold a replica (`hosting`)
    are the keys of ZkReplicaStateMachine.handleStateChanges' groupBy, visited in Scala's HashMap order."""
    size = len(registered)
    keys = [b for b in brokers if 0 <= b < size and registered[b] and hosting[b]]
    return scala_hashmap.visit_rank(keys, size)


def remove_visited(isr: np.ndarray, visit: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Kafka's doRemoveReplicasFromIsr for each broker of the event in visit order (`visit`: lookup table of
    visit positions, -1 = not in the event): a broker leaves the ISR unless it is the only member left. So
    every event member leaves, except where that would empty the ISR: there the member visited last stays.
    Returns (the new ISRs, rows where that last member stayed, the per-entry visit positions)."""
    rank = np.where(isr >= 0, visit[np.clip(isr, 0, len(visit) - 1)], -1) if len(visit) else np.full(isr.shape, -1)
    leaving = rank >= 0
    kept = _keep(isr, ~leaving)
    emptied = (_size(kept) == 0) & leaving.any(axis=1)
    if emptied.any():
        rows = np.flatnonzero(emptied)
        kept[rows, 0] = isr[rows, rank[rows].argmax(axis=1)]
    return kept, emptied, rank


def hard_failure(b: Batch, gone: np.ndarray, live: np.ndarray, visit: np.ndarray | None = None) -> Outcome:
    """Hard failure of the set `gone` (kill): partitions led by it (and already-offline ones) are re-elected
    with the offline rule, clean first, then unclean where the topic allows it; where nobody is elected the
    leader is -1. Then the brokers dying in this event (`visit`, from `death_order`; default: all of `gone`)
    leave every ISR one at a time in Kafka's order, unless one is the only member (`remove_visited`).
    Leaderless-new partitions get their first leader if a replica is live."""
    if visit is None:
        visit = scala_hashmap.visit_rank(np.flatnonzero(gone), len(gone))
    clean_leader, clean_isr = offline_clean_election(b.replicas, b.isr, live)
    first_live = offline_unclean_election(b.replicas, live)
    elect = b.has_state & (_in(b.leader, gone) | (b.leader < 0))
    clean = elect & (clean_leader >= 0)
    unclean = elect & ~clean & b.unclean & (first_live >= 0)
    none = elect & ~clean & ~unclean

    leader = b.leader.copy()
    isr = b.isr.copy()
    leader[clean] = clean_leader[clean]
    isr[clean] = clean_isr[clean]
    leader[unclean] = first_live[unclean]
    isr[unclean] = -1
    isr[unclean, 0] = first_live[unclean]
    leader[none] = -1
    before = isr
    isr, emptied, rank = remove_visited(before, visit)

    new = ~b.has_state
    new_leader, new_isr = new_partition_leader(b.replicas, live)
    leader[new] = new_leader[new]
    isr[new] = new_isr[new]
    has_state = b.has_state | (new & (new_leader >= 0))
    # Leaderless afterwards: no ISR member is live, and the ISR keeps its dead members that were not in this
    # event, or else the event's member visited last. Had the deaths landed in separate events (brokers killed
    # "together" are not always noticed together), the one noticed last would stay instead: any of them.
    leaderless = has_state & (leader < 0)
    order_dependent = leaderless & emptied & ((rank >= 0).sum(axis=1) >= 2)
    alternatives = np.where(order_dependent[:, None], _keep(before, (rank >= 0) & (before != isr[:, :1])), -1)
    clean_return = _keep(np.concatenate([isr, alternatives], axis=1), leaderless[:, None])
    changed = (leader >= 0) & (leader != b.leader) & b.has_state
    return Outcome(leader, isr, has_state, unclean, first_live >= 0,
                   leader_changes=changed.astype(np.int32),
                   blocks_shutdown=np.full(len(leader), -1, dtype=np.int32),
                   clean_return=clean_return,
                   order_dependent=order_dependent,
                   alternatives=alternatives.astype(np.int32))


def controlled_shutdown(b: Batch, stopping: np.ndarray, live: np.ndarray,
                        order: Sequence[int] | None = None, alive: np.ndarray | None = None,
                        visit: np.ndarray | None = None) -> Outcome:
    """Controlled shutdown of the brokers `stopping`, one ControlledShutdown request at a time in `order`
    (default: ascending id), then the brokers stop. Kafka's doControlledShutdown, per request of broker k:
    S grows by k; partitions with RF > 1 and a state led by k move to the first replica that is registered
    (`live`, or stopping but not yet stopped), in the ISR and not in S, with ISR = ISR minus S: a leader can
    move onto a stopping broker that has not asked yet, and move again when it asks. Partitions k only
    follows drop k from the ISR unless it is the only member. Partitions led by k with no candidate make k's
    request fail (they stay k's: later requests cannot free them, S only grows), so k retries and then stops
    anyway. RF = 1 partitions are no obstacle (Kafka's partitionLeadersOnBroker counts RF > 1 only). Every
    stopping broker then stops: a hard failure for what was not moved away (`visit`: the order of that event,
    default: every registered stopping broker). A stopping broker that is already dead (`alive`, default: all
    of them alive) sends no request, is no candidate and is not part of the event.
    """
    registered = live | (stopping if alive is None else stopping & alive)
    ids = list(dict.fromkeys(int(x) for x in order)) if order is not None else np.flatnonzero(stopping).tolist()
    ids = [k for k in ids if registered[k]]
    acting = b.has_state & (b.rf > 1)
    leader, isr = b.leader.copy(), b.isr.copy()
    changes = np.zeros(len(leader), dtype=np.int32)
    blocks = np.full(len(leader), -1, dtype=np.int32)
    asked = np.zeros_like(stopping)
    eligible = _in(b.replicas, registered)
    # k's request changes only rows that k leads or whose ISR holds k: rows that hold k as leader, replica or
    # ISR member (a leader only ever moves to a replica, an ISR only shrinks). A rack's request touches its
    # few thousand rows, not the whole batch again for each of the rack's brokers.
    ids_k, bounds, rows_k = _index_by_broker(np.concatenate([b.replicas, b.isr, b.leader[:, None]], axis=1))
    for k in ids:
        asked[k] = True
        i = np.searchsorted(ids_k, k)
        if i == len(ids_k) or ids_k[i] != k:
            continue
        r = np.unique(rows_k[bounds[i]:bounds[i + 1]])
        lk, ik, reps = leader[r], isr[r], b.replicas[r]
        led = acting[r] & (lk == k)
        followed = acting[r] & (lk != k) & (ik == k).any(axis=1) & (_size(ik) > 1)
        candidate = _first(reps, eligible[r] & _member(reps, ik) & ~_in(reps, asked))
        moved = led & (candidate >= 0)
        mr, fr = r[moved], r[followed]
        leader[mr] = candidate[moved]
        isr[mr] = _keep(ik[moved], ~_in(ik[moved], asked))
        changes[mr] += 1
        blocks[r[led & ~moved]] = k
        isr[fr] = _keep(ik[followed], ik[followed] != k)
    # The brokers then stop: everything not moved away gracefully meets the hard-failure rule.
    if visit is None:
        visit = scala_hashmap.visit_rank(np.flatnonzero(stopping & registered), len(stopping))
    out = hard_failure(replace(b, leader=leader, isr=isr), stopping, live, visit)
    out.leader_changes = changes + out.leader_changes
    out.blocks_shutdown = blocks
    return out


def demote(b: Batch, broker: int, live: np.ndarray) -> tuple[Batch, np.ndarray, np.ndarray]:
    """Leadership moves off `broker` before it stops in a restart roll (Cruise Control's demote_broker, but
    naming what cannot move): every partition it leads or is the preferred leader of gets its replica list
    reordered so that the first other replica that is registered (`live`) and in the ISR, in assignment
    order, comes first and `broker` last (the others keep their order); then a preferred election, which
    elects `replicas[0]` only where it is live and in the ISR (docs/KAFKA_ZK.md §2), moves the leadership of the
    partitions `broker` leads onto it. A partition it leads with no such replica keeps it as leader: its
    leadership cannot move (returned as `stuck`).

    Returns (the batch as it is when the broker stops, `demoted_from`: the leader before the election where
    it moved, else -1, `stuck`)."""
    reps, isr, leader = b.replicas, b.isr, b.leader
    n, width = reps.shape
    first = reps[:, 0] if width else np.full(n, -1, np.int32)
    led = b.has_state & (leader == broker)
    cand = _first(reps, _in(reps, live) & _member(reps, isr) & (reps != broker))
    has = cand >= 0
    reorder = (led | (first == broker)) & has & (first != cand)
    col = np.broadcast_to(np.arange(width), reps.shape)
    key = np.where(reps == cand[:, None], -1, np.where(reps == broker, width, np.where(reps < 0, width + 1, col)))
    ordered = np.take_along_axis(reps, np.argsort(key, axis=1, kind="stable"), axis=1)
    new_reps = np.where(reorder[:, None], ordered, reps).astype(np.int32)
    moved = led & has
    new_leader = np.where(moved, cand, leader).astype(np.int32)
    demoted_from = np.where(moved, leader, -1).astype(np.int32)
    return replace(b, replicas=new_reps, leader=new_leader), demoted_from, led & ~has


def return_brokers(b: Batch, after: Outcome, isr_start: np.ndarray, back: np.ndarray,
                   live: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A rolling step's brokers come back (`live` now includes them): the controller elects offline and
    leaderless partitions (offline rule from the ISR as left), then returning brokers that were in the ISR
    when the step began rejoin it, appended in that order, where the partition has a leader."""
    state = Batch(b.replicas, after.isr, after.leader, after.has_state, b.unclean)
    none_gone = np.zeros_like(back)
    again = hard_failure(state, none_gone, live)
    leader, isr, has_state = again.leader, again.isr, again.has_state
    rejoin = _in(isr_start, back) & ~_member(isr_start, isr) & (leader >= 0)[:, None]
    if rejoin.any():
        merged = np.concatenate([isr, np.where(rejoin, isr_start, -1)], axis=1)
        merged = _keep(merged, merged >= 0)
        isr = merged[:, : max(isr.shape[1], int(_size(merged).max(initial=0)))]
    return leader, isr, has_state


# ------------------------------------------------------------------------------------------ sweeps


def _index_by_broker(replicas: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inverted index broker -> rows holding a replica on it (sorted ids, their start offsets, rows)."""
    flat = replicas.ravel()
    rows = np.repeat(np.arange(len(replicas)), replicas.shape[1])
    ok = flat >= 0
    flat, rows = flat[ok], rows[ok]
    order = np.argsort(flat, kind="stable")
    ids, starts = np.unique(flat[order], return_index=True)
    return ids, np.append(starts, len(order)), rows[order]


class _Index:
    def __init__(self, replicas: np.ndarray):
        self.ids, self.bounds, self.rows = _index_by_broker(replicas)

    def rows_on(self, brokers: Iterable[int]) -> np.ndarray:
        parts = []
        for b in brokers:
            i = np.searchsorted(self.ids, b)
            if i < len(self.ids) and self.ids[i] == b:
                parts.append(self.rows[self.bounds[i]:self.bounds[i + 1]])
        if not parts:
            return np.zeros(0, dtype=np.int64)
        return np.unique(np.concatenate(parts))


def _lut(ids: Iterable[int], size: int) -> np.ndarray:
    lut = np.zeros(size, dtype=bool)
    ids = list(ids)
    if ids:
        lut[np.asarray(ids)] = True
    return lut


def _batch(st: ClusterState, rows: np.ndarray, leader: np.ndarray, isr: np.ndarray,
           has_state: np.ndarray) -> Batch:
    return Batch(st.replicas[rows], isr[rows], leader[rows], has_state[rows], st.unclean[rows])


def apply_rule(b: Batch, mode: str, gone: np.ndarray, live: np.ndarray,
               order: Sequence[int] | None = None, alive: np.ndarray | None = None,
               visit: np.ndarray | None = None) -> Outcome:
    if mode == "controlled":
        return controlled_shutdown(b, gone, live, order, alive, visit)
    if mode == "failure":
        return hard_failure(b, gone, live, visit)
    raise ValueError(f"mode must be one of {rm.MODES}, got {mode!r}")


def predict(state: ClusterState | Snapshot, brokers: Iterable[int], mode: str) -> pa.Table:
    """What the cluster looks like once `brokers` are stopped (mode controlled) or killed (mode failure, their
    deaths in one controller event): one row per partition of the snapshot (unaffected ones unchanged), keyed
    by (topic, partition), with leader, isr, offline, has_state and isr_alternatives (the other brokers the
    ISR may keep if the deaths land in separate events). This is what a sandbox run is compared with."""
    st = state if isinstance(state, ClusterState) else ClusterState.from_snapshot(state)
    brokers = list(dict.fromkeys(int(b) for b in brokers))  # the order controlled shutdowns are requested in
    size = st.lut_size(brokers)
    gone = _lut(brokers, size)
    live = st.alive_lut(size) & ~gone
    rows = _Index(st.replicas).rows_on(brokers)
    leader, isr, has_state = st.leader.copy(), st.isr.copy(), st.has_state.copy()
    alive = st.alive_lut(size)
    visit = death_order(brokers, alive, st.hosting_lut(size))
    out = apply_rule(_batch(st, rows, leader, isr, has_state), mode, gone, live, brokers, alive, visit)
    leader[rows], has_state[rows] = out.leader, out.has_state
    isr[rows] = _pad(out.isr, isr.shape[1])[:, : isr.shape[1]]
    alternatives = np.full(isr.shape, -1, dtype=np.int32)
    alternatives[rows] = _pad(out.alternatives, isr.shape[1])[:, : isr.shape[1]]
    names = np.asarray(st.topic_names, dtype=object)
    return pa.table({
        "topic": pa.array(names[st.topic_idx], pa.string()) if len(names) else pa.array([], pa.string()),
        "partition": pa.array(st.partition, pa.int32()),
        "leader": pa.array(leader, pa.int32()),
        "isr": matrix_to_list(isr),
        "offline": pa.array(leader < 0),
        "has_state": pa.array(has_state),
        "isr_alternatives": matrix_to_list(alternatives),
    })


@dataclass
class ReplayResult:
    rows: pa.Table       # risk_model.ROW_COLUMNS, ordered by (scenario_id, snapshot order)
    scenarios: pa.Table  # risk_model.SCENARIO_COLUMNS, ordered by scenario_id


def _facts(st: ClusterState, rows: np.ndarray, leader_before: np.ndarray, out: Outcome,
           eff_min: rm.Expr, mode: str = "failure", gone: np.ndarray | None = None) -> dict[str, np.ndarray]:
    n = len(rows)
    env = {
        "leader_changes": out.leader_changes if out.leader_changes is not None else np.zeros(n, np.int32),
        "shutdown_blocked_by": (out.blocks_shutdown if out.blocks_shutdown is not None
                                else np.full(n, -1, np.int32)),
        "order_dependent": out.order_dependent if out.order_dependent is not None else np.zeros(n, bool),
        "failure_mode": np.full(n, mode == "failure"),
        "leader_gone": _in(leader_before, gone) if gone is not None else np.zeros(n, bool),
        "leader": leader_before,
        "new_leader": out.leader,
        "new_isr_size": _size(out.isr),
        "rf": _size(st.replicas[rows]).astype(np.int32),
        "min_isr": st.min_isr[rows],
        "unclean_allowed": st.unclean[rows],
        "unclean_taken": out.unclean_taken,
        "live_replica_exists": out.live_replica_exists,
    }
    env["eff_min_isr"] = np.broadcast_to(rm.eval_numpy(eff_min, env), len(rows)).astype(np.int32)
    for name, expr in rm.OUTCOMES.items():
        env[name] = np.broadcast_to(rm.eval_numpy(expr, env), len(rows)).astype(bool)
    env["severity"] = np.broadcast_to(rm.eval_numpy(rm.SEVERITY, env), len(rows)).astype(np.int8)
    return env


def _row_table(st: ClusterState, sid: int, rows: np.ndarray, isr_before: np.ndarray,
               out: Outcome, env: dict[str, np.ndarray], returned: np.ndarray | None,
               replicas: np.ndarray | None = None, demoted_from: np.ndarray | None = None) -> pa.Table:
    names = np.asarray(st.topic_names, dtype=object)
    cols: dict[str, pa.Array] = {
        "scenario_id": pa.array(np.full(len(rows), sid, dtype=np.int32)),
        "topic": pa.array(names[st.topic_idx[rows]] if len(rows) else [], pa.string()),
        "partition": pa.array(st.partition[rows], pa.int32()),
        "replicas": matrix_to_list(st.replicas[rows] if replicas is None else replicas),
        "rf": pa.array(env["rf"], pa.int32()),
        "eff_min_isr": pa.array(env["eff_min_isr"], pa.int32()),
        "leader": pa.array(env["leader"], pa.int32()),
        "isr": matrix_to_list(isr_before),
        "new_leader": pa.array(out.leader, pa.int32()),
        "new_isr": matrix_to_list(out.isr),
    }
    for name in rm.OUTCOMES:
        cols[name] = pa.array(env[name], pa.bool_())
    cols["severity"] = pa.array(env["severity"], pa.int8())
    cols["returned_leader"] = (pa.array(returned, pa.int32()) if returned is not None
                               else pa.nulls(len(rows), pa.int32()))
    cols["leader_changes"] = pa.array(env["leader_changes"], pa.int32())
    cols["shutdown_blocked_by"] = pa.array(env["shutdown_blocked_by"], pa.int32())
    no_list = pa.array([[]] * len(rows), pa.list_(pa.int32()))
    cols["clean_return"] = matrix_to_list(out.clean_return) if out.clean_return is not None else no_list
    cols["isr_alternatives"] = matrix_to_list(out.alternatives) if out.alternatives is not None else no_list
    cols["demoted_from"] = (pa.array(demoted_from, pa.int32(), mask=demoted_from < 0) if demoted_from is not None
                            else pa.nulls(len(rows), pa.int32()))
    return pa.table(cols)


def replay(state: ClusterState, scenarios: Sequence[rm.Scenario], kafka_version: str = rm.DEFAULT_KAFKA_VERSION,
           plan_state: ClusterState | None = None,
           session_timeout_s: float = rm.DEFAULT_SESSION_TIMEOUT_S) -> ReplayResult:
    """Evaluate every scenario: only partitions with a replica on the scenario's brokers are evaluated."""
    eff_min = rm.effective_min_isr(kafka_version)
    row_tables: list[pa.Table] = []
    info: list[dict] = []
    states = {"current": state, "plan": plan_state}
    indexes: dict[str, _Index] = {}
    hosting: dict[str, list[int]] = {}
    # Rolling sequences carry state between their steps: leader/isr/has_state of the whole cluster.
    carried: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for s in sorted(scenarios, key=lambda x: x.id):
        st = states[s.state]
        if st is None:
            raise ValueError(f"scenario {s.name} needs the plan state")
        if s.state not in indexes:
            indexes[s.state] = _Index(st.replicas)
            hosting[s.state] = st.hosting_ids().tolist()
        size = st.lut_size(s.brokers)
        alive = st.alive_lut(size)
        gone = _lut(s.brokers, size)
        live = alive & ~gone
        visit = death_order(s.brokers, alive, _lut(hosting[s.state], size))
        if s.kind == "rolling" and s.step > 1:
            leader_all, isr_all, hs_all = carried[s.sequence]
        else:
            leader_all, isr_all, hs_all = st.leader, st.isr, st.has_state  # read only
        rows = indexes[s.state].rows_on(s.brokers)
        b = _batch(st, rows, leader_all, isr_all, hs_all)
        base_leader, demoted_from = b.leader, None
        if s.kind == "restart":   # the roll demotes the step's broker before it stops
            b, demoted_from, _ = demote(b, s.brokers[0], alive)
        out = apply_rule(b, s.mode, gone, live, s.brokers, alive, visit)
        env = _facts(st, rows, b.leader, out, eff_min, s.mode, gone)
        if s.kind == "rolling":
            leader_r, isr_r, hs_r = return_brokers(b, out, b.isr, gone, alive)
        row_tables.append(_row_table(st, s.id, rows, b.isr, out, env, leader_r if s.kind == "rolling" else None,
                                     b.replicas if demoted_from is not None else None, demoted_from))

        counts = np.bincount(leader_all[leader_all >= 0], minlength=size).astype(np.int64)[:size]
        np.subtract.at(counts, base_leader[base_leader >= 0], 1)
        np.add.at(counts, out.leader[out.leader >= 0], 1)
        survivors = np.zeros(size, dtype=bool)
        survivors[st.broker_ids[st.alive]] = True
        survivors &= ~gone
        rec: dict = {k: int(env[k].sum()) for k in rm.COUNTED}
        rec["evaluated"] = len(rows)
        rec.update(rm.leader_load(counts, survivors))
        blocked = out.blocks_shutdown if out.blocks_shutdown is not None else np.zeros(0, np.int32)
        rec["failed_shutdowns"] = sorted(set(blocked[blocked >= 0].tolist()))
        rec["unavailable_window_s"] = rm.unavailable_window(s.mode, session_timeout_s)
        info.append({"scenario": s, **rec})

        if s.kind == "rolling":
            leader_all, isr_all, hs_all = leader_all.copy(), isr_all.copy(), hs_all.copy()
            leader_all[rows], hs_all[rows] = leader_r, hs_r
            isr_all[rows] = _pad(isr_r, isr_all.shape[1])[:, : isr_all.shape[1]]
            carried[s.sequence] = (leader_all, isr_all, hs_all)
    return ReplayResult(_concat_rows(row_tables), rm.scenario_table(info))


def _concat_rows(tables: list[pa.Table]) -> pa.Table:
    if tables:
        return pa.concat_tables(tables)
    return pa.table({c: pa.array([], t) for c, t in rm.ROW_TYPES.items()})


def baseline(state: ClusterState, kafka_version: str = rm.DEFAULT_KAFKA_VERSION) -> dict[str, int]:
    """The health of the cluster as it is (no scenario), counted with the same outcome definitions."""
    n = state.num_partitions
    # As it is: a leader that is not registered leads nothing; ISR members not registered are not in sync.
    alive = state.alive_lut(state.lut_size())
    live_leader = np.where((state.leader >= 0) & alive[np.maximum(state.leader, 0)], state.leader, -1)
    live_isr = ((state.isr >= 0) & alive[np.maximum(state.isr, 0)]).sum(axis=1)
    env = {
        "leader": state.leader, "new_leader": live_leader, "new_isr_size": live_isr, "rf": state.rf,
        "min_isr": state.min_isr, "unclean_allowed": state.unclean, "unclean_taken": np.zeros(n, dtype=bool),
        "live_replica_exists": np.ones(n, dtype=bool),
    }
    env["eff_min_isr"] = np.broadcast_to(rm.eval_numpy(rm.effective_min_isr(kafka_version), env), n)
    out = {"partitions": n}
    for name in ("offline", "under_min_isr", "at_min_isr", "under_replicated", "rf1_hit"):
        out[name] = int(np.asarray(rm.eval_numpy(rm.OUTCOMES[name], env)).sum())
    out["rf1"] = out.pop("rf1_hit")
    return out
