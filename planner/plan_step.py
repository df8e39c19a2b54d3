"""The plan step: a DrainRequest / RebalanceRequest in, a complete plan folder out (docs/PLAN.md).

This is where a plan's inputs are fixed, so whoever asks (CLI, Airflow task, UI) gets the same plan id for
the same inputs: the optimizer parameters, the snapshot section (fingerprint, taken_at) and the sizes source
(with the file's sha256) go into plan.json and so into the id. Where the inputs were read from (folder and
file paths) and how long the solver took are facts of this run, not of the plan: they go to solve.json.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner import snapshot_io as sio
from planner.errors import BadInput
from planner.plan_model import from_document
from planner.runfolder import check_output, step_output
from planner.text import count

if TYPE_CHECKING:
    from planner.requests import DrainRequest, PlanOutcome, RebalanceRequest, ReturnRequest
    from planner.snapshot_io import Snapshot

    Request = DrainRequest | RebalanceRequest | ReturnRequest


def _params(kind: str, req: Request):
    from planner.optimizer import Params

    brokers = [int(b) for b in req.brokers] if kind in ("drain", "return") else []
    params = Params(kind=kind, brokers=brokers, max_moves=getattr(req, "max_moves", None),
                    max_bytes=getattr(req, "max_bytes", None),
                    max_concurrent_per_broker=req.max_concurrent_per_broker, order=req.order,
                    balance=getattr(req, "balance", "auto"), leader_scope=req.leader_scope,
                    max_leader_changes=req.max_leader_changes, batch_seconds=req.batch_seconds)
    params.validate()
    return params


def _sizes(path: Path | None) -> tuple[dict[tuple[str, int], int] | None, dict[str, Any]]:
    """(sizes, the plan's record of where sizes came from). The file is named by content, not by path."""
    from planner.optimizer.sizes import parse_sizes

    if path is None:
        return None, {"source": "snapshot"}
    path = Path(path)
    if not path.is_file():
        raise BadInput(f"sizes file {path}: no such file")
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise BadInput(f"sizes file {path}: {e.strerror or e}") from None
    sizes = parse_sizes(raw.decode("utf-8", errors="replace"), str(path))
    return sizes, {"source": "file", "sha256": hashlib.sha256(raw).hexdigest()}


def _drain_plans(req: ReturnRequest, snap: Snapshot, brokers: list[int]) -> tuple[list[Any], list[str]]:
    """The drain plans whose moves a return reverses: the one given, or those the returning brokers'
    maintenance state names (plan_id, in the run folder `run`). Missing ones are a warning: the return then
    balances onto the brokers instead."""
    from planner.maintenance import from_manifest
    from planner.plan_model import read_plan

    if req.drain_plan is not None:
        plan = read_plan(req.drain_plan)
        if plan.kind != "drain":
            raise BadInput(f"{req.drain_plan} is a {plan.kind} plan, not a drain: a return reverses a drain's moves")
        if not set(plan.drained_brokers) & set(brokers):
            raise BadInput(f"the drain plan {plan.id} drained brokers {list(plan.drained_brokers)}, none of the "
                           f"returning brokers {brokers}")
        return [plan], []
    entries = from_manifest(snap.manifest.get("maintenance"))
    plans, notes, seen = [], [], set()
    for b in brokers:
        e = entries.get(b)
        if e is None or not e.plan_id or e.plan_id in seen:
            continue
        seen.add(e.plan_id)
        found = None
        # the run is the plan's records folder (planner.runfolder.records_folder): <run> for <run>/plan, else
        # <plan folder>-run
        for folder in ([Path(e.run) / "plan", Path(e.run.removesuffix("-run")), Path(e.run)] if e.run else []):
            try:
                candidate = read_plan(folder)
            except BadInput:
                continue
            if candidate.id == e.plan_id:
                found = candidate
                break
        if found is None:
            notes.append(f"the drain plan {e.plan_id} of broker {b} was not found (its maintenance state names "
                         f"run {e.run or 'none'}): balancing onto the broker instead of reversing the drain's moves; "
                         "give the drain's plan folder (drain_plan) to reverse them")
        else:
            plans.append(found)
    return plans, notes


def run_plan(kind: str, req: Request, say: Callable[[str], None]) -> PlanOutcome:
    from planner.optimizer import from_snapshot, make_plan
    from planner.plan_format import write_plan
    from planner.requests import PlanOutcome
    from planner.snapshot_io import read_snapshot

    started = time.perf_counter()
    params = _params(kind, req)
    if not isinstance(req.max_disk_usage, int | float) or isinstance(req.max_disk_usage, bool) \
            or not 0 < req.max_disk_usage <= 1:
        raise BadInput(f"max_disk_usage must be a fraction in (0, 1] (e.g. 0.85), got {req.max_disk_usage!r}")
    snapshot_dir = Path(req.snapshot)
    inputs = (snapshot_dir,) + ((Path(req.sizes),) if req.sizes is not None else ()) \
        + ((Path(req.drain_plan),) if getattr(req, "drain_plan", None) else ())
    check_output(Path(req.out), req.force, inputs)
    say(f"reading snapshot {snapshot_dir}")
    snap = read_snapshot(snapshot_dir)
    sizes, sizes_param = _sizes(req.sizes)
    pb = from_snapshot(snap, sizes=sizes, exclude_topics=req.exclude_topics, rack_aware=req.rack_aware,
                       max_disk_usage=req.max_disk_usage)
    undo_plans: list[Any] = []
    if kind == "return":
        undo_plans, notes = _drain_plans(req, snap, params.brokers)
        pb.warnings.extend(notes)
        params.undo = tuple((m.topic, m.partition, m.from_replicas, m.to_replicas) for p in undo_plans
                            for m in p.moves if m.kind == "data")
        params.undo_plan = ",".join(p.id for p in undo_plans) or None
    if kind == "rebalance" and params.balance == "bytes" and not pb.sizes_known:
        # a bytes balance on unknown sizes would level nothing real: say so, and level replica counts
        unknown = int((pb.sizes < 0).sum()) if len(pb.sizes) else pb.num_partitions
        pb.warnings.append(f"balance bytes was asked, but the sizes of {count(unknown, 'partition')} are unknown "
                           "(no sizes file, and the snapshot has none for them): balanced by replica count instead; "
                           "give a sizes file (kafka-log-dirs.sh --describe output) to balance bytes")
        params.balance = "count"
    load_s = time.perf_counter() - started
    say(f"{count(pb.num_partitions, 'partition')}, {count(pb.num_brokers, 'broker')}, "
        f"{'rack-aware' if pb.rack_aware else 'not rack-aware'}, "
        f"{'sizes known' if pb.sizes_known else 'counting replicas (sizes unknown)'}")
    res = make_plan(pb, params, say)
    t1 = time.perf_counter()
    snapshot = {"fingerprint": snap.fingerprint, "taken_at": snap.manifest.get("taken_at"),
                **sio.backend_record(snap.manifest)}   # {"backend": "kraft"} for a KRaft snapshot, else nothing
    parameters = {
        "brokers": params.brokers,
        "exclude_topics": req.exclude_topics,
        "rack_aware": pb.rack_aware,
        "sizes": sizes_param,
        "max_moves": params.max_moves,
        "max_bytes": params.max_bytes,
        "max_concurrent_per_broker": params.max_concurrent_per_broker,
        "order": params.order,
        "balance": res.rebalance.mode if res.rebalance else None,
        "leader_scope": params.scope,
        "max_leader_changes": params.max_leader_changes,
        "batch_seconds": params.batch_seconds,
        "max_disk_usage": pb.max_disk_usage,
    }
    if kind == "return":
        parameters["drain_plans"] = [p.id for p in undo_plans]
    timings = {"load": round(load_s, 3), **{k.removesuffix("_s"): round(v, 3) for k, v in res.timings.items()}}
    say(f"writing {req.out}")

    def solve_info() -> dict[str, Any]:
        timings["write"] = round(time.perf_counter() - t1, 3)
        timings["total"] = round(time.perf_counter() - started, 3)
        return {"inputs": {"snapshot": str(snapshot_dir), "sizes": str(req.sizes) if req.sizes else None,
                           **({"drain_plans": [str(p.path) for p in undo_plans]} if kind == "return" else {})},
                "timings_s": timings, "leader_method": res.leader_method,
                "rebalance_rounds": res.rebalance.rounds if res.rebalance else None}

    with step_output(req.out, req.force, inputs) as tmp:
        doc = write_plan(tmp, res, snapshot, parameters, solve_info)
        solve = json.loads((tmp / "solve.json").read_text())
    out = Path(req.out)
    return PlanOutcome(out, doc["id"], from_document(doc, out), solve)
