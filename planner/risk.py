"""Drain risk, the library entry: validate the request, build the scenarios, run the Spark job, report.

`planner.api.risk` (what `kplan risk` and the Airflow task call) uses `prepare` here and
planner.risk_run.run_risk. `prepare` checks every input before Spark starts (unknown broker ids or racks, an
empty drain set, a missing or incompatible snapshot, a bad plan: BadInput, exit 2) and builds the scenario
list (`build_scenarios`); run_risk then runs the Spark job (planner.spark.job, which builds on this module) in
this process (default) or through `spark-submit` (any master). The job writes `scenarios.parquet`,
`partitions.parquet` and `summary.json`; `format_report` turns the summary into the table an operator reads.

Which scenarios: with no drains / drain_racks, the full sweep (every live broker alone and every rack, in
each requested mode). With a drain, that drain and its rolling sequence (one broker at a time, in the
order given), plus the sweep parts asked for with all_brokers / all_racks. With a plan, the same
scenarios are scored on the plan's target assignment too ("after plan"), so the review shows before/after;
without drains, the drain scored is the set of brokers the plan empties. With a restart plan, the roll
itself, step by step in the plan's order (each broker down while the others are up, in each mode): before
the plan a plain rolling restart, after it the roll the plan makes (`restart` steps on the plan's state,
each broker demoted before it stops).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from planner import codec
from planner import kafka_config as kc
from planner import risk_model as rm
from planner import snapshot_io as sio
from planner.cluster import Cluster
from planner.errors import BadInput
from planner.plan_model import read_plan
from planner.replay_kraft import KraftSource, kraft_source
from planner.requests import RiskRequest
from planner.risk_args import parse_brokers, parse_racks  # noqa: F401 (re-exported)
from planner.text import count

log = logging.getLogger(__name__)

SUMMARY_FORMAT = "kplan-risk/1"
Key = tuple[str, int]
DEFAULT_MASTER = "local[2]"


# ------------------------------------------------------------------------------------------ inputs
def open_snapshot(source: Path | str | sio.Snapshot) -> sio.Snapshot:
    """A snapshot folder opened and checked (its partitions stay on disk until asked for: a million-partition
    table is read by Spark, not by the driver), or an in-memory snapshot as it is."""
    return source if isinstance(source, sio.Snapshot) else sio.read_snapshot(source)


def check_plan(info: sio.Snapshot, entries: Sequence[codec.ReassignEntry]) -> None:
    known = set(info.broker_ids)
    unknown = sorted({b for e in entries for b in e.replicas} - known)
    if unknown:
        raise BadInput(f"the plan's target replicas name broker ids the snapshot does not know: {unknown}")
    keys = info.partition_columns(["topic", "partition"])
    topic = keys.column("topic")
    topic = pc.cast(topic, pa.string()) if pa.types.is_dictionary(topic.type) else topic
    have = pc.binary_join_element_wise(topic, pc.cast(keys.column("partition"), pa.string()), "\t")
    want = pa.array([f"{e.topic}\t{e.partition}" for e in entries], pa.string())
    found = pc.is_in(want, value_set=have.combine_chunks() if isinstance(have, pa.ChunkedArray) else have)
    missing = [w.replace("\t", "-") for w, ok in zip(want.to_pylist(), found.to_pylist(), strict=True) if not ok]
    if missing:
        raise BadInput(f"the plan names partitions the snapshot does not have: {', '.join(missing[:10])}"
                       + (f" (+{len(missing) - 10} more)" if len(missing) > 10 else ""))


def plan_emptied_brokers(info: sio.Snapshot, entries: Sequence[codec.ReassignEntry]) -> tuple[int, ...]:
    """Brokers that hold replicas now and none once the plan completes: the drain the plan was made for."""
    parts = info.partition_columns(["topic", "partition", "replicas"])
    topic = parts.column("topic")
    topic = pc.cast(topic, pa.string()) if pa.types.is_dictionary(topic.type) else topic
    moved = {(e.topic, e.partition) for e in entries}
    keys = pc.binary_join_element_wise(topic, pc.cast(parts.column("partition"), pa.string()), "\t")
    is_moved = pc.is_in(keys, value_set=pa.array([f"{t}\t{p}" for t, p in moved], pa.string()))
    before = set(pc.unique(pc.list_flatten(parts.column("replicas"))).to_pylist())
    kept = pc.list_flatten(pc.filter(parts.column("replicas"), pc.invert(is_moved)))
    after = set(pc.unique(kept).to_pylist()) | {b for e in entries for b in e.replicas}
    return tuple(sorted(before - after))


# --------------------------------------------------------------------------------------- scenarios
def build_scenarios(info: sio.Snapshot, drains: Sequence[tuple[int, ...]] = (),
                    drain_racks: Sequence[str] = (), all_brokers: bool = False, all_racks: bool = False,
                    modes: Sequence[str] = rm.MODES, states: Sequence[str] = ("current",)) -> list[rm.Scenario]:
    """Validate the request against the snapshot and list the scenarios, ids in order."""
    ids = info.broker_ids
    known = set(ids)
    racks = info.racks
    rack_names = sorted({r for r in racks.values() if r is not None})
    for mode in modes:
        if mode not in rm.MODES:
            raise BadInput(f"mode {mode!r} is not one of {', '.join(rm.MODES)}")
    requested: list[tuple[tuple[int, ...], str | None]] = []
    for d in drains:
        if not d:
            raise BadInput("a drain set is empty: name at least one broker id")
        unknown = [b for b in d if b not in known]
        if unknown:
            raise BadInput(f"unknown broker id(s) {unknown}: the snapshot has brokers "
                           f"{_ranges(sorted(known))}")
        requested.append((tuple(d), None))
    for r in drain_racks:
        if r not in rack_names:
            raise BadInput(f"unknown rack {r!r}: the snapshot's racks are {rack_names or 'none (no broker.rack set)'}")
        requested.append((tuple(b for b in sorted(ids) if racks[b] == r), r))
    if not requested and not all_brokers and not all_racks:
        all_brokers = all_racks = True
    alive = info.alive
    out: list[rm.Scenario] = []
    seq = 0
    for state in states:
        for mode in modes:
            for brokers, rack in requested:
                out.append(rm.Scenario(len(out), "drain", mode, brokers, state, rack=rack))
                if len(brokers) > 1:
                    for k, b in enumerate(brokers, start=1):
                        out.append(rm.Scenario(len(out), "rolling", mode, (b,), state, rack=rack,
                                               sequence=seq, step=k, steps=len(brokers), drain=brokers))
                    seq += 1
            if all_racks:
                for r in rack_names:
                    out.append(rm.Scenario(len(out), "rack", mode, tuple(b for b in sorted(ids) if racks[b] == r),
                                           state, rack=r))
            if all_brokers:
                for b in sorted(ids):
                    if alive[b]:
                        out.append(rm.Scenario(len(out), "broker", mode, (b,), state))
    return out


def restart_scenarios(info: sio.Snapshot, order: Sequence[int], modes: Sequence[str] = rm.MODES,
                      all_brokers: bool = False, all_racks: bool = False) -> list[rm.Scenario]:
    """A restart roll in `order`, step by step: before the plan ("current") a plain rolling restart (each
    step from the state the previous one left), after it ("plan") the roll the plan makes (each step from
    the plan's state, its broker demoted first); then the sweep parts asked for, on both states."""
    order = tuple(int(b) for b in order)
    if not order:
        raise BadInput("a restart roll names no broker")
    known = set(info.broker_ids)
    unknown = [b for b in order if b not in known]
    if unknown:
        raise BadInput(f"unknown broker id(s) {unknown}: the snapshot has brokers {_ranges(sorted(known))}")
    out: list[rm.Scenario] = []
    for seq, (state, kind) in enumerate((("current", "rolling"), ("plan", "restart"))):
        for mode in modes:
            if mode not in rm.MODES:
                raise BadInput(f"mode {mode!r} is not one of {', '.join(rm.MODES)}")
            for k, b in enumerate(order, start=1):
                out.append(rm.Scenario(len(out), kind, mode, (b,), state, sequence=seq * len(modes)
                                       + modes.index(mode), step=k, steps=len(order), drain=order))
    if all_brokers or all_racks:
        for x in build_scenarios(info, (), (), all_brokers, all_racks, modes, ("current", "plan")):
            out.append(rm.Scenario(len(out), x.kind, x.mode, x.brokers, x.state, x.rack))
    return out


def _ranges(ids: list[int]) -> str:
    if len(ids) <= 12:
        return ",".join(map(str, ids))
    return f"{ids[0]}..{ids[-1]} ({len(ids)} brokers)"


@dataclass
class Prepared:
    info: sio.Snapshot
    scenarios: list[rm.Scenario]
    plan_entries: list[codec.ReassignEntry] | None
    kafka_version: str
    unknown: list[dict[str, Any]] = field(default_factory=list)   # partitions whose state is unknown
    session_timeout_s: float = rm.DEFAULT_SESSION_TIMEOUT_S
    intent: dict[str, Any] | None = None      # a drain plan: do its brokers host and lead nothing once applied?
    reread: dict[str, Any] | None = None      # the plan scored on a later read of the cluster (plan_snapshot)
    kraft: KraftSource | None = None          # a KRaft snapshot: planner.replay_kraft's rules (None: ZooKeeper)


def unknown_state(info: sio.Snapshot) -> list[dict[str, Any]]:
    """Partitions a lenient snapshot kept with an unknown state: counted apart, never scored as healthy."""
    errors = info.partition_columns(["state_error"]).column("state_error")
    if errors.null_count == len(errors):
        return []
    t = info.partition_columns(["topic", "partition", "replicas", "state_error"])
    t = t.filter(t.column("state_error").is_valid())
    t = t.set_column(0, "topic", t.column("topic").cast(pa.string()))
    return t.to_pylist()


def prepare(req: RiskRequest, plan_entries: Sequence[codec.ReassignEntry] | None = None,
            restart_order: Sequence[int] | None = None, kraft_ok: bool = False) -> Prepared:
    """Every check that can fail on the user's input, before any Spark work. `plan_entries`: a target
    assignment given directly instead of `req.plan` (tests; callers that hold a Plan already), with
    `restart_order` when it is a restart plan's temporary state. A KRaft snapshot is refused unless the
    caller runs the KRaft rules (`kraft_ok`: planner.risk_run and the spark-submit entry planner.spark.submit
    do, through planner.risk_kraft): nothing may score a KRaft cluster with ZooKeeper's rules
    (planner.spark.job.assess runs those only)."""
    rm.parse_kafka_version(req.kafka_version)
    info = open_snapshot(req.snapshot)
    kraft = _kraft(info, kraft_ok)
    entries = list(plan_entries) if plan_entries is not None else None
    drains = list(req.drains)
    plan = None
    reread = None
    if req.plan_snapshot is not None and req.plan is None:
        raise BadInput("plan_snapshot (the snapshot a plan was made from) needs a plan")
    if req.plan is not None:
        plan = read_plan(req.plan)
        base = open_snapshot(req.plan_snapshot) if req.plan_snapshot is not None else info
        if plan.snapshot_fingerprint != base.fingerprint:
            raise BadInput(f"plan {plan.id[:19]}... in {req.plan} was made from snapshot {plan.snapshot_fingerprint}, "
                           f"not from {base.path or 'the given snapshot'} ({base.fingerprint}): score a plan on "
                           "the snapshot it was made from")
        entries = list(plan.reassignment)
        if plan.kind == "restart":
            restart_order = tuple(plan.section("roll").get("order") or ())
        elif req.plan_snapshot is not None:
            entries, reread = _onto_reread(info, base, plan, entries)
    if restart_order is not None:
        if entries is None:
            raise BadInput("a restart roll is scored with its plan")
        check_plan(info, entries)
        scenarios = restart_scenarios(info, restart_order, req.modes, req.all_brokers, req.all_racks)
        if not req.session_timeout_s > 0:
            raise BadInput(f"session_timeout_s must be positive, got {req.session_timeout_s}")
        return Prepared(info, scenarios, entries, req.kafka_version, unknown_state(info),
                        float(req.session_timeout_s), kraft=kraft)
    if entries is not None:
        check_plan(info, entries)
        if not drains and not req.drain_racks:
            emptied = plan.drained_brokers if plan is not None and plan.kind == "drain" else ()
            emptied = emptied or plan_emptied_brokers(info, entries)
            if emptied:
                drains = [tuple(emptied)]
    states = ("current", "plan") if entries is not None else ("current",)
    scenarios = build_scenarios(info, drains, req.drain_racks, req.all_brokers, req.all_racks, req.modes, states)
    if not req.session_timeout_s > 0:
        raise BadInput(f"session_timeout_s must be positive, got {req.session_timeout_s}")
    intent = intent_after_plan(info, plan, entries, base if reread else None) if plan is not None else None
    return Prepared(info, scenarios, entries, req.kafka_version, unknown_state(info), float(req.session_timeout_s),
                    intent, reread, kraft)


def _kraft(info: sio.Snapshot, kraft_ok: bool) -> KraftSource | None:
    src = kraft_source(info.manifest)
    if src is not None and not kraft_ok:
        raise BadInput(f"{info.path or 'the snapshot'} is of a KRaft cluster ({src.describe()}): this entry runs "
                       "ZooKeeper's controller rules only; the risk step (in-process or through spark-submit) replays "
                       "the KRaft controller's rules")
    return src


def _keys_and_replicas(info: sio.Snapshot) -> tuple[list[str], list[int], np.ndarray, np.ndarray]:
    t = info.partition_columns(["topic", "partition", "replicas", "leader", "has_state"])
    topic = t.column("topic")
    topic = pc.cast(topic, pa.string()) if pa.types.is_dictionary(topic.type) else topic
    leader = pc.if_else(pc.fill_null(t.column("has_state"), False), pc.fill_null(t.column("leader"), -1), -1)
    return (topic.to_pylist(), t.column("partition").to_pylist(), sio.list_to_matrix(t.column("replicas")),
            leader.to_numpy(zero_copy_only=False))


def _onto_reread(info: sio.Snapshot, base: sio.Snapshot, plan: Any, entries: list[codec.ReassignEntry]
                 ) -> tuple[list[codec.ReassignEntry], dict[str, Any]]:
    """The plan's targets on a later read of the cluster: partitions gone since the snapshot are dropped, and
    what changed is counted (apply would refuse a plan whose partitions moved: the score says what it would
    write). Returns (entries that still apply, the reread section of summary.json)."""
    now = {(t, p): tuple(r[r >= 0].tolist()) for t, p, r in zip(*_keys_and_replicas(info)[:3], strict=True)}
    was = {(m.topic, m.partition): m.from_replicas for m in plan.moves}
    gone = [e for e in entries if (e.topic, e.partition) not in now]
    moved = [e for e in entries if (e.topic, e.partition) in now and now[(e.topic, e.partition)] != was.get(
        (e.topic, e.partition))]
    base_keys = set(zip(*_keys_and_replicas(base)[:2], strict=True))
    appeared = sorted(k for k in now if k not in base_keys)
    section = {"plan_snapshot": {"path": str(base.path) if base.path else None, "fingerprint": base.fingerprint,
                                 "taken_at": base.manifest.get("taken_at")},
               "cluster": {"path": str(info.path) if info.path else None, "fingerprint": info.fingerprint,
                           "taken_at": info.manifest.get("taken_at")},
               "partitions_appeared": len(appeared),
               "appeared": [f"{t}-{p}" for t, p in appeared[:50]],
               "plan_partitions_gone": [f"{e.topic}-{e.partition}" for e in gone[:50]],
               "plan_partitions_changed": [f"{e.topic}-{e.partition}" for e in moved[:50]],
               "plan_partitions_changed_count": len(moved)}
    return [e for e in entries if (e.topic, e.partition) in now], section


def intent_after_plan(info: sio.Snapshot, plan: Any, entries: Sequence[codec.ReassignEntry] | None,
                      base: sio.Snapshot | None = None) -> dict[str, Any] | None:
    """A drain plan's intent on `info` once `entries` are applied (planner.intent): its brokers host no replica
    and lead no partition. Only rows with a drained broker are looked at one by one (numpy finds them). `base`:
    the snapshot the plan was made from, when `info` is a later read (then what appeared since is named)."""
    from planner.intent import DrainFacts, evaluate, reason

    if plan is None or plan.kind != "drain" or not plan.drained_brokers:
        return None
    drained = np.array(sorted(plan.drained_brokers), dtype=np.int32)
    topics, parts, matrix, leader = _keys_and_replicas(info)
    target = {(e.topic, e.partition): e.replicas for e in entries or ()}
    hit = np.flatnonzero(np.isin(matrix, drained).any(axis=1) | np.isin(leader, drained))
    section = plan.topics or {}
    names, counts = section.get("names") or [], section.get("partitions") or []
    excluded = section.get("excluded") or [False] * len(names)
    facts = DrainFacts(tuple(plan.drained_brokers), frozenset((m.topic, m.partition) for m in plan.moves),
                       {str(n): (int(c), bool(x)) for n, c, x in zip(names, counts, excluded, strict=False)},
                       (plan.snapshot or {}).get("taken_at"))
    base_rows: dict[Key, tuple[int, ...]] = {}
    if base is not None:
        bt, bp, bm, _ = _keys_and_replicas(base)
        base_rows = {(t, p): tuple(r[r >= 0].tolist()) for t, p, r in zip(bt, bp, bm, strict=True)}

    base_topics = {t for t, _ in base_rows}
    since = f" since the snapshot of {facts.snapshot_taken_at}" if facts.snapshot_taken_at else " since the snapshot"

    def why(k: Key) -> str:
        if base is not None and k not in facts.planned:
            if k not in base_rows:
                return ("partition added" if k[0] in base_topics else "topic created") + since
            i = rows_at[k]
            if base_rows[k] != tuple(matrix[i][matrix[i] >= 0].tolist()):
                return "moved onto the broker" + since
        return reason(facts, k)

    rows_at: dict[Key, int] = {}
    rows = []
    for i in hit.tolist():
        k = (topics[i], parts[i])
        rows_at[k] = i
        if k in target:   # the plan rewrites it: its target, led by the target's first replica after verify
            rows.append((k[0], k[1], list(target[k]), target[k][0]))
        else:
            reps = matrix[i][matrix[i] >= 0].tolist()
            rows.append((k[0], k[1], reps, int(leader[i]) if leader[i] >= 0 else None))
    return evaluate(facts, rows, why=why)


# ------------------------------------------------------------------------------------------ summary
def build_summary(prepared: Prepared, scenarios: pa.Table, worst: pa.Table, baseline: dict[str, dict],
                  elapsed_s: float) -> dict[str, Any]:
    """summary.json: levels, the worst scenarios, every scenario's counts and its worst partitions."""
    worst_by: dict[int, list[dict]] = {}
    for r in worst.sort_by([("scenario_id", "ascending"), ("severity", "descending"), ("topic", "ascending"),
                            ("partition", "ascending")]).to_pylist():
        sid = r.pop("scenario_id")
        worst_by.setdefault(sid, []).append(r)
    rows = scenarios.sort_by("scenario_id").to_pylist()
    brokers_of = {s.id: set(s.brokers) for s in prepared.scenarios}
    for r in rows:
        r["worst_partitions"] = worst_by.get(r["scenario_id"], [])
        gone = brokers_of.get(r["scenario_id"], set())
        r["unknown"] = sum(1 for u in prepared.unknown if gone & set(u["replicas"]))
    ranked = sorted(rows, key=lambda r: (-r["level_rank"], -r["score"], r["scenario_id"]))
    levels = {name: 0 for name in reversed(rm.LEVELS)}
    for r in rows:
        levels[r["level"]] += 1
    by_state = {}
    for state in sorted({r["state"] for r in rows}):
        ranks = [r["level_rank"] for r in rows if r["state"] == state]
        by_state[state] = rm.level_name(max(ranks)) if ranks else "low"
    info = prepared.info
    return {
        "format": SUMMARY_FORMAT,
        "snapshot": {"path": str(info.path) if info.path else None, "fingerprint": info.manifest.get("fingerprint"),
                     "taken_at": info.manifest.get("taken_at"), "brokers": len(info.broker_ids),
                     "partitions": int(info.manifest.get("counts", {}).get("partitions", -1))},
        "kafka_version": prepared.kafka_version,
        "effective_min_isr": repr(rm.effective_min_isr(prepared.kafka_version)),
        "plan": bool(prepared.plan_entries is not None),
        "plan_moves": len(prepared.plan_entries or []),
        "level": rm.level_name(max((r["level_rank"] for r in rows), default=0)),
        "level_by_state": by_state,
        "levels": levels,
        "baseline": baseline,
        "evaluated": int(sum(r["evaluated"] for r in rows)),
        "elapsed_s": round(elapsed_s, 3),
        "worst_scenarios": [r["scenario_id"] for r in ranked[:10]],
        "unknown_state": {"partitions": len(prepared.unknown),
                          "examples": [{"topic": u["topic"], "partition": u["partition"], "problem": u["state_error"]}
                                       for u in prepared.unknown[:20]]},
        "warnings": _warnings(prepared),
        "intent": prepared.intent,
        "reread": prepared.reread,
        "scenarios": rows,
    }


def _warnings(prepared: Prepared) -> list[str]:
    out = [f"{w['path']}: {w['problem']}" for w in prepared.info.manifest.get("warnings", [])
           if w.get("path") in (codec.CONTROLLER, codec.BROKER_IDS, codec.TOPICS)]
    if prepared.unknown:
        names = ", ".join(f"{u['topic']}-{u['partition']}" for u in prepared.unknown[:10])
        more = f" (+{len(prepared.unknown) - 10} more)" if len(prepared.unknown) > 10 else ""
        out.append(f"{len(prepared.unknown)} partition(s) with an unknown state are not scored: {names}{more}; "
                   "each scenario's `unknown` counts those it touches")
    if prepared.intent is not None and not prepared.intent["holds"]:
        out.append("after the plan: " + prepared.intent["text"])
    rr = prepared.reread
    if rr and rr["plan_partitions_changed_count"]:
        out.append(f"{rr['plan_partitions_changed_count']} of the plan's partitions changed since its snapshot "
                   f"({', '.join(rr['plan_partitions_changed'][:10])}): apply would refuse the plan; make a new one")
    return out


# ------------------------------------------------------------------------------------------- report
_COLOURS = {"critical": "\033[1;31m", "high": "\033[31m", "medium": "\033[33m", "low": "\033[32m"}
_RESET = "\033[0m"
_COLUMNS = [("offline", "offline"), ("under_min_isr", "<minISR"), ("at_min_isr", "=minISR"),
            ("under_replicated", "URP"), ("unclean_taken", "unclean"), ("would_need_unclean", "need-uncl"),
            ("leadership_moved", "moved"), ("moved_twice", "2x-moved"), ("blocks_shutdown", "blocking"),
            ("rf1_hit", "RF1")]


def _failure_notes(r: dict[str, Any]) -> list[str]:
    """What a scenario's row cannot show: whose controlled shutdown fails, how long killed brokers'
    partitions stay unanswered, and where the outcome depends on an order nobody controls."""
    notes = []
    if r.get("failed_shutdowns"):
        notes.append(f"controlled shutdown fails (retries, then an unclean stop) for broker(s) "
                     f"{', '.join(map(str, r['failed_shutdowns']))}")
    if r.get("unavailable_window_s") and r.get("unavailable_until_expiry"):
        notes.append(f"{r.get('unavailable_until_expiry', 0)} partitions unanswered for up to "
                     f"{r['unavailable_window_s']:g} s, until the killed brokers' ZooKeeper sessions expire")
    if r.get("isr_order_dependent"):
        notes.append(f"{r['isr_order_dependent']} leaderless partitions lose several ISR members at once: the one "
                     "kept is Kafka's if the deaths are noticed in one controller event, another if not "
                     "(isr_alternatives)")
    return notes


def _n(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _level(level: str, colour: bool) -> str:
    text = f"{level.upper():<8}"
    return f"{_COLOURS[level]}{text}{_RESET}" if colour else text


def format_report(summary: dict[str, Any], colour: bool = False, limit: int = 20, worst_k: int = 5) -> str:
    """The readable table: requested scenarios first, then the worst of the sweep; then worst partitions."""
    rows = summary["scenarios"]
    requested = [r for r in rows if r["kind"] in rm.REQUESTED_KINDS]
    ranked = sorted((r for r in rows if r["kind"] not in rm.REQUESTED_KINDS),
                    key=lambda r: (-r["level_rank"], -r["score"], r["scenario_id"]))
    shown = requested + ranked[:limit]
    lv = summary["levels"]
    snap = summary["snapshot"]
    lines = [
        f"Drain risk ({count(len(rows), 'scenario')}, Kafka {summary['kafka_version']} rules, effective min ISR = "
        f"{summary['effective_min_isr']}) on {snap['path'] or 'snapshot'} ({count(snap['brokers'], 'broker')}, "
        f"{count(snap['partitions'], 'partition')})",
        "levels: " + ", ".join(f"{n} {k}" for k, n in lv.items()) + f"; worst: {summary['level'].upper()}",
    ]
    base = summary.get("baseline", {}).get("current")
    if base:
        unknown = summary.get("unknown_state", {}).get("partitions", 0)
        lines.append(f"now: {base['offline']} offline, {base['under_min_isr']} under min ISR, "
                     f"{base['at_min_isr']} at min ISR, {base['under_replicated']} under-replicated, "
                     f"{_n(base['rf1'], 'RF=1 partition')}" + (f", {unknown} with an unknown state (not scored)"
                                                              if unknown else ""))
    rr = summary.get("reread")
    if rr:
        lines.append(f"scored on the cluster as read again at {rr['cluster']['taken_at']} (the plan's snapshot: "
                     f"{rr['plan_snapshot']['taken_at']}; {count(rr['partitions_appeared'], 'partition')} appeared "
                     "since)")
    intent = summary.get("intent")
    if intent:
        lines.append(f"after the plan, broker(s) {','.join(map(str, intent['brokers']))} host and lead nothing: "
                     + ("yes" if intent["holds"] else f"NO ({count(intent['remaining_count'], 'partition')} stay: "
                                                      "see the warning)"))
    for w in summary.get("warnings", []):
        lines.append(f"warning: {w}")
    width = max([len(r["name"]) for r in shown] + [8])
    head = f"{'scenario':<{width}}  {'level':<8}  " + "  ".join(f"{h:>9}" for _, h in _COLUMNS) + "  leaders max/ideal"
    lines += ["", head, "-" * len(head)]
    for i, r in enumerate(shown):
        if i == len(requested) and requested and ranked:
            lines.append(f"{'· worst of the sweep':<{width}}")
        load = f"{r['leader_max']}/{r['leader_ideal']:.0f} ({r['leader_ratio']:.2f}x)" if r["survivors"] else "-"
        lines.append(f"{r['name']:<{width}}  {_level(r['level'], colour)}  "
                     + "  ".join(f"{r[k]:>9}" for k, _ in _COLUMNS) + f"  {load}")
    if len(ranked) > limit:
        lines.append(f"({len(ranked) - limit} more sweep scenarios in scenarios.parquet / --json)")
    focus = requested or ranked[:3]
    notes = [(r, n) for r in focus for n in _failure_notes(r)]
    if notes:
        lines.append("")
        lines += [f"{r['name']}: {n}" for r, n in notes]
    for r in focus:
        if r["kind"] in ("rolling", "restart") and r["level_rank"] < 2 and len(focus) > 2:
            continue   # a roll's steps: the partitions of the steps that lose or block something
        wp = [p for p in r["worst_partitions"]][:worst_k]
        if not wp:
            continue
        lines += ["", f"worst partitions of {r['name']} ({_level(r['level'], colour).strip()}):"]
        for p in wp:
            what = [k for k in ("offline", "unclean_taken", "would_need_unclean", "under_min_isr", "at_min_isr",
                                "under_replicated", "rf1_hit", "moved_twice") if p.get(k)]
            if p.get("shutdown_blocked_by", -1) >= 0:
                what.append(f"blocks broker {p['shutdown_blocked_by']}'s controlled shutdown")
            back = p.get("new_isr") or [] if p.get("offline") else []
            other = p.get("isr_alternatives") or []
            if back:
                what.append(("back cleanly when one of " if len(back) > 1 else "back cleanly when ")
                            + f"{','.join(map(str, back))} returns"
                            + (f" ({' or '.join(map(str, other))} instead if the deaths are noticed in separate "
                               "controller events)" if other else ""))
            lines.append(f"  {p['topic']}-{p['partition']}: replicas {p['replicas']} leader {p['leader']} isr {p['isr']}"
                         f" -> leader {p['new_leader']} isr {p['new_isr']}  [{', '.join(what)}]")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------- test helpers
def snapshot_from_cluster(cluster: Cluster) -> sio.Snapshot:
    """An in-memory snapshot of a cluster description (tests, the demo): the tables `kplan snapshot` would
    write for it, without ZooKeeper. Topic settings resolve as Kafka does: override, broker default, default."""
    defaults = cluster.broker_defaults
    default_settings = kc.broker_default_settings(defaults, codec.broker_config_path(codec.DEFAULT_BROKER_ENTITY))
    names: list[str] = []
    part_rows: dict[str, list] = {k: [] for k in sio.PARTITIONS_SCHEMA.names}
    topic_rows: dict[str, list] = {k: [] for k in sio.TOPICS_SCHEMA.names}
    for t in sorted(cluster.topics, key=lambda t: t.name):
        names.append(t.name)
        settings = kc.topic_settings(t.config, default_settings, codec.topic_config_path(t.name))
        for p_id, p in enumerate(t.partitions):
            vals = {"topic": t.name, "partition": p_id, "replicas": p.replicas, "adding_replicas": p.adding,
                    "removing_replicas": p.removing, "target_replicas": None, "has_state": p.has_state,
                    "leader": p.leader if p.has_state else -1, "leader_epoch": p.leader_epoch if p.has_state else -1,
                    "isr": p.isr if p.has_state else [], "controller_epoch": 1 if p.has_state else -1,
                    "leader_recovery_state": p.leader_recovery_state, "state_version": 0 if p.has_state else -1,
                    "size_bytes": p.size_bytes, "state_error": None, "replica_sizes": None}
            for k, v in vals.items():
                part_rows[k].append(v)
        tvals = {"topic": t.name, "topic_id": t.topic_id, "znode_version": t.version, "partitions": len(t.partitions),
                 "replication_factor": max(len(p.replicas) for p in t.partitions),
                 "min_insync_replicas": settings.min_insync_replicas,
                 "unclean_leader_election": settings.unclean_leader_election,
                 "config": json.dumps(t.config, separators=(",", ":")), "leader_throttled_replicas": None,
                 "follower_throttled_replicas": None, "queued_for_deletion": t.deleting}
        for k, v in tvals.items():
            topic_rows[k].append(v)
    parts = pa.table({k: pa.array(v, sio.PARTITIONS_SCHEMA.field(k).type if k != "topic" else pa.string())
                      for k, v in part_rows.items()})
    parts = parts.set_column(0, "topic", pc.dictionary_encode(parts.column("topic")))
    parts = parts.cast(sio.PARTITIONS_SCHEMA)
    topics = pa.table({k: pa.array(v, sio.TOPICS_SCHEMA.field(k).type) for k, v in topic_rows.items()})
    bs = sorted(cluster.brokers, key=lambda b: b.id)
    ctrl = cluster.controller_id
    brokers = pa.table({
        "broker": pa.array([b.id for b in bs], pa.int32()),
        "alive": pa.array([b.alive for b in bs]),
        "rack": pa.array([b.rack for b in bs], pa.string()),
        "host": pa.array([b.host or f"broker-{b.id}" for b in bs]),
        "port": pa.array([b.port for b in bs], pa.int32()),
        "endpoints": pa.array([[f"PLAINTEXT://{b.host or f'broker-{b.id}'}:{b.port}"] for b in bs]),
        "epoch": pa.array([100 + b.id if b.alive else -1 for b in bs], pa.int64()),
        "registration_version": pa.array([5 if b.alive else -1 for b in bs], pa.int8()),
        "is_controller": pa.array([b.id == ctrl for b in bs]),
        "config": pa.array([json.dumps(b.config, separators=(",", ":")) for b in bs]),
        "leader_throttle_rate": pa.nulls(len(bs), pa.int64()),
        "follower_throttle_rate": pa.nulls(len(bs), pa.int64()),
        **{c: pa.nulls(len(bs), sio.BROKERS_SCHEMA.field(c).type)
           for c in ("capacity_bytes", "disk_used_bytes", "log_dirs", "log_dir_errors", "maintenance")},
    }).cast(sio.BROKERS_SCHEMA)
    fp = sio.assignment_fingerprint(parts.column("topic"), parts.column("partition").to_numpy(),
                                    parts.column("replicas"))
    lead = np.asarray(part_rows["leader"])
    manifest = {"format": sio.FORMAT, "source": {"zk": "description", "chroot": None},
                "counts": {"brokers": len(bs), "partitions": parts.num_rows, "offline": int((lead < 0).sum())},
                "fingerprint": fp, "broker_defaults": dict(defaults)}
    return sio.Snapshot(None, manifest, brokers, topics, parts)
