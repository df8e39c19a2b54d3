"""Reference replay of the KRaft controller's election rules (Kafka 4.1.1), pure numpy: what a drain does.

planner.replay is the ZooKeeper-mode reference; this is its KRaft twin, read from Kafka's own source
(kafka-metadata 4.1.1, the sources jar Maven Central serves for tag 4.1.1; line numbers below are that file's):
`org.apache.kafka.controller.PartitionChangeBuilder` (PCB), `ReplicationControlManager` (RCM),
`BrokerHeartbeatManager` (BHM), `FeatureControlManager` (FCM). Each rule is one function over a batch of
partitions at once (dense matrices padded with -1), so a sweep has no Python loop over partitions.

How a scenario reaches the partitions (every path ends in RCM.generateLeaderAndIsrUpdates, L1974-2055, which
builds one PartitionChangeBuilder per partition whose ISR holds the broker):
- controlled shutdown (SIGTERM): the broker's heartbeat asks to shut down; BHM.calculateNextBrokerState
  (L440-449) grants CONTROLLED_SHUTDOWN, and RCM.handleBrokerInControlledShutdown (L1427-1436) removes the
  broker from every ISR it is in and re-elects what it leads, the broker no longer an acceptable leader
  (ClusterControlManager.isActive: registered, not fenced, not in controlled shutdown). Every partition it led
  gets another leader or none (-1) at once, so `hasLeaderships` is false and the shutdown is granted
  (BHM L453-466 -> SHUTDOWN_NOW -> handleBrokerFenced, RCM L1616-1618): unlike ZooKeeper mode a KRaft
  controlled shutdown never fails on leaderships, and an RF=1 partition goes leaderless at the request, while
  its broker still runs. Several brokers: one request at a time in the order given (a broker that has not
  asked yet is still a candidate, so a leader can move twice), then each is fenced.
- hard failure (kill): the broker's session expires (broker.session.timeout.ms, 9 s by default) and
  RCM.maybeFenceOneStaleBroker (L1670-1698) fences it through handleBrokerFenced (L1362-1373): the same
  partition rule. Several brokers are fenced "one at a time so that the effect of fencing each broker is
  visible" (L1690-1692), in the order their sessions expire: the prediction takes the order given, and flags
  the rows whose result another order would change (`order_dependent`, `alternatives`).
- return (rolling steps): a killed broker re-registers after an unclean shutdown: with ELR on it leaves every
  ISR and ELR (RCM.handleBrokerShutdown L1445-1457, `brokerWithUncleanShutdown`), a cleanly stopped one as if
  fenced; once caught up it is unfenced (RCM.handleBrokerUnfenced L1407-1414): leaderless partitions are
  elected with it acceptable; then its leaders add it back to the ISRs it was in (AlterPartition).

ELR (KIP-966) is on where the finalized feature eligible.leader.replicas.version >= 1 (FCM.isElrFeatureEnabled
L470-473; a fresh 4.1.1 format finalizes level 1). The effective min ISR is min(min.insync.replicas, the RF of
the topic's partition 0) (RCM.getTopicEffectiveMinIsr L2350-2356). The builder keeps the last known leader in
`last_known_elr` (useLastKnownLeaderInBalancedRecovery is true and nothing in 4.1.1 sets it false).
Reassignments in progress are not completed by the replay (as planner.replay); leader epochs and leader
recovery states are not modelled; log-dir failures (LeaderAcceptor.hasOnlineDir) are not modelled.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from planner import replay as zk
from planner import risk_model as rm
from planner.errors import BadInput
from planner.snapshot_io import Snapshot, list_to_matrix, matrix_to_list

ELR_FEATURE = "eligible.leader.replicas.version"
# broker.session.timeout.ms (KRaft's default): how long a killed broker's partitions stay unanswered
DEFAULT_SESSION_TIMEOUT_S = 9.0
NO_CHANGE = -2   # LeaderConstants.NO_LEADER_CHANGE

_in, _first, _keep, _member, _size, _pad = zk._in, zk._first, zk._keep, zk._member, zk._size, zk._pad


# ------------------------------------------------------------------------------------------- source
@dataclass(frozen=True)
class KraftSource:
    """The manifest's `source` of a KRaft snapshot: metadata version and finalized features."""

    metadata_version: str | None
    features: dict[str, int]

    @property
    def elr(self) -> bool:
        """FeatureControlManager.isElrFeatureEnabled (L470-473): eligible.leader.replicas.version >= 1."""
        return int(self.features.get(ELR_FEATURE, 0)) >= 1

    def describe(self) -> str:
        return (f"KRaft, metadata.version {self.metadata_version or 'unknown'}, "
                f"ELR {'on' if self.elr else 'off'} ({ELR_FEATURE}={int(self.features.get(ELR_FEATURE, 0))})")


