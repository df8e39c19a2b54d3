"""Hand-made plan folders for tests that need a plan with chosen moves (written from docs/PLAN.md, not by the
optimizer's writer, so the reader is checked against the documented format)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from planner.codec import ReassignEntry, encode_reassignment


def _id(doc: dict) -> str:
    body = {k: v for k, v in doc.items() if k != "id"}
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canon.encode()).hexdigest()


def write_plan_folder(out: Path, fingerprint: str, current: dict[tuple[str, int], list[int]],
                      targets: list[ReassignEntry]) -> Path:
    """A plan folder moving each target's partition from `current` (default [1] when unknown) to its list."""
    out.mkdir(parents=True, exist_ok=True)
    targets = sorted(targets, key=lambda e: (e.topic, e.partition))
    moves, data, lead = [], [], []
    for e in targets:
        frm = current.get((e.topic, e.partition), [1])
        kind = "data" if set(frm) != set(e.replicas) else "leader"
        moves.append({"topic": e.topic, "partition": e.partition, "from": frm, "to": list(e.replicas),
                      "bytes": None, "kind": kind})
        (data if kind == "data" else lead).append(([e.topic, e.partition], list(e.replicas)))
    batches = []
    for kind, items in (("leadership", lead), ("data", data)):
        if items:
            batches.append({"index": len(batches), "kind": kind, "partitions": [p for p, _ in items],
                            "replicas": [r for _, r in items]})
    doc = {"format": "kplan-plan/1", "id": "", "kind": "rebalance", "snapshot": {"fingerprint": fingerprint},
           "parameters": {}, "moves": moves, "batches": batches, "warnings": []}
    doc["id"] = _id(doc)
    (out / "plan.json").write_text(json.dumps(doc))
    (out / "reassignment.json").write_bytes(encode_reassignment(targets))
    (out / "rollback.json").write_bytes(encode_reassignment(
        [ReassignEntry(m["topic"], m["partition"], tuple(m["from"])) for m in moves]))
    return out
