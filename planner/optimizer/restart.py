"""The restart plan: the smallest temporary change that keeps every partition online, at or above its
effective min ISR and cleanly electable while each broker of a roll is down, one at a time.

A roll restarts brokers one by one; before the next broker goes, the previous one is registered again and
back in every ISR it was in (the roll's gates), so at most one roll broker is missing at a time. With I the
partition's in-sync replicas on registered brokers, T its temporary replicas (in sync once the protecting
reassignment completes) and m(k) the effective min ISR once it has k more replicas (docs/KAFKA_ZK.md §2:
min(min.insync.replicas, RF) on Kafka >= 3.7, plain min.insync.replicas before), broker b down leaves the
partition |(I ∪ T) \\ {b}| in-sync replicas. It must keep max(m, 1) of them: then a leader can be elected
cleanly (failure mode) or moved (controlled mode, the demotion) and acks=all writes go on. So a partition
whose ISR meets the roll needs |I| - 1 + k >= max(m(k), 1), one whose ISR does not (the roll only restarts
out-of-sync replicas of it) |I| + k >= max(m(k), 1), where k is the fewest temporary replicas that makes it
true: RF = 1 partitions (the seed incident) and shrunk ISRs get a replica elsewhere first; a healthy RF = 3,
min ISR 2 partition gets none. The plan then checks itself with the replay's own rules
(planner.replay.demote, controlled shutdown and hard failure, each step from the plan's state).

Temporary replicas are appended to the replica list (the preferred leader does not change), placed on
registered brokers outside maintenance (planner/maintenance.py) that do not hold the partition and have the
disk room (planner.optimizer.capacity: a temporary replica adds its partition's size until the undo),
preferring brokers outside the roll, racks the partition does not span yet, and the least temporary load
(bytes when every size is known, replicas otherwise), largest partitions first. The undo is the original
lists (rollback.json). A broker in maintenance is not restarted (a roll takes brokers in service).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from planner import replay
from planner import risk_model as rm
from planner.codec import ReassignEntry
from planner.errors import BadInput, NextStep
from planner.optimizer.batches import Batch, make_batches
from planner.optimizer.checks import Infeasible
from planner.optimizer.planning import disk_warnings
from planner.optimizer.problem import Problem
from planner.snapshot_io import Snapshot
from planner.text import count

ORDERS = ("auto", "given")


@dataclass
class RestartParams:
    brokers: list[int]
    order: str = "auto"                       # auto: ascending id, the controller's broker last | given
    kafka_version: str = rm.DEFAULT_KAFKA_VERSION
    max_concurrent_per_broker: int = 5
    batch_order: str = "smallest-first"
    batch_seconds: int = 3600

    def validate(self) -> None:
        if not self.brokers:
            raise BadInput("a restart needs at least one broker")
        if len(set(self.brokers)) != len(self.brokers):
            raise BadInput(f"brokers lists a broker twice: {self.brokers}")
        if self.order not in ORDERS:
            raise BadInput(f"order must be one of {', '.join(ORDERS)}, not {self.order!r}")
        rm.parse_kafka_version(self.kafka_version)
        if self.max_concurrent_per_broker < 1:
            raise BadInput(f"max_concurrent_per_broker must be at least 1, got {self.max_concurrent_per_broker}")
        if self.batch_order not in ("smallest-first", "largest-first"):
            raise BadInput(f"batch order must be smallest-first or largest-first, not {self.batch_order!r}")
        if self.batch_seconds < 1:
            raise BadInput(f"batch_seconds must be at least 1, got {self.batch_seconds}")


@dataclass
class Step:
    """One broker of the roll, as the plan expects it: the lists its demotion writes (partitions it leads or
    is the preferred leader of, reordered so another in-sync replica comes first and it comes last), the
    lists its restore writes back, and what cannot move."""

    broker: int
    hosted: int                                 # partitions with a replica on it (during the roll)
    leads: int                                  # partitions it leads in the plan's state
    demote: list[ReassignEntry]                 # reorders (a preferred election follows)
    restore: list[ReassignEntry]                # the same partitions' lists during the roll
    cannot_move: list[str]                      # partitions it leads whose leadership cannot move


@dataclass
class RestartResult:
    problem: Problem
    params: RestartParams
    order: list[int]                            # broker ids in roll order
    controller: int | None
    final: np.ndarray                           # (P, R') replica matrix during the roll (indices)
    added: np.ndarray                           # (P,) temporary replicas per partition
    reasons: dict[str, int]                     # why partitions were protected: counts
    protected_reason: np.ndarray                # (P,) object: reason per protected row, "" otherwise
    unprotected: list[str]                      # partitions left as they are that the roll still hurts
    batches: list[Batch]
    steps: list[Step]
    drain: dict                                 # what a full drain of the same brokers would move
    check: dict                                 # the replay's verdict on every step
    timings: dict[str, float]
    warnings: list[str] = field(default_factory=list)

    @property
    def changed(self) -> np.ndarray:
        return np.flatnonzero(self.added > 0)


# ---------------------------------------------------------------------------------------------- rules
def needed(isr_live: np.ndarray, meets_roll: np.ndarray, rf: np.ndarray, min_isr: np.ndarray,
           kafka_version: str, limit: int) -> np.ndarray:
    """(P,) the fewest temporary replicas k with |I| - [I meets the roll] + k >= max(m(k), 1), where m(k) is
    the effective min ISR at RF + k; `limit` + 1 where no k <= limit is enough."""
    a = isr_live - meets_roll.astype(np.int64)
    since = rm.parse_kafka_version(kafka_version) >= rm.EFFECTIVE_MIN_ISR_SINCE
    out = np.full(len(a), limit + 1, dtype=np.int64)
    todo = np.ones(len(a), dtype=bool)
    for k in range(limit + 1):
        m = np.minimum(min_isr, rf + k) if since else min_isr
        ok = todo & (a + k >= np.maximum(m, 1))
        out[ok] = k
        todo &= ~ok
        if not todo.any():
            break
    return out


def roll_order(pb: Problem, brokers: list[int], order: str, controller: int | None) -> list[int]:
    """`given`: as listed; `auto`: ascending id with the controller's broker last (its restart moves the
    controller, once; Kafka's own advice for rolling restarts, and docs/RISK.md: a request the controller
    logged can be cut short by its resignation)."""
    if order == "given":
        return list(brokers)
    rest = sorted(b for b in brokers if b != controller)
    return rest + ([controller] if controller in brokers else [])


def min_isr_by_row(pb: Problem, snap: Snapshot) -> tuple[np.ndarray, np.ndarray]:
    """(min.insync.replicas, unclean.leader.election.enable) per partition row, as the snapshot resolved
    them (topic override, broker default, Kafka's default)."""
    t = snap.topics
    names = t.column("topic").to_pylist()
    mins = dict(zip(names, t.column("min_insync_replicas").to_pylist(), strict=True))
    uncl = dict(zip(names, t.column("unclean_leader_election").to_pylist(), strict=True))
    per_topic = np.array([int(mins.get(n) or 1) for n in pb.topic_names], dtype=np.int64)
    per_topic_u = np.array([bool(uncl.get(n) or False) for n in pb.topic_names], dtype=bool)
    return per_topic[pb.topic_of], per_topic_u[pb.topic_of]


# --------------------------------------------------------------------------------------------- plan
def plan_restart(pb: Problem, snap: Snapshot, params: RestartParams,
                 progress: Callable[[str], None] | None = None) -> RestartResult:
    """The restart plan of `params.brokers` (ids)."""
    import time

    from planner.optimizer import capacity

    say = progress or (lambda _m: None)
    params.validate()
    t0 = time.perf_counter()
    B = pb.num_brokers
    idx = pb.broker_index(params.brokers)
    down = [int(pb.broker_ids[i]) for i in idx if not pb.alive[i]]
    if down:
        raise BadInput(f"broker(s) {down} are not registered (down): a restart roll needs each broker running "
                       "before it restarts it; start them first, or drain them",
                       next_steps=(NextStep("plan drain", "drains them", tuple(down)),))
    held = [pb.maintenance_entries[int(pb.broker_ids[i])] for i in idx
            if int(pb.broker_ids[i]) in pb.maintenance_entries]
    if held:
        raise BadInput("a restart roll restarts brokers in service; " + "; ".join(e.describe() for e in held),
                       next_steps=(NextStep("brokers", "shows the states"),
                                   NextStep("plan return", "brings a drained broker back")))
    roll = np.zeros(B, dtype=bool)
    roll[idx] = True
    ctrl_rows = snap.brokers.column("is_controller").to_pylist()
    ids = snap.brokers.column("broker").to_pylist()
    controller = next((int(b) for b, c in zip(ids, ctrl_rows, strict=True) if c), None)
    order = roll_order(pb, [int(b) for b in params.brokers], params.order, controller)
    warnings = list(pb.warnings)
    if params.order == "given" and controller in params.brokers and order[-1] != controller:
        warnings.append(f"broker {controller} is the controller and is not restarted last: its restart moves the "
                        "controller, and every later broker's controlled shutdown then talks to a new controller "
                        "(the auto order puts it last)")

    reps = pb.replicas
    valid = reps >= 0
    hosted = (valid & roll[np.maximum(reps, 0)]).any(axis=1)
    isr = pb.isr if pb.isr is not None else reps
    isr_live_m = (isr >= 0) & pb.alive[np.maximum(isr, 0)]
    isr_live = isr_live_m.sum(axis=1)
    meets = (isr_live_m & roll[np.maximum(isr, 0)]).any(axis=1)
    min_isr, _ = min_isr_by_row(pb, snap)
    rf = pb.rf.astype(np.int64)
    receivers = pb.receivers(np.zeros(B, dtype=bool))   # registered, outside maintenance
    limit = int(receivers.sum())
    cap = capacity.limits(pb)
    headroom = np.where(cap >= 0, cap - pb.disk_used_bytes, -1) if capacity.checked(pb).any() else None
    k = needed(isr_live, meets, rf, min_isr, params.kafka_version, limit)
    k = np.where(hosted, k, 0)

    offline = hosted & (isr_live == 0)   # nothing in sync is registered: nothing to copy from, nothing to keep
    if offline.any():
        warnings.append(f"{count(int(offline.sum()), 'partition')} hosted by the roll's brokers have no registered "
                        f"in-sync replica (offline now, or about to be): {pb.names(np.flatnonzero(offline))}; a "
                        "restart plan cannot protect them (a new replica has nothing to copy from); they come back "
                        "when an in-sync replica's broker returns")
    want = (k > 0) & ~offline
    unprotected: list[str] = []
    excluded = want & pb.excluded_topic[pb.topic_of]
    if excluded.any():
        unprotected += [pb.names(np.array([r]), 1) for r in np.flatnonzero(excluded).tolist()]
        warnings.append(f"{count(int(excluded.sum()), 'partition')} of excluded topics need protection and get none: "
                        f"{pb.names(np.flatnonzero(excluded))}; while a roll broker is down they are under min ISR "
                        "or offline")
        want &= ~excluded
    stuck_rows = want & pb.in_flight
    if stuck_rows.any():
        raise Infeasible("in-flight", "partitions being reassigned now need a temporary replica for the roll; wait "
                         f"for that reassignment to finish: {pb.names(np.flatnonzero(stuck_rows))}")
    if pb.unknown_state is not None and (want & pb.unknown_state).any():
        raise Infeasible("unknown-state", "partitions whose state is unknown (malformed state znode) are hosted by "
                         "the roll's brokers; a plan cannot judge their ISR: fix the znode and take the snapshot "
                         f"again: {pb.names(np.flatnonzero(want & pb.unknown_state))}")
    on_dead = want & (valid & ~pb.alive[np.maximum(reps, 0)]).any(axis=1)
    if on_dead.any():
        r = np.flatnonzero(on_dead)
        dead = sorted({int(pb.broker_ids[b]) for b in reps[r][valid[r]].tolist() if not pb.alive[b]})
        raise Infeasible("unregistered-replica",
                         f"partitions that need a temporary replica also have a replica on unregistered broker(s) "
                         f"{dead}: Kafka completes a reassignment only once every target replica is in the ISR, "
                         f"so their protection could never finish: {pb.names(r)}. Start broker(s) {dead}, or drain "
                         "them first", next_steps=(NextStep("plan drain", "drains them", tuple(dead)),))
    short = want & (k > limit)
    if short.any():
        raise Infeasible("receivers", f"partitions need more temporary replicas than there are registered brokers "
                         f"outside maintenance ({limit}) to hold them: {pb.names(np.flatnonzero(short))}")
    reason = np.full(pb.num_partitions, "", dtype=object)
    reason[want & (rf == 1)] = "rf1"
    reason[want & (rf > 1) & (isr_live < rf)] = "shrunk-isr"
    reason[want & (rf > 1) & (isr_live >= rf)] = "min-isr"
    t1 = time.perf_counter()

    say(f"placing {int(k[want].sum())} temporary replicas for {count(int(want.sum()), 'partition')}")
    k = np.where(want, k, 0)
    final, added = _place(pb, k, roll, receivers, meets, isr_live, min_isr, rf, params.kafka_version, headroom)
    capacity.check_final(pb, final, "the restart plan's temporary replicas")
    if added.any():
        warnings += disk_warnings(pb, final)
    t2 = time.perf_counter()
    # the temporary replicas widen the lists: the problem's matrix is padded to the same width (RF unchanged)
    if final.shape[1] > pb.replicas.shape[1]:
        wide = np.full(final.shape, -1, dtype=np.int32)
        wide[:, : pb.replicas.shape[1]] = pb.replicas
        pb = replace(pb, replicas=wide)
    batches = make_batches(pb, final, np.zeros(B, dtype=bool), params.max_concurrent_per_broker,
                           params.batch_order)
    t3 = time.perf_counter()

    entries = _entries(pb, final, np.flatnonzero(added > 0))
    state = replay.ClusterState.from_snapshot(snap)
    plan_state = state.with_plan(entries)
    say(f"demotions and the replay's check of {count(len(order), 'step')} in both modes")
    steps = _steps(plan_state, order)
    check = _check(state, plan_state, order, params.kafka_version, offline_names(pb, offline | excluded))
    t4 = time.perf_counter()
    drain = drain_figures(pb, roll)
    reasons = {r: int((reason == r).sum()) for r in ("rf1", "shrunk-isr", "min-isr")}
    timings = {"needs_s": t1 - t0, "placement_s": t2 - t1, "batches_s": t3 - t2, "steps_check_s": t4 - t3}
    return RestartResult(pb, params, order, controller, final, added, reasons, reason, unprotected, batches, steps,
                         drain, check, timings, warnings)


def offline_names(pb: Problem, rows: np.ndarray) -> set[tuple[str, int]]:
    return {(pb.topic_names[pb.topic_of[r]], int(pb.partition[r])) for r in np.flatnonzero(rows).tolist()}


def _entries(pb: Problem, matrix: np.ndarray, rows: np.ndarray) -> list[ReassignEntry]:
    return [ReassignEntry(pb.topic_names[pb.topic_of[r]], int(pb.partition[r]),
                          tuple(int(pb.broker_ids[b]) for b in matrix[r].tolist() if b >= 0)) for r in rows.tolist()]


def _place(pb: Problem, k: np.ndarray, roll: np.ndarray, receivers: np.ndarray, meets: np.ndarray,
           isr_live: np.ndarray, min_isr: np.ndarray, rf: np.ndarray, version: str,
           headroom: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Greedy, largest partitions first: each takes its k brokers by (outside the roll, a rack it does not span
    yet, least temporary load, fewest replicas, id). A partition whose ISR does not meet the roll and that
    gets a replica on a roll broker meets it from then on: it needs one more (`needed` again)."""
    B = pb.num_brokers
    rows = np.flatnonzero(k > 0)
    width = pb.replicas.shape[1] + int(k.max(initial=0)) + 1
    final = np.full((pb.num_partitions, width), -1, dtype=np.int32)
    final[:, : pb.replicas.shape[1]] = pb.replicas
    added = np.zeros(pb.num_partitions, dtype=np.int64)
    if not len(rows):
        return final[:, : pb.replicas.shape[1]], added
    sizes = np.maximum(pb.sizes, 0)
    by_bytes = pb.sizes_known
    weight = sizes if by_bytes else np.ones(pb.num_partitions, dtype=np.int64)
    load = np.zeros(B, dtype=np.int64)
    base = np.bincount(pb.replicas[pb.replicas >= 0], minlength=B).astype(np.int64)
    room = headroom.astype(np.int64).copy() if headroom is not None else np.full(B, -1, np.int64)
    rack_of = pb.rack_of if pb.rack_aware else np.full(B, -1, dtype=np.int32)
    order = rows[np.lexsort((rows, -weight[rows]))]
    isr_m = (pb.isr >= 0) & pb.alive[np.maximum(pb.isr, 0)] if pb.isr is not None else None
    ids = np.arange(B)
    short: list[tuple[int, int, int]] = []
    for r in order.tolist():
        have = pb.replicas[r][pb.replicas[r] >= 0]
        ok = receivers.copy()
        ok[have] = False
        if room is not None:
            ok &= (room < 0) | (room >= sizes[r])
        need = int(k[r])
        chosen: list[int] = []
        spanned = set(rack_of[have].tolist()) - {-1}
        joins = bool(meets[r])
        while len(chosen) < need:
            cand = np.flatnonzero(ok)
            if not len(cand):
                break
            new_rack = np.array([rack_of[c] >= 0 and rack_of[c] not in spanned for c in cand.tolist()])
            pick = cand[np.lexsort((ids[cand], base[cand], load[cand], ~new_rack, roll[cand]))[0]]
            chosen.append(int(pick))
            ok[pick] = False
            if rack_of[pick] >= 0:
                spanned.add(int(rack_of[pick]))
            if roll[pick] and not joins:
                joins = True   # its ISR now meets the roll: one more replica may be needed
                need = int(needed(np.array([isr_live[r]]), np.array([True]), np.array([rf[r]]),
                                  np.array([min_isr[r]]), version, B)[0])
        if len(chosen) < need:
            short.append((r, need, len(chosen)))
            continue
        for c in chosen:
            load[c] += weight[r]
            if room[c] >= 0:
                room[c] -= sizes[r]
        n0 = len(have)
        final[r, n0: n0 + len(chosen)] = chosen
        added[r] = len(chosen)
    if short:
        def id_list(row: np.ndarray) -> list[int]:
            return [int(pb.broker_ids[x]) for x in row.tolist() if x >= 0]

        shown = "; ".join(f"{pb.names(np.array([r]), 1)} (replicas {id_list(pb.replicas[r])}, in sync "
                          f"{id_list(np.where(isr_m[r], pb.isr[r], -1)) if pb.isr is not None else '?'}, min ISR "
                          f"{int(min_isr[r])}: needs {n} temporary replica(s), {c} broker(s) can take one)"
                          for r, n, c in short[:10])
        more = f" and {len(short) - 10} more" if len(short) > 10 else ""
        raise Infeasible("capacity" if headroom is not None else "receivers",
                         f"too few brokers can take the temporary replicas the roll needs (registered, outside "
                         f"maintenance, not holding the partition{', with disk room' if headroom is not None else ''}"
                         f"): {shown}{more}")
    used = int(added.max(initial=0))
    return final[:, : pb.replicas.shape[1] + used], added


def _steps(plan_state: replay.ClusterState, order: list[int]) -> list[Step]:
    """Each step's expected demotion and restore (from the plan's state, with the replay's demote rule)."""
    st = plan_state
    index = replay._Index(st.replicas)
    alive = st.alive_lut(st.lut_size(order))
    names = st.topic_names
    out = []
    for b in order:
        rows = index.rows_on([b])
        batch = replay._batch(st, rows, st.leader, st.isr, st.has_state)
        after, _, stuck = replay.demote(batch, b, alive)
        changed = np.flatnonzero((after.replicas != batch.replicas).any(axis=1))
        demote = [ReassignEntry(names[st.topic_idx[rows[i]]], int(st.partition[rows[i]]),
                                tuple(int(x) for x in after.replicas[i] if x >= 0)) for i in changed.tolist()]
        restore = [ReassignEntry(e.topic, e.partition, tuple(int(x) for x in batch.replicas[i] if x >= 0))
                   for e, i in zip(demote, changed.tolist(), strict=True)]
        cannot = [f"{names[st.topic_idx[rows[i]]]}-{int(st.partition[rows[i]])}" for i in np.flatnonzero(stuck).tolist()]
        out.append(Step(b, len(rows), int((batch.leader == b).sum()), demote, restore, cannot))
    return out


def _check(state: replay.ClusterState, plan_state: replay.ClusterState, order: list[int], version: str,
           known_bad: set[tuple[str, int]]) -> dict:
    """The replay's verdict on the roll, before and after the plan: per step and mode, the partitions offline,
    under min ISR or elected uncleanly. After the plan, only the partitions the plan names as unprotectable
    may appear; anything else would be a planner bug, so it is refused here rather than written."""
    scen: list[rm.Scenario] = []
    for seq, (st_name, kind) in enumerate((("current", "rolling"), ("plan", "restart"))):
        for mode in rm.MODES:
            for i, b in enumerate(order, start=1):
                scen.append(rm.Scenario(len(scen), kind, mode, (b,), st_name, sequence=seq * 2 + rm.MODES.index(mode),
                                        step=i, steps=len(order), drain=tuple(order)))
    res = replay.replay(state, scen, version, plan_state)
    rows = res.rows
    bad = np.asarray(rows.column("offline")) | np.asarray(rows.column("under_min_isr")) \
        | np.asarray(rows.column("unclean_taken"))
    sid = np.asarray(rows.column("scenario_id"))
    topic = rows.column("topic").to_pylist()
    part = rows.column("partition").to_pylist()
    verdict: dict = {"before": [], "after": []}
    leftover: list[str] = []
    for s, rec in zip(scen, res.scenarios.to_pylist(), strict=True):
        m = (sid == s.id) & bad
        names = [f"{topic[i]}-{part[i]}" for i in np.flatnonzero(m).tolist()]
        entry = {"step": s.step, "broker": s.brokers[0], "mode": s.mode, "level": rec["level"],
                 "offline": rec["offline"], "under_min_isr": rec["under_min_isr"], "at_min_isr": rec["at_min_isr"],
                 "unclean": rec["unclean_taken"], "failed_shutdowns": rec["failed_shutdowns"],
                 "unavailable_until_expiry": rec["unavailable_until_expiry"], "partitions": names[:20]}
        verdict["before" if s.state == "current" else "after"].append(entry)
        if s.state == "plan":
            leftover += [n for i, n in zip(np.flatnonzero(m).tolist(), names, strict=True)
                         if (topic[i], part[i]) not in known_bad]
    if leftover:
        raise RuntimeError(f"the restart plan fails its own check (the replay's rules): {sorted(set(leftover))[:20]} "
                           "would be offline, under min ISR or elected uncleanly while a broker is down")
    return verdict


def drain_figures(pb: Problem, roll: np.ndarray) -> dict:
    """What a full drain of the same brokers moves: every replica on them (a drain's lower bound, which
    kplan's drain plans meet exactly), and its bytes when sizes are known."""
    valid = pb.replicas >= 0
    on = (valid & roll[np.maximum(pb.replicas, 0)]).sum(axis=1)
    return {"replicas": int(on.sum()), "partitions": int((on > 0).sum()),
            "bytes": int((on * np.maximum(pb.sizes, 0)).sum()) if pb.sizes_known else None,
            "brokers_left": int((pb.alive & ~roll).sum()),
            "largest_rf": int(pb.rf[on > 0].max(initial=0))}