def kraft_source(manifest: dict[str, Any]) -> KraftSource | None:
    """The KRaft source of a snapshot's manifest, None for a ZooKeeper snapshot (`source` absent = zookeeper).
    A KRaft snapshot whose features are unknown is refused: whether ELR is on decides the rules."""
    src = manifest.get("source")
    if not src or src.get("backend", "zookeeper") == "zookeeper":
        return None
    if src.get("backend") != "kraft":
        raise BadInput(f"the snapshot's source backend {src.get('backend')!r} is neither zookeeper nor kraft")
    feats = src.get("features")
    if feats is None:
        raise BadInput("the KRaft snapshot does not say its finalized features, so whether ELR (KIP-966) is on is "
                       "unknown: take the snapshot again with a kplan that reads them")
    return KraftSource(src.get("metadata_version"), {str(k): int(v) for k, v in feats.items()})


# ------------------------------------------------------------------------------------ cluster state
@dataclass
class KraftState:
    """planner.replay.ClusterState plus what the KRaft rules also read: ELR, last known ELR, which brokers
    are acceptable leaders, and the effective min ISR of each partition's topic."""

    base: zk.ClusterState
    elr: np.ndarray          # int32 (P, W) -1 padded, as the controller stores it
    lke: np.ndarray          # int32 (P, W) last known ELR (= the last known leader while ELR is on)
    eff_min: np.ndarray      # int32 (P,) the controller's min ISR for the ELR: min(min.insync.replicas, RF of
                             # the topic's partition 0); produce-side outcomes use the partition's own RF
    active: np.ndarray       # bool (B,) registered, not fenced, not in controlled shutdown
    elr_enabled: bool

    @classmethod
    def from_snapshot(cls, snap: Snapshot, source: KraftSource | None = None) -> KraftState:
        source = source or kraft_source(snap.manifest) or KraftSource(None, {})
        base = zk.ClusterState.from_snapshot(snap)
        parts = snap.partitions
        if "state_error" in parts.column_names and parts.column("state_error").null_count < parts.num_rows:
            parts = parts.filter(parts.column("state_error").is_null())   # as ClusterState.from_snapshot
        width = base.replicas.shape[1]
        lists = {}
        for name in ("elr", "last_known_elr"):
            if name in parts.column_names:
                c = parts.column(name)
                c = pc.fill_null(c, pa.scalar([], pa.list_(pa.int32()))) if c.null_count else c
                m = list_to_matrix(c)
                width = max(width, m.shape[1])
                lists[name] = m
            else:
                lists[name] = np.full((parts.num_rows, 0), -1, dtype=np.int32)
        active = cls.active_of(snap.brokers)
        base = replace(base, replicas=_pad(base.replicas, width), isr=_pad(base.isr, width))
        return cls(base, _pad(lists["elr"], width), _pad(lists["last_known_elr"], width),
                   topic_min_isr(base), active, source.elr)

    @staticmethod
    def active_of(brokers: pa.Table) -> np.ndarray:
        """Per broker row: registered (`alive`), not fenced, not in controlled shutdown
        (ClusterControlManager.isActive L741-745)."""
        n = brokers.num_rows

        def flag(col: str) -> np.ndarray:
            if col not in brokers.column_names:
                return np.zeros(n, dtype=bool)
            return np.asarray(brokers.column(col).fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)

        alive = np.asarray(brokers.column("alive").to_numpy(zero_copy_only=False), dtype=bool)
        return alive & ~flag("fenced") & ~flag("in_controlled_shutdown")

    def active_lut(self, size: int) -> np.ndarray:
        lut = np.zeros(size, dtype=bool)
        lut[self.base.broker_ids[self.active]] = True
        return lut

    def with_plan(self, entries: Sequence[Any]) -> KraftState:
        """The state once a reassignment completes (planner.replay.ClusterState.with_plan): for the listed
        partitions the ELR and last known ELR are empty (a full ISR clears them, PCB L540-543)."""
        base = self.base.with_plan(entries)
        width = base.replicas.shape[1]
        elr, lke = _pad(self.elr.copy(), width), _pad(self.lke.copy(), width)
        if entries:
            rows = self.base.row_index([e.topic for e in entries], [e.partition for e in entries])
            elr[rows], lke[rows] = -1, -1
        return replace(self, base=base, elr=elr, lke=lke, eff_min=topic_min_isr(base))


def topic_min_isr(st: zk.ClusterState) -> np.ndarray:
    """RCM.getTopicEffectiveMinIsr (L2350-2356): min(the topic's min.insync.replicas, the replica count of the
    topic's partition 0). A topic whose partition 0 is not in the snapshot: its lowest partition's."""
    rf = st.rf
    order = np.lexsort((st.partition, st.topic_idx))
    first = np.full(len(st.topic_names), -1, dtype=np.int64)
    t = st.topic_idx[order]
    is_first = np.ones(len(order), dtype=bool)
    is_first[1:] = t[1:] != t[:-1]
    first[t[is_first]] = order[is_first]
    rf0 = rf[first[st.topic_idx]] if len(st.topic_idx) else rf
    return np.minimum(st.min_isr, rf0).astype(np.int32)


