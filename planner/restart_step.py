"""The restart plan step: a RestartRequest in, a complete plan folder out (docs/PLAN.md "Restart plans").

As in planner.plan_step, everything that makes the plan (the parameters, the snapshot's fingerprint, the
sizes file by content) goes into plan.json and so into its id; where the inputs were read from and how long
it took go to solve.json.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner import snapshot_io as sio
from planner.errors import BadInput
from planner.plan_model import from_document
from planner.plan_step import _sizes
from planner.runfolder import check_output, step_output
from planner.text import count, size

if TYPE_CHECKING:
    from planner.requests import PlanOutcome, RestartRequest


def run_restart(req: RestartRequest, say: Callable[[str], None]) -> PlanOutcome:
    from planner.optimizer import from_snapshot
    from planner.optimizer.restart import RestartParams, plan_restart
    from planner.requests import PlanOutcome
    from planner.restart_format import write_restart_plan
    from planner.snapshot_io import read_snapshot

    started = time.perf_counter()
    params = RestartParams(brokers=[int(b) for b in req.brokers], order=req.order, kafka_version=req.kafka_version,
                           max_concurrent_per_broker=req.max_concurrent_per_broker, batch_order=req.batch_order,
                           batch_seconds=req.batch_seconds)
    params.validate()
    if not isinstance(req.max_disk_usage, int | float) or isinstance(req.max_disk_usage, bool) \
            or not 0 < req.max_disk_usage <= 1:
        raise BadInput(f"max_disk_usage must be a fraction in (0, 1] (e.g. 0.85), got {req.max_disk_usage!r}")
    snapshot_dir = Path(req.snapshot)
    inputs = (snapshot_dir,) + ((Path(req.sizes),) if req.sizes is not None else ())
    check_output(Path(req.out), req.force, inputs)
    say(f"reading snapshot {snapshot_dir}")
    snap = read_snapshot(snapshot_dir)
    sizes, sizes_param = _sizes(req.sizes)
    pb = from_snapshot(snap, sizes=sizes, exclude_topics=req.exclude_topics, rack_aware=req.rack_aware,
                       max_disk_usage=req.max_disk_usage)
    load_s = time.perf_counter() - started
    say(f"{count(pb.num_partitions, 'partition')}, {count(pb.num_brokers, 'broker')}, restart of "
        f"{count(len(params.brokers), 'broker')}")
    res = plan_restart(pb, snap, params, progress=say)
    t1 = time.perf_counter()
    say(f"{int(res.added.sum())} temporary replicas for {count(len(res.changed), 'partition')}; a full drain of "
        f"the same brokers would move {res.drain['replicas']} replicas ({size(res.drain['bytes'])})")
    snapshot = {"fingerprint": snap.fingerprint, "taken_at": snap.manifest.get("taken_at"),
                **sio.backend_record(snap.manifest)}   # {"backend": "kraft"} for a KRaft snapshot, else nothing
    parameters = {
        "brokers": [int(b) for b in req.brokers],
        "roll_order": params.order,
        "exclude_topics": req.exclude_topics,
        "rack_aware": pb.rack_aware,
        "sizes": sizes_param,
        "kafka_version": params.kafka_version,
        "max_concurrent_per_broker": params.max_concurrent_per_broker,
        "order": params.batch_order,
        "batch_seconds": params.batch_seconds,
        "max_disk_usage": pb.max_disk_usage,
    }
    timings = {"load": round(load_s, 3), **{k.removesuffix("_s"): round(v, 3) for k, v in res.timings.items()}}

    def solve_info() -> dict[str, Any]:
        timings["write"] = round(time.perf_counter() - t1, 3)
        timings["total"] = round(time.perf_counter() - started, 3)
        return {"inputs": {"snapshot": str(snapshot_dir), "sizes": str(req.sizes) if req.sizes else None},
                "timings_s": timings}

    say(f"writing {req.out}")
    with step_output(req.out, req.force, inputs) as tmp:
        doc = write_restart_plan(tmp, res, snapshot, parameters, solve_info)
        solve = json.loads((tmp / "solve.json").read_text())
    out = Path(req.out)
    return PlanOutcome(out, doc["id"], from_document(doc, out), solve)
