"""A restart plan's folder (docs/PLAN.md "Restart plans"): plan.json of kind "restart" and its files.

Where the plan is a reassignment, its files are Kafka's `kafka-reassign-partitions.sh` format:
    reassignment.json            the temporary target lists (the original lists + the temporary replicas)
    rollback.json                the original lists: the undo after the last broker
    batch-NNN.json               the protecting reassignment, batch by batch (throttled like any data batch)
    step-NNN-broker-B-demote.json   the lists step NNN's demotion writes (a preferred election follows)
    step-NNN-broker-B-restore.json  the lists its restore writes back (then a preferred election)
plan.json's `roll` section names the order, each step's files and the partitions whose leadership cannot
move; `protection` says which partitions get temporary replicas and why; `drain_comparison` what a full drain
of the same brokers would move; `replay_check` the replay's verdict on every step before and after the plan.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from planner.codec import ReassignEntry, encode_reassignment
from planner.optimizer.batches import batch_traffic
from planner.optimizer.planning import broker_figures
from planner.optimizer.restart import RestartResult
from planner.plan_format import _dumps, batch_entries
from planner.plan_model import FORMAT, batch_file_name, file_sha256, plan_id


def step_file(step: int, broker: int, what: str) -> str:
    return f"step-{step:03d}-broker-{broker}-{what}.json"


def _ids(pb: Any, row: np.ndarray) -> list[int]:
    return [int(pb.broker_ids[b]) for b in row.tolist() if b >= 0]


def restart_document(res: RestartResult, snapshot: dict[str, Any], parameters: dict[str, Any],
                     files: dict[str, str] | None = None) -> dict[str, Any]:
    pb = res.problem
    rows = res.changed
    sizes_known = pb.sizes_known
    moves = []
    for r in rows.tolist():
        frm, to = _ids(pb, pb.replicas[r]), _ids(pb, res.final[r])
        moves.append({"topic": pb.topic_names[pb.topic_of[r]], "partition": int(pb.partition[r]), "from": frm,
                      "to": to, "bytes": int(pb.sizes[r]) * int(res.added[r]) if sizes_known else None,
                      "kind": "data", "reason": str(res.protected_reason[r])})
    batches = []
    for b, tr in zip(res.batches, batch_traffic(pb, res.batches, res.params.batch_seconds), strict=True):
        batches.append({"index": b.index, "kind": b.kind, "file": batch_file_name(b.index, len(res.batches)), **tr,
                        "partitions": [[pb.topic_names[pb.topic_of[r]], int(pb.partition[r])] for r in b.rows.tolist()],
                        "replicas": [_ids(pb, row) for row in b.replicas]})
    roll = np.isin(pb.broker_ids, res.order)
    eligible = pb.alive.copy()
    width = max(pb.replicas.shape[1], res.final.shape[1])
    orig = np.full((pb.num_partitions, width), -1, np.int32)
    orig[:, : pb.replicas.shape[1]] = pb.replicas
    during = np.full((pb.num_partitions, width), -1, np.int32)
    during[:, : res.final.shape[1]] = res.final
    before, after = broker_figures(pb, orig, eligible), broker_figures(pb, during, eligible)
    bytes_moved = sum(m["bytes"] for m in moves) if sizes_known else None
    steps = []
    for i, s in enumerate(res.steps, start=1):
        steps.append({"step": i, "broker": s.broker, "hosted": s.hosted, "leads": s.leads,
                      "demote": {"file": step_file(i, s.broker, "demote"), "partitions": len(s.demote)},
                      "restore": {"file": step_file(i, s.broker, "restore"), "partitions": len(s.restore)},
                      "cannot_move": s.cannot_move})
    cannot = sum(len(s.cannot_move) for s in res.steps)
    drain = dict(res.drain)
    summary = {
        "replica_moves": int(res.added.sum()),
        "partitions_moved": len(moves),
        "bytes_moved": bytes_moved,
        "batches": len(batches),
        "brokers": len(res.order),
        "protected_rf1": res.reasons["rf1"],
        "protected_shrunk_isr": res.reasons["shrunk-isr"],
        "protected_min_isr": res.reasons["min-isr"],
        "unprotected": len(res.unprotected),
        "leaders_to_move": sum(s.leads for s in res.steps),
        "cannot_move": cannot,
        "drain_replicas": drain["replicas"],
        "drain_bytes": drain["bytes"],
        "worst_level_before": _worst(res.check["before"]),
        "worst_level_after": _worst(res.check["after"]),
    }
    warnings = list(res.warnings)
    if cannot:
        warnings.append(f"{cannot} partition(s) keep a restarting broker as leader (no other registered in-sync "
                        "replica): " + ", ".join(n for s in res.steps for n in s.cannot_move[:10]))
    doc: dict[str, Any] = {
        "format": FORMAT,
        "id": "",
        "kind": "restart",
        "snapshot": snapshot,
        "parameters": parameters,
        "summary": summary,
        "brokers": {
            "ids": [int(b) for b in pb.broker_ids.tolist()],
            "racks": [pb.rack_names[r] if r >= 0 else None for r in pb.rack_of.tolist()],
            "alive": [bool(x) for x in pb.alive.tolist()],
            "drained": [False] * pb.num_brokers,
            "eligible": [bool(x) for x in eligible.tolist()],
            "restarting": [bool(x) for x in roll.tolist()],
            "maintenance": [e.state if (e := pb.maintenance_entries.get(int(b))) else None
                            for b in pb.broker_ids.tolist()],
        },
        # brokers in maintenance when the snapshot was taken: the roll gives them no temporary replica (and
        # does not restart them); as a drain or rebalance plan records them (plan_format.maintenance_section)
        "maintenance": {"left_out": [{k: v for k, v in pb.maintenance_entries[int(b)].as_dict().items()
                                      if k != "format"} for b in pb.broker_ids[pb.in_maintenance].tolist()]},
        "before": before,
        "after": after,
        "roll": {"order": list(res.order), "order_source": res.params.order, "controller": res.controller,
                 "steps": steps, "undo": {"file": "rollback.json", "partitions": len(moves)}},
        "protection": {"partitions": len(moves), "replicas": int(res.added.sum()), "bytes": bytes_moved,
                       "reasons": dict(res.reasons), "unprotected": list(res.unprotected)},
        "drain_comparison": drain,
        "replay_check": res.check,
        "moves": moves,
        "batches": batches,
        "solver": {"placement": {"method": "fewest temporary replicas per partition (the roll's ISR rule), "
                                           "placed greedily: outside the roll, new racks, least temporary load",
                                 "status": "FEASIBLE"}},
        "warnings": warnings,
    }
    if files is not None:
        doc["files"] = dict(sorted(files.items()))
    doc["id"] = plan_id(doc)
    return doc


def _worst(entries: list[dict]) -> str:
    levels = ("low", "medium", "high", "critical")
    return levels[max((levels.index(e["level"]) for e in entries), default=0)]


def _entries(res: RestartResult, original: bool) -> list[ReassignEntry]:
    pb = res.problem
    m = pb.replicas if original else res.final
    return [ReassignEntry(pb.topic_names[pb.topic_of[r]], int(pb.partition[r]), tuple(_ids(pb, m[r])))
            for r in res.changed.tolist()]


def write_restart_plan(out: Path | str, res: RestartResult, snapshot: dict[str, Any], parameters: dict[str, Any],
                       solve: dict[str, Any] | Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Write the files, then plan.json with their checksums (each through a temporary name, plan.json last),
    then solve.json."""
    import json

    out = Path(out)
    texts = {
        "reassignment.json": encode_reassignment(_entries(res, False)) + b"\n",
        "rollback.json": encode_reassignment(_entries(res, True)) + b"\n",
    }
    for b in res.batches:
        texts[batch_file_name(b.index, len(res.batches))] = encode_reassignment(batch_entries(res, b)) + b"\n"
    for i, s in enumerate(res.steps, start=1):
        texts[step_file(i, s.broker, "demote")] = encode_reassignment(s.demote) + b"\n"
        texts[step_file(i, s.broker, "restore")] = encode_reassignment(s.restore) + b"\n"
    doc = restart_document(res, snapshot, parameters, {n: file_sha256(d) for n, d in texts.items()})
    texts["plan.json"] = (_dumps(doc) + "\n").encode("utf-8")
    out.mkdir(parents=True, exist_ok=True)
    for name in texts:
        tmp = out / f".{name}.tmp"
        tmp.write_bytes(texts[name])
        os.replace(tmp, out / name)
    info = solve() if callable(solve) else solve
    (out / "solve.json").write_text(json.dumps({"plan_id": doc["id"], **info}, indent=2) + "\n")
    return doc