# ------------------------------------------------------------------------------------ rules
@dataclass
class Parts:
    """A batch of partitions and their KRaft state (rows of a KraftState)."""

    replicas: np.ndarray
    isr: np.ndarray
    elr: np.ndarray
    lke: np.ndarray
    leader: np.ndarray
    eff_min: np.ndarray
    unclean: np.ndarray   # the topic's unclean.leader.election.enable (RCM L2023-2025: Election.UNCLEAN)

    def take(self, rows: np.ndarray) -> Parts:
        return Parts(*(getattr(self, f)[rows] for f in ("replicas", "isr", "elr", "lke", "leader", "eff_min",
                                                        "unclean")))

    def put(self, rows: np.ndarray, other: Parts) -> None:
        for f in ("isr", "elr", "lke", "leader"):
            getattr(self, f)[rows] = getattr(other, f)


def without(m: np.ndarray, broker: int) -> np.ndarray:
    """Replicas.copyWithout(isr, {broker}) (RCM L2032-2033): the list without `broker`, order kept."""
    return _keep(m, m != broker)


def hashset_order(cand: np.ndarray, initial: np.ndarray) -> np.ndarray:
    """The iteration order of the java.util.HashSet<Integer> PCB.maybePopulateTargetElr builds (L553-558):
    `new HashSet<>(targetElr)`, then the ISR added, streamed. A HashMap iterates bucket by bucket, a bucket's
    entries in insertion order (a resize splits a bucket keeping that order); an Integer's bucket is
    (h ^ h >>> 16) & (capacity - 1). Capacity: HashSet(Collection) sizes max(n / .75 + 1, 16) rounded up to a
    power of two (n = |targetElr|, `initial`), doubled while the set holds more than .75 of it.
    `cand`: the set's members in insertion order, distinct, -1 padded. Returns them in iteration order."""
    n, w = cand.shape
    if w == 0:
        return cand
    size = _size(cand)
    cap = np.maximum(np.floor(initial / 0.75).astype(np.int64) + 1, 16)
    cap = (1 << np.ceil(np.log2(cap)).astype(np.int64))
    while (grow := size > cap * 3 // 4).any():
        cap = np.where(grow, cap * 2, cap)
    h = cand.astype(np.int64)
    bucket = (h ^ (h >> 16)) & (cap[:, None] - 1)
    key = np.where(cand >= 0, bucket * w + np.arange(w), np.iinfo(np.int64).max)
    return np.take_along_axis(cand, np.argsort(key, axis=1, kind="stable"), axis=1)


def _dedupe(m: np.ndarray) -> np.ndarray:
    """Each row's distinct entries, first occurrences kept in order."""
    w = m.shape[1]
    before = np.tri(w, w, -1, dtype=bool).T          # [a, b]: a < b
    earlier = ((m[:, :, None] == m[:, None, :]) & before[None]).any(axis=1)
    return _keep(m, ~earlier)


def populate_elr(isr: np.ndarray, target_isr: np.ndarray, elr: np.ndarray, eff_min: np.ndarray,
                 unclean_shutdown: int = -1) -> np.ndarray:
    """PCB.maybePopulateTargetElr (L536-567), ELR on: where the target ISR holds at least min ISR members
    the ELR empties (L540-543); otherwise ELR = (ELR + the ISR before) minus the target ISR and minus a broker
    that shut down uncleanly (L553-558), in HashSet order (`hashset_order`). So a fenced broker that leaves an
    ISR already below min ISR joins the ELR: it holds every committed record and may lead again cleanly."""
    cand = _dedupe(np.concatenate([elr, isr], axis=1))
    ordered = hashset_order(cand, _size(elr))
    keep = ~_member(ordered, target_isr) & (ordered != unclean_shutdown) & (ordered >= 0)
    new = _keep(ordered, keep)[:, : max(elr.shape[1], isr.shape[1])]
    full = _size(target_isr) >= eff_min
    return np.where(full[:, None], -1, new).astype(np.int32)


@dataclass
class Change:
    """What one PartitionChangeBuilder.build() leaves, per row, and how it got there."""

    parts: Parts
    changed: np.ndarray        # the leader changed (record.leader set)
    unclean: np.ndarray        # the election was unclean (outside ISR and ELR, or the last known leader)
    from_elr: np.ndarray       # the new leader came from the ELR (clean)


def elect(p: Parts, target_isr: np.ndarray, target_elr: np.ndarray, acceptable: np.ndarray,
          elr_enabled: bool) -> tuple[np.ndarray, np.ndarray]:
    """PCB.electAnyLeader (L260-288), Election ONLINE or UNCLEAN (the topic's unclean.leader.election.enable,
    RCM L2023-2025). In this order:
    - the current leader, if still a valid leader (L261-264);
    - else the first replica in assignment order that is valid (L266-271);
      valid = acceptable and in the target ISR, or, when the target ISR is empty, in the ELR (isValidNewLeader,
      L322-326);
    - else the last known leader, where ELR is on, ISR and ELR are both empty, the last known ELR holds exactly
      one broker and it is acceptable (canElectLastKnownLeader L290-320): an unclean election (L273-275);
    - else, with Election.UNCLEAN, the first acceptable replica, unclean (L277-285);
    - else no leader (-1).
    `acceptable`: lookup table of LeaderAcceptor (RCM L2454-2477 over L1998-2000: active, not the broker being
    removed). Returns (the leader, whether the election was unclean)."""
    ok_r = _in(p.replicas, acceptable)
    isr_empty = _size(target_isr) == 0
    valid = ok_r & (_member(p.replicas, target_isr) | (isr_empty[:, None] & _member(p.replicas, target_elr)))
    lead = p.leader
    cur_ok = (lead >= 0) & (_member(lead[:, None], target_isr)[:, 0] | (isr_empty & _member(lead[:, None],
                                                                                             target_elr)[:, 0]))
    cur_ok &= _in(lead, acceptable)
    first_valid = _first(p.replicas, valid)
    lkl = p.lke[:, 0] if p.lke.shape[1] else np.full(len(lead), -1, np.int32)
    lkl_ok = (elr_enabled & isr_empty & (_size(target_elr) == 0) & (_size(p.lke) == 1) & _in(lkl, acceptable))
    pick = _first(p.replicas, ok_r)
    unclean_ok = p.unclean & (pick >= 0)
    node = np.where(cur_ok, lead, np.where(first_valid >= 0, first_valid,
                                           np.where(lkl_ok, lkl, np.where(unclean_ok, pick, -1))))
    unclean = ~cur_ok & (first_valid < 0) & (lkl_ok | unclean_ok)
    return node.astype(np.int32), unclean


def build(p: Parts, acceptable: np.ndarray, elr_enabled: bool, remove: int = -1, unclean_shutdown: int = -1,
          target_isr: np.ndarray | None = None) -> Change:
    """One PartitionChangeBuilder.build() (PCB L430-470) per row, as RCM.generateLeaderAndIsrUpdates calls it
    (L2014-2036) with `remove` = brokerToRemove (fenced, or entering controlled shutdown) or
    `unclean_shutdown` = brokerWithUncleanShutdown; neither, with `target_isr`, is an AlterPartition ISR change.
    - target ISR = the ISR without those brokers (L2032-2033); the ELR, where ELR is on: `populate_elr` (L437);
    - the election (`elect`, L439 -> tryElection L328-360): a leader taken from the ELR gets ISR = [leader]
      and leaves the ELR (L334-337); an unclean one gets ISR = [leader] (L348-351);
    - an unclean election, or ELR off, empties the ELR (maybeUpdateRecordElr L508-518);
    - the ISR is written when it changed and is not empty, or ELR is on (L446-453): with ELR off an ISR never
      empties (the last member stays, as in ZooKeeper mode); with ELR on it can;
    - ELR on: the last known ELR becomes [the leader before] when the partition first loses its leader, and
      empties when it gets a leader again (maybeUpdateLastKnownLeader L495-504)."""
    acc = acceptable.copy()
    for b in (remove, unclean_shutdown):
        if 0 <= b < len(acc):
            acc[b] = False
    if target_isr is None:
        target_isr = without(without(p.isr, remove), unclean_shutdown)
    target_elr = populate_elr(p.isr, target_isr, p.elr, p.eff_min, unclean_shutdown) if elr_enabled else p.elr
    node, unclean = elect(p, target_isr, target_elr, acc, elr_enabled)
    changed = node != p.leader
    from_elr = changed & _member(node[:, None], target_elr)[:, 0]
    if from_elr.any():
        target_isr = np.where(from_elr[:, None], _pad(node[:, None], target_isr.shape[1])[:, : target_isr.shape[1]],
                              target_isr)
        target_elr = np.where(from_elr[:, None], _keep(target_elr, target_elr != node[:, None]), target_elr)
    unclean &= changed
    if not elr_enabled:
        target_elr = np.full_like(p.elr, -1)
    target_elr = np.where(unclean[:, None], -1, target_elr)
    write = (_size(target_isr) > 0) | elr_enabled
    isr = np.where(write[:, None], target_isr, p.isr)
    isr = np.where(unclean[:, None], _pad(node[:, None], isr.shape[1])[:, : isr.shape[1]], isr).astype(np.int32)
    lke = p.lke
    if elr_enabled:
        first_lost = changed & (node < 0) & (_size(p.lke) == 0)
        regained = changed & (node >= 0) & (_size(p.lke) > 0)
        old = _pad(p.leader[:, None], p.lke.shape[1])[:, : p.lke.shape[1]] if p.lke.shape[1] else p.lke
        lke = np.where(first_lost[:, None], old, np.where(regained[:, None], -1, p.lke)).astype(np.int32)
    out = Parts(p.replicas, isr, target_elr.astype(np.int32), lke, node, p.eff_min, p.unclean)
    return Change(out, changed, unclean, from_elr)


# ------------------------------------------------------------------------------------ events
@dataclass
class Event:
    """One controller event touching the partitions: `kind` is 'remove' (controlled-shutdown request or
    fencing: brokerToRemove), 'unclean_return' (re-registration after an unclean shutdown with ELR on),
    'unfence' (brokerToAdd) or 'rejoin' (the leaders add the broker back to the ISRs in `isr_start`)."""

    kind: str
    broker: int


def events(brokers: Sequence[int], mode: str) -> list[Event]:
    """The controller events a scenario makes, in order. controlled: each broker's controlled-shutdown request
    (handleBrokerInControlledShutdown), then each broker fenced once granted (handleBrokerFenced); failure: each
    broker fenced as its session expires. Both use the same partition rule (generateLeaderAndIsrUpdates with
    brokerToRemove), so a KRaft drain ends the same in both modes for the same order; what differs is when
    (a controlled shutdown moves leaders while the broker still serves; a kill leaves its partitions
    unanswered until its session expires) and what a return finds (`return_events`)."""
    if mode not in rm.MODES:
        raise ValueError(f"mode must be one of {rm.MODES}, got {mode!r}")
    ev = [Event("remove", b) for b in brokers]
    return ev + [Event("remove", b) for b in brokers] if mode == "controlled" else ev


@dataclass
class Outcome:
    parts: Parts
    unclean_taken: np.ndarray
    live_replica_exists: np.ndarray
    leader_changes: np.ndarray
    order_dependent: np.ndarray
    alternatives: np.ndarray
    clean_return: np.ndarray


def run_events(p: Parts, evs: Iterable[Event], active: np.ndarray, elr_enabled: bool,
               isr_start: np.ndarray | None = None) -> tuple[Parts, np.ndarray, np.ndarray, np.ndarray]:
    """Apply controller events in order to a batch (copied). Each event touches only the rows the controller
    iterates: 'remove' the partitions whose ISR holds the broker (brokersToIsrs.partitionsWithBrokerInIsr),
    'unclean_return' those whose ISR or ELR holds it (L1448-1451), 'unfence' the leaderless ones
    (partitionsWithNoLeader), 'rejoin' those with a leader whose ISR lacks a replica that was in it at
    `isr_start`. `active` is updated (a removed broker is no longer acceptable; an unfenced one is).
    Returns (the batch after, leader changes per row, unclean elections per row, active)."""
    p = Parts(p.replicas, p.isr.copy(), p.elr.copy(), p.lke.copy(), p.leader.copy(), p.eff_min, p.unclean)
    active = active.copy()
    n = len(p.leader)
    changes = np.zeros(n, dtype=np.int32)
    unclean = np.zeros(n, dtype=bool)
    for e in evs:
        k = e.broker
        kw: dict[str, Any] = {}
        if e.kind == "remove":
            rows = np.flatnonzero((p.isr == k).any(axis=1))
            kw["remove"] = k
        elif e.kind == "unclean_return":
            rows = np.flatnonzero((p.isr == k).any(axis=1) | (p.elr == k).any(axis=1))
            kw["unclean_shutdown"] = k
        elif e.kind == "unfence":
            active[k] = True
            rows = np.flatnonzero(p.leader < 0)
        elif e.kind == "rejoin":
            assert isr_start is not None
            rows = np.flatnonzero((p.leader >= 0) & (isr_start == k).any(axis=1) & ~(p.isr == k).any(axis=1)
                                  & (p.replicas == k).any(axis=1))
            if len(rows):
                sub = p.take(rows)
                grown = _pad(sub.isr, sub.isr.shape[1] + 1)
                grown[np.arange(len(rows)), _size(sub.isr)] = k
                kw["target_isr"] = grown[:, : p.isr.shape[1]]   # an ISR is within the replicas: it fits
        else:
            raise ValueError(e.kind)
        if len(rows):
            ch = build(p.take(rows), active, elr_enabled, **kw)
            w = p.isr.shape[1]
            ch.parts.isr = _pad(ch.parts.isr, w)[:, :w]
            p.put(rows, ch.parts)
            changes[rows] += (ch.changed & (ch.parts.leader >= 0)).astype(np.int32)
            unclean[rows] |= ch.unclean
        if e.kind in ("remove", "unclean_return"):
            active[k] = False
    return p, changes, unclean, active


def drain(p: Parts, brokers: Sequence[int], mode: str, active: np.ndarray, elr_enabled: bool) -> Outcome:
    """A scenario: `brokers` stopped (controlled, requests in the order given) or killed (failure, fenced in the
    order given). Rows flagged `order_dependent` had several of the scenario's brokers in their ISR, killed:
    the fencing order follows the sessions' expiry, which the operator does not control, and with another
    order the ISR of a leaderless partition (ELR off: it keeps the broker fenced last) or the ELR of one left
    below min ISR (ELR on: it holds the ISR's members when it fell below min ISR) names others:
    `alternatives` lists them."""
    brokers = [b for b in dict.fromkeys(int(x) for x in brokers) if 0 <= b < len(active) and active[b]]
    out, changes, unclean, after = run_events(p, events(brokers, mode), active, elr_enabled)
    gone = zk._lut(brokers, len(active))
    leaderless = out.leader < 0
    hit = _in(p.isr, gone)
    # ELR off: a leaderless ISR keeps the member fenced last, any of them. ELR on: the ELR holds the members
    # in the ISR when it fell below min ISR; with another order any of them is (the last one fenced always
    # is), so the rows left below min ISR may name others. The leader does not depend on the order.
    kept = out.isr if not elr_enabled else out.elr
    others = _keep(p.isr, hit & ~_member(p.isr, kept))
    below = leaderless if not elr_enabled else (_size(out.isr) < p.eff_min)
    order_dep = (mode == "failure") & below & (hit.sum(axis=1) >= 2) & (_size(others) > 0)
    alternatives = np.where(order_dep[:, None], others, -1).astype(np.int32)
    clean_return = _dedupe(_keep(np.concatenate([out.isr, out.elr, alternatives], axis=1), leaderless[:, None]))
    live = _in(p.replicas, after).any(axis=1)
    return Outcome(out, unclean, live, changes, order_dep, alternatives, clean_return)


def return_events(brokers: Sequence[int], mode: str, elr_enabled: bool) -> list[Event]:
    """The events of a rolling step's brokers coming back: after a kill (an unclean shutdown) with ELR on, the
    re-registration removes the broker from every ISR and ELR (RCM.handleBrokerShutdown L1446-1451); after a
    clean shutdown (or ELR off) it is handled as fenced (L1452-1455), which changes nothing left. Then the
    broker is unfenced (handleBrokerUnfenced L1407-1414) and rejoins the ISRs it was in."""
    out: list[Event] = []
    for b in brokers:
        if mode == "failure" and elr_enabled:
            out.append(Event("unclean_return", b))
        out += [Event("unfence", b), Event("rejoin", b)]
    return out


def demote(p: Parts, broker: int, active: np.ndarray) -> tuple[Parts, np.ndarray]:
    """A restart roll's demotion (planner.replay.demote, the reordered replica list then a preferred election):
    KRaft's PCB.electPreferredLeader (L231-255) elects replicas[0] when it is valid, as the ZooKeeper rule does
    for a live in-sync first replica, so the ZooKeeper demotion applies with `active` brokers as the live ones.
    The ELR is empty on these rows unless the ISR is below min ISR, and the election does not touch it."""
    b = zk.Batch(p.replicas, p.isr, p.leader, np.ones(len(p.leader), dtype=bool), p.unclean)
    nb, demoted_from, _ = zk.demote(b, broker, active)
    return replace(p, replicas=nb.replicas, leader=nb.leader), demoted_from


# ------------------------------------------------------------------------------------ predictions
def _parts(st: KraftState, rows: np.ndarray, leader: np.ndarray | None = None, isr: np.ndarray | None = None,
           elr: np.ndarray | None = None, lke: np.ndarray | None = None) -> Parts:
    b = st.base
    return Parts(b.replicas[rows], (b.isr if isr is None else isr)[rows], (st.elr if elr is None else elr)[rows],
                 (st.lke if lke is None else lke)[rows], (b.leader if leader is None else leader)[rows],
                 st.eff_min[rows], b.unclean[rows])


def predict(state: KraftState | Snapshot, brokers: Iterable[int], mode: str) -> pa.Table:
    """What the cluster looks like once `brokers` are stopped (controlled, requests in the order given) or
    killed (failure, fenced in the order given): one row per partition (unaffected ones unchanged), with
    leader, isr, elr, last_known_elr, offline, under_min_isr, unclean (an unclean election was taken),
    order_dependent and isr_alternatives. What a real KRaft cluster is compared with."""
    st = state if isinstance(state, KraftState) else KraftState.from_snapshot(state)
    b = st.base
    brokers = list(dict.fromkeys(int(x) for x in brokers))
    size = b.lut_size(brokers)
    rows = zk._Index(b.replicas).rows_on(brokers)
    out = drain(_parts(st, rows), brokers, mode, st.active_lut(size), st.elr_enabled)
    leader, isr, elr, lke = b.leader.copy(), b.isr.copy(), st.elr.copy(), st.lke.copy()
    unclean = np.zeros(len(leader), dtype=bool)
    order_dep = np.zeros(len(leader), dtype=bool)
    alts = np.full(isr.shape, -1, dtype=np.int32)
    leader[rows], isr[rows], elr[rows], lke[rows] = out.parts.leader, out.parts.isr, out.parts.elr, out.parts.lke
    unclean[rows], order_dep[rows] = out.unclean_taken, out.order_dependent
    alts[rows] = _pad(out.alternatives, alts.shape[1])[:, : alts.shape[1]]
    names = np.asarray(b.topic_names, dtype=object)
    return pa.table({
        "topic": pa.array(names[b.topic_idx], pa.string()) if len(names) else pa.array([], pa.string()),
        "partition": pa.array(b.partition, pa.int32()),
        "leader": pa.array(leader, pa.int32()),
        "isr": matrix_to_list(isr),
        "elr": matrix_to_list(elr),
        "last_known_elr": matrix_to_list(lke),
        "offline": pa.array(leader < 0),
        "under_min_isr": pa.array((leader >= 0) & (_size(isr) < np.minimum(b.min_isr, b.rf))),
        "unclean": pa.array(unclean),
        "order_dependent": pa.array(order_dep),
        "isr_alternatives": matrix_to_list(alts),
    })


# ------------------------------------------------------------------------------------ risk rows
KRAFT_ROW_EXTRA = ["elr", "last_known_elr", "new_elr", "new_last_known_elr"]


def replay(state: KraftState, scenarios: Sequence[rm.Scenario], plan_state: KraftState | None = None,
           session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S) -> zk.ReplayResult:
    """Every scenario, as planner.replay.replay does for ZooKeeper mode (same row and scenario columns, plus
    KRAFT_ROW_EXTRA): drains, racks and brokers from the state; rolling steps from the state the previous step
    left once its brokers returned (`return_events`); restart steps from the plan's state, the step's broker
    demoted first. No controlled shutdown fails (`failed_shutdowns` is empty, `shutdown_blocked_by` -1)."""
    rows_out: list[pa.Table] = []
    info: list[dict] = []
    states = {"current": state, "plan": plan_state}
    indexes: dict[str, zk._Index] = {}
    carried: dict[int, tuple[np.ndarray, ...]] = {}
    for s in sorted(scenarios, key=lambda x: x.id):
        st = states[s.state]
        if st is None:
            raise ValueError(f"scenario {s.name} needs the plan state")
        b = st.base
        if s.state not in indexes:
            indexes[s.state] = zk._Index(b.replicas)
        size = b.lut_size(s.brokers)
        active = st.active_lut(size)
        if s.kind == "rolling" and s.step > 1:
            leader_all, isr_all, elr_all, lke_all = carried[s.sequence]
        else:
            leader_all, isr_all, elr_all, lke_all = b.leader, b.isr, st.elr, st.lke
        rows = indexes[s.state].rows_on(s.brokers)
        p = _parts(st, rows, leader_all, isr_all, elr_all, lke_all)
        base_leader, demoted_from, replicas = p.leader, None, None
        if s.kind == "restart":
            p, demoted_from = demote(p, s.brokers[0], active)
            replicas = p.replicas
        out = drain(p, s.brokers, s.mode, active, st.elr_enabled)
        env = _facts(p, out, s.mode, zk._lut(s.brokers, size), b.min_isr[rows])
        returned = None
        if s.kind == "rolling":
            after_active = active & ~zk._lut(s.brokers, size)
            went = [x for x in s.brokers if 0 <= x < size and active[x]]   # an inactive broker does not return
            back, _, _, _ = run_events(out.parts, return_events(went, s.mode, st.elr_enabled), after_active,
                                       st.elr_enabled, isr_start=p.isr)
            returned = back.leader
        rows_out.append(_row_table(st, s.id, rows, p, out, env, returned, replicas, demoted_from))

        counts = np.bincount(leader_all[leader_all >= 0], minlength=size).astype(np.int64)[:size]
        np.subtract.at(counts, base_leader[base_leader >= 0], 1)
        np.add.at(counts, out.parts.leader[out.parts.leader >= 0], 1)
        survivors = active & ~zk._lut(s.brokers, size)
        rec: dict = {k: int(env[k].sum()) for k in rm.COUNTED}
        rec["evaluated"] = len(rows)
        rec.update(rm.leader_load(counts, survivors))
        rec["failed_shutdowns"] = []
        rec["unavailable_window_s"] = rm.unavailable_window(s.mode, session_timeout_s)
        info.append({"scenario": s, **rec})
        if s.kind == "rolling":
            leader_all, isr_all, elr_all, lke_all = (x.copy() for x in (leader_all, isr_all, elr_all, lke_all))
            w = isr_all.shape[1]
            leader_all[rows] = back.leader
            isr_all[rows], elr_all[rows] = _pad(back.isr, w)[:, :w], _pad(back.elr, w)[:, :w]
            lke_all[rows] = _pad(back.lke, w)[:, :w]
            carried[s.sequence] = (leader_all, isr_all, elr_all, lke_all)
    if rows_out:
        table = pa.concat_tables(rows_out)
    else:
        types = {**rm.ROW_TYPES, **{c: pa.list_(pa.int32()) for c in KRAFT_ROW_EXTRA}}
        table = pa.table({c: pa.array([], t) for c, t in types.items()})
    return zk.ReplayResult(table, rm.scenario_table(info))


def _facts(p: Parts, out: Outcome, mode: str, gone: np.ndarray, min_isr: np.ndarray) -> dict[str, np.ndarray]:
    """The per-row facts risk_model's outcome expressions read (planner.replay._facts). Under / at min ISR are
    what producers with acks=all meet: the leader's effective min ISR, min(min.insync.replicas, the partition's
    own RF), as in ZooKeeper mode since 3.7 (risk_model.effective_min_isr); the ELR's is the controller's."""
    n = len(p.leader)
    env: dict[str, np.ndarray] = {
        "leader_changes": out.leader_changes,
        "shutdown_blocked_by": np.full(n, -1, np.int32),
        "order_dependent": out.order_dependent,
        "failure_mode": np.full(n, mode == "failure"),
        "leader_gone": _in(p.leader, gone),
        "leader": p.leader,
        "new_leader": out.parts.leader,
        "new_isr_size": _size(out.parts.isr),
        "rf": _size(p.replicas).astype(np.int32),
        "min_isr": min_isr,
        "unclean_allowed": p.unclean,
        "unclean_taken": out.unclean_taken,
        "live_replica_exists": out.live_replica_exists,
    }
    env["eff_min_isr"] = np.minimum(min_isr, env["rf"]).astype(np.int32)
    for name, expr in rm.OUTCOMES.items():
        env[name] = np.broadcast_to(rm.eval_numpy(expr, env), n).astype(bool)
    env["severity"] = np.broadcast_to(rm.eval_numpy(rm.SEVERITY, env), n).astype(np.int8)
    return env


def _row_table(st: KraftState, sid: int, rows: np.ndarray, p: Parts, out: Outcome, env: dict[str, np.ndarray],
               returned: np.ndarray | None, replicas: np.ndarray | None, demoted_from: np.ndarray | None) -> pa.Table:
    b = st.base
    names = np.asarray(b.topic_names, dtype=object)
    n = len(rows)
    cols: dict[str, pa.Array] = {
        "scenario_id": pa.array(np.full(n, sid, dtype=np.int32)),
        "topic": pa.array(names[b.topic_idx[rows]] if n else [], pa.string()),
        "partition": pa.array(b.partition[rows], pa.int32()),
        "replicas": matrix_to_list(b.replicas[rows] if replicas is None else replicas),
        "rf": pa.array(env["rf"], pa.int32()),
        "eff_min_isr": pa.array(env["eff_min_isr"], pa.int32()),
        "leader": pa.array(p.leader, pa.int32()),
        "isr": matrix_to_list(p.isr),
        "new_leader": pa.array(out.parts.leader, pa.int32()),
        "new_isr": matrix_to_list(out.parts.isr),
    }
    for name in rm.OUTCOMES:
        cols[name] = pa.array(env[name], pa.bool_())
    cols["severity"] = pa.array(env["severity"], pa.int8())
    cols["returned_leader"] = pa.array(returned, pa.int32()) if returned is not None else pa.nulls(n, pa.int32())
    cols["leader_changes"] = pa.array(env["leader_changes"], pa.int32())
    cols["shutdown_blocked_by"] = pa.array(env["shutdown_blocked_by"], pa.int32())
    cols["clean_return"] = matrix_to_list(out.clean_return)
    cols["isr_alternatives"] = matrix_to_list(out.alternatives)
    cols["demoted_from"] = (pa.array(demoted_from, pa.int32(), mask=demoted_from < 0) if demoted_from is not None
                            else pa.nulls(n, pa.int32()))
    cols["elr"] = matrix_to_list(p.elr)
    cols["last_known_elr"] = matrix_to_list(p.lke)
    cols["new_elr"] = matrix_to_list(out.parts.elr)
    cols["new_last_known_elr"] = matrix_to_list(out.parts.lke)
    return pa.table(cols)


def baseline(state: KraftState) -> dict[str, int]:
    """The health of the cluster as it is, with the outcome definitions and KRaft's effective min ISR; a leader
    or ISR member that is not an active broker counts as gone (planner.replay.baseline)."""
    b = state.base
    n = b.num_partitions
    act = state.active_lut(b.lut_size())
    live_leader = np.where(_in(b.leader, act), b.leader, -1)
    env = {"leader": b.leader, "new_leader": live_leader, "new_isr_size": _in(b.isr, act).sum(axis=1),
           "rf": b.rf, "min_isr": b.min_isr, "eff_min_isr": np.minimum(b.min_isr, b.rf), "unclean_allowed": b.unclean,
           "unclean_taken": np.zeros(n, dtype=bool), "live_replica_exists": np.ones(n, dtype=bool)}
    out = {"partitions": n}
    for name in ("offline", "under_min_isr", "at_min_isr", "under_replicated", "rf1_hit"):
        out[name] = int(np.asarray(rm.eval_numpy(rm.OUTCOMES[name], env)).sum())
    out["rf1"] = out.pop("rf1_hit")
    return out
