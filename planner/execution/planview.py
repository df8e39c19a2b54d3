"""What the executor needs from a plan, as plain frozen data: the moves and the execution units.

A unit is one submission of `/admin/reassign_partitions`: a plan batch, or a part of one when the operator
lowers the per-broker concurrency at apply time (`max_concurrent`). Units keep the plan's order and targets
exactly; splitting only paces them. `before[i]` is the replica list partition i has just before the unit runs
(the plan's "from", or what an earlier unit wrote, e.g. a drain's leadership batch), which is what preflight
and resume check and what a revert writes back.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from planner.errors import BadInput

Key = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Move:
    topic: str
    partition: int
    frm: tuple[int, ...]
    to: tuple[int, ...]
    bytes: int | None
    kind: str  # "data" | "leader"

    @property
    def key(self) -> Key:
        return (self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class Entry:
    topic: str
    partition: int
    replicas: tuple[int, ...]

    @property
    def key(self) -> Key:
        return (self.topic, self.partition)


@dataclass(frozen=True)
class Unit:
    index: int                  # execution order, 0..n-1
    batch: int                  # the plan batch it comes from
    part: int                   # sub-batch number inside that plan batch (0 when not split)
    parts: int                  # how many sub-batches the plan batch was split into
    kind: str                   # "leadership" | "data" | "revert"
    entries: tuple[Entry, ...]
    before: tuple[tuple[int, ...], ...]
    bytes: int                  # bytes this unit copies (0 when unknown)
    throttle: int | None = None  # the plan's suggested rate for this batch (bytes/s), if any

    @property
    def label(self) -> str:
        name = "revert" if self.kind == "revert" else f"batch {self.batch}"
        return f"{name}.{self.part + 1}/{self.parts}" if self.parts > 1 else name

    def keys(self) -> list[Key]:
        return [e.key for e in self.entries]


@dataclass(frozen=True)
class RunPlan:
    id: str
    kind: str
    moves: Mapping[Key, Move]
    units: tuple[Unit, ...]
    plan_max_concurrent: int | None
    max_concurrent: int | None
    drained: tuple[int, ...] = ()
    path: str = ""
    warnings: tuple[str, ...] = field(default_factory=tuple)
    returning: tuple[int, ...] = ()      # a return plan's brokers (planner/maintenance.py: returning)
    # What the plan knew of the cluster (plan.json's snapshot and topics sections): lets a drain's intent check
    # name what appeared since the snapshot (planner.execution.intent).
    snapshot_taken_at: str | None = None
    topics: Mapping[str, tuple[int, bool]] = field(default_factory=dict)   # name -> (partitions, excluded)

    @property
    def hexid(self) -> str:
        return self.id.split(":", 1)[-1]

    @property
    def partitions_total(self) -> int:
        return len(self.moves)

    @functools.cached_property
    def bytes_total(self) -> int:  # cached: progress asks for it on every check
        return sum(m.bytes or 0 for m in self.moves.values())

    def final_unit(self) -> dict[Key, int]:
        """For each partition, the last unit that writes it (the one that brings it to its target)."""
        last: dict[Key, int] = {}
        for u in self.units:
            for e in u.entries:
                last[e.key] = u.index
        return last

    def digest(self) -> str:
        """Identifies the execution units (plan id + how they were split), checked when a run resumes."""
        h = hashlib.sha256(self.id.encode())
        for u in self.units:
            h.update(json.dumps([u.index, u.batch, u.part, u.kind,
                                 [[e.topic, e.partition, list(e.replicas)] for e in u.entries]],
                                separators=(",", ":")).encode())
        return "sha256:" + h.hexdigest()


def _split(entries: Sequence[Entry], before: Sequence[tuple[int, ...]], limit: int) -> list[list[int]]:
    """First-fit, in the plan's order: at most `limit` moves per broker per sub-batch, where a move counts
    against every broker it adds a replica to or removes one from (the planner's own rule)."""
    loads: list[dict[int, int]] = []
    groups: list[list[int]] = []
    for i, (e, b) in enumerate(zip(entries, before, strict=True)):
        touched = (set(e.replicas) - set(b)) | (set(b) - set(e.replicas))
        k = 0
        while k < len(loads) and any(loads[k].get(x, 0) >= limit for x in touched):
            k += 1
        if k == len(loads):
            loads.append({})
            groups.append([])
        for x in touched:
            loads[k][x] = loads[k].get(x, 0) + 1
        groups[k].append(i)
    return groups


def _suggested(batch: Mapping[str, Any]) -> int | None:
    """The plan's suggested throttle of a batch (`suggested_throttle_bytes_per_s`, issue 11; 0 or absent: none)."""
    return _int_or_none(batch.get("suggested_throttle_bytes_per_s"))


def _int_or_none(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return int(value)


def from_document(doc: Mapping[str, Any], max_concurrent: int | None = None, path: str = "") -> RunPlan:
    """Execution view of a validated plan document (plan.json as a mapping)."""
    moves = {}
    for m in doc["moves"]:
        mv = Move(str(m["topic"]), int(m["partition"]), tuple(int(x) for x in m["from"]),
                  tuple(int(x) for x in m["to"]), m.get("bytes"), str(m.get("kind", "data")))
        moves[mv.key] = mv
    batches = [(int(b["index"]), str(b["kind"]),
                [Entry(str(t), int(p), tuple(int(x) for x in reps))
                 for (t, p), reps in zip(b["partitions"], b["replicas"], strict=True)],
                _suggested(b)) for b in doc["batches"]]
    return _build(str(doc["id"]), str(doc.get("kind", "")), moves, batches, doc.get("parameters") or {},
                  doc.get("warnings") or (), max_concurrent, path, doc.get("snapshot") or {}, doc.get("topics") or {})


def from_plan(plan: Any, max_concurrent: int | None = None) -> RunPlan:
    """Execution view of a `planner.plan_model.Plan` (read and checked by `read_plan`)."""
    moves = {(m.topic, m.partition): Move(m.topic, m.partition, m.from_replicas, m.to_replicas, m.bytes, m.kind)
             for m in plan.moves}
    batches = [(b.index, b.kind, [Entry(t, p, r) for (t, p), r in zip(b.partitions, b.replicas, strict=True)],
                _int_or_none(b.suggested_throttle_bytes_per_s)) for b in plan.batches]
    return _build(plan.id, plan.kind, moves, batches, plan.parameters, plan.warnings, max_concurrent,
                  str(plan.path or ""), plan.snapshot, plan.topics)


def _build(plan_id: str, kind: str, moves: dict[Key, Move], batches: list[tuple[int, str, list[Entry], int | None]],
           params: Mapping[str, Any], warnings: Any, max_concurrent: int | None, path: str,
           snapshot: Mapping[str, Any] | None = None, topics: Mapping[str, Any] | None = None) -> RunPlan:
    plan_limit = params.get("max_concurrent_per_broker")
    plan_limit = int(plan_limit) if isinstance(plan_limit, int) and plan_limit > 0 else None
    if max_concurrent is not None:
        if max_concurrent < 1:
            raise BadInput("max concurrent moves per broker must be at least 1")
        if plan_limit is not None and max_concurrent > plan_limit:
            raise BadInput(f"the plan was reviewed with at most {plan_limit} moves per broker per batch; apply can "
                           f"lower that (split batches) but not raise it to {max_concurrent}")
    current: dict[Key, tuple[int, ...]] = {k: m.frm for k, m in moves.items()}
    units: list[Unit] = []
    for index, bkind, entries, throttle in sorted(batches, key=lambda b: b[0]):
        for e in entries:
            if e.key not in moves:
                raise BadInput(f"plan batch {index} writes {e.topic}-{e.partition}, which is not a move of the plan")
        before = [current[e.key] for e in entries]
        if bkind == "data" and max_concurrent is not None and (plan_limit is None or max_concurrent < plan_limit):
            groups = _split(entries, before, max_concurrent)
        else:
            groups = [list(range(len(entries)))]
        for j, g in enumerate(groups):
            ents = tuple(entries[i] for i in g)
            nbytes = sum(moves[e.key].bytes or 0 for e in ents) if bkind == "data" else 0
            units.append(Unit(len(units), index, j, len(groups), bkind, ents, tuple(before[i] for i in g), nbytes,
                              throttle))
        for e in entries:
            current[e.key] = e.replicas
    for k, m in moves.items():
        if current[k] != m.to:
            raise BadInput(f"the plan's batches leave {k[0]}-{k[1]} at {list(current[k])}, not its target {list(m.to)}")
    drained = tuple(int(x) for x in params.get("brokers") or ()) if kind == "drain" else ()
    returning = tuple(int(x) for x in params.get("brokers") or ()) if kind == "return" else ()
    return RunPlan(plan_id, kind, moves, tuple(units), plan_limit, max_concurrent, drained, path,
                   tuple(str(w) for w in warnings), returning, (snapshot or {}).get("taken_at"),
                   _topics(topics or {}))


def _topics(section: Mapping[str, Any]) -> dict[str, tuple[int, bool]]:
    """plan.json's topics section (parallel lists: names, partitions, excluded) as name -> (partitions, excluded);
    empty when the plan has none (hand-made plans, plans before issue 11)."""
    names, counts = section.get("names") or [], section.get("partitions") or []
    excluded = section.get("excluded") or [False] * len(names)
    if not (len(names) == len(counts) == len(excluded)):
        return {}
    return {str(n): (int(c), bool(x)) for n, c, x in zip(names, counts, excluded, strict=True)}


def revert_unit(plan: RunPlan, unit: Unit, index: int) -> Unit:
    """The unit that writes `unit`'s partitions back to the replicas they had before it."""
    entries = tuple(Entry(e.topic, e.partition, b) for e, b in zip(unit.entries, unit.before, strict=True))
    nbytes = 0
    if unit.kind == "data":
        nbytes = sum(plan.moves[e.key].bytes or 0 for e in unit.entries)
    return Unit(index, unit.batch, unit.part, unit.parts, "revert", entries,
                tuple(e.replicas for e in unit.entries), nbytes, unit.throttle)
