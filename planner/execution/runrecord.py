"""The run record as types, with its legal transitions in one table (Cruise Control's ExecutionTask is the model:
`VALID_TRANSFER` maps each state to the states it may move to, and `ensureValidTransfer` raises on anything else;
only its ExecutionTaskManager changes a task's state).

This module is backend-neutral: it knows the states, the transitions and the JSON the record is stored as, not
where it is stored. The ZooKeeper backend (runstate.RunManager) turns each transition into the operations of one
WriteGate transaction; a second backend (KRaft, through the Admin API) stores the same JSON elsewhere and keeps
the same states and the same exactly-once submission.

The JSON is the `kplan-run/1` document written since the first apply (a unit is the list `[state, submitted_at,
completed_at]`, the revert a dict): a run recorded by an older kplan is read and resumed as it is, and keys this
version does not know are kept and written back.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

FORMAT = "kplan-run/1"
HISTORY = 50

# A unit's states (a plan batch, or a revert of one). INTENDED is the KRaft backend's: recorded before its
# AlterPartitionReassignments request (SUBMITTED after it), since no Admin request can share a transaction with
# the record; the ZooKeeper backend goes from PENDING to SUBMITTED in one transaction with the znode.
PENDING, INTENDED, SUBMITTED, ELECTING, COMPLETED = "pending", "intended", "submitted", "electing", "completed"
# A run's states.
RUNNING, DONE, FAILED = "running", "completed", "failed"
CANCELLING, CANCELLED, REVERTING, REVERTED = "cancelling", "cancelled", "reverting", "reverted"
TERMINAL = (DONE, CANCELLED, REVERTED)

UNIT_TRANSITIONS: dict[str, frozenset[str]] = {
    PENDING: frozenset({SUBMITTED, INTENDED}),
    INTENDED: frozenset({SUBMITTED}),     # a resumed run re-sends the same target (idempotent) and goes on
    SUBMITTED: frozenset({ELECTING, COMPLETED}),
    ELECTING: frozenset({COMPLETED}),
    COMPLETED: frozenset(),
}
REVERT_TRANSITIONS: dict[str, frozenset[str]] = {
    PENDING: frozenset({SUBMITTED, INTENDED}),
    INTENDED: frozenset({SUBMITTED}),
    SUBMITTED: frozenset({COMPLETED}),
    COMPLETED: frozenset(),
}
RUN_TRANSITIONS: dict[str, frozenset[str]] = {
    RUNNING: frozenset({DONE, FAILED, CANCELLING}),
    FAILED: frozenset({RUNNING, CANCELLING}),          # resumed, or cancelled after a failure
    CANCELLING: frozenset({REVERTING, CANCELLED, REVERTED}),
    REVERTING: frozenset({REVERTED, CANCELLED}),       # a revert completed earlier, the run then ended by cancel
    DONE: frozenset(),
    CANCELLED: frozenset(),
    REVERTED: frozenset(),
}


class IllegalTransition(RuntimeError):
    """A state change the table does not allow (a bug): nothing was changed, nothing written."""


def now() -> float:
    return round(time.time(), 3)


def ensure(table: dict[str, frozenset[str]], what: str, frm: str, to: str) -> None:
    """Cruise Control's ensureValidTransfer: raise unless `frm -> to` is in `table`."""
    if to not in table.get(frm, frozenset()):
        allowed = ", ".join(sorted(table.get(frm, ()))) or "nothing (final)"
        raise IllegalTransition(f"{what}: {frm} -> {to} is not a legal transition (from {frm}: {allowed})")


@dataclass
class UnitRecord:
    """One unit's state; stored as the list [state, submitted_at, completed_at]."""

    state: str = PENDING
    submitted_at: float | None = None
    completed_at: float | None = None

    @classmethod
    def from_json(cls, raw: Any) -> UnitRecord:
        return cls(raw[0], raw[1] if len(raw) > 1 else None, raw[2] if len(raw) > 2 else None)

    def to_json(self) -> list[Any]:
        return [self.state, self.submitted_at, self.completed_at]

    @property
    def in_flight(self) -> bool:
        return self.state in (INTENDED, SUBMITTED, ELECTING)


@dataclass
class RevertRecord:
    """A cancel's revert of one unit (its partitions moved back to the replicas they had before it)."""

    unit: int
    state: str = PENDING
    submitted_at: float | None = None
    completed_at: float | None = None

    @classmethod
    def from_json(cls, raw: dict[str, Any] | None) -> RevertRecord | None:
        if raw is None:
            return None
        return cls(raw["unit"], raw.get("state", PENDING), raw.get("submitted_at"), raw.get("completed_at"))

    def to_json(self) -> dict[str, Any]:
        return {"unit": self.unit, "state": self.state, "submitted_at": self.submitted_at,
                "completed_at": self.completed_at}


# Keys in the order the first kplan wrote them (the stored document stays byte-for-byte the same shape).
_KNOWN = ("format", "plan_id", "kind", "digest", "state", "created_at", "updated_at", "holder", "options", "units",
          "revert", "error", "progress", "verify", "history")


@dataclass
class RunRecord:
    """One plan's run on one cluster. Change it only through the transitions below (the manager does)."""

    plan_id: str
    kind: str
    digest: str
    state: str = RUNNING
    created_at: float = 0.0
    updated_at: float = 0.0
    holder: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    units: list[UnitRecord] = field(default_factory=list)
    revert: RevertRecord | None = None
    error: str | None = None
    progress: dict[str, Any] | None = None
    verify: dict[str, Any] | None = None
    history: list[list[Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)   # intent, cancel, and keys of other versions: kept

    # ------------------------------------------------------------------------------------------ JSON
    @classmethod
    def new(cls, plan_id: str, kind: str, digest: str, units: int, holder: dict[str, Any],
            options: dict[str, Any]) -> RunRecord:
        t = now()
        return cls(plan_id, kind, digest, RUNNING, t, t, holder, options, [UnitRecord() for _ in range(units)],
                   history=[[t, "created"]])

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> RunRecord:
        return cls(doc.get("plan_id", ""), doc.get("kind", ""), doc.get("digest", ""), doc.get("state", RUNNING),
                   doc.get("created_at", 0.0), doc.get("updated_at", 0.0), doc.get("holder") or {},
                   doc.get("options") or {}, [UnitRecord.from_json(u) for u in doc.get("units", [])],
                   RevertRecord.from_json(doc.get("revert")), doc.get("error"), doc.get("progress"),
                   doc.get("verify"), [list(h) for h in doc.get("history", [])],
                   {k: v for k, v in doc.items() if k not in _KNOWN})

    def to_json(self) -> dict[str, Any]:
        doc = {"format": FORMAT, "plan_id": self.plan_id, "kind": self.kind, "digest": self.digest,
               "state": self.state, "created_at": self.created_at, "updated_at": self.updated_at,
               "holder": self.holder, "options": self.options, "units": [u.to_json() for u in self.units],
               "revert": None if self.revert is None else self.revert.to_json(), "error": self.error,
               "progress": self.progress, "verify": self.verify, "history": self.history}
        doc.update(self.extra)
        return doc

    # ------------------------------------------------------------------------------------------ reads
    def unit_state(self, i: int) -> str:
        return self.units[i].state

    def in_flight(self) -> list[int]:
        return [i for i, u in enumerate(self.units) if u.in_flight]

    def completed(self) -> list[int]:
        return [i for i, u in enumerate(self.units) if u.state == COMPLETED]

    # ------------------------------------------------------------------------------------ transitions
    def event(self, text: str) -> None:
        self.history.append([now(), text])
        del self.history[:-HISTORY]

    def move_run(self, to: str, note: str | None = None) -> None:
        ensure(RUN_TRANSITIONS, f"run of plan {self.plan_id}", self.state, to)
        self.state = to
        if note:
            self.event(note)

    def move_unit(self, i: int, to: str, note: str | None = None) -> None:
        self._move(UNIT_TRANSITIONS, f"unit {i} of plan {self.plan_id}", self.units[i], to, note)

    def begin_revert(self, unit: int) -> None:
        """A revert of `unit` starts (pending); the run is reverting."""
        if self.state != REVERTING:
            self.move_run(REVERTING)
        self.revert = RevertRecord(unit)

    def move_revert(self, to: str, note: str | None = None) -> None:
        rev = self.revert
        if rev is None:
            raise IllegalTransition(f"run of plan {self.plan_id}: no revert recorded to move to {to}")
        self._move(REVERT_TRANSITIONS, f"revert of unit {rev.unit} of plan {self.plan_id}", rev, to, note)

    def _move(self, table: dict[str, frozenset[str]], what: str, rec: UnitRecord | RevertRecord, to: str,
              note: str | None) -> None:
        """A unit's or the revert's legal move, stamping when it was submitted or completed."""
        ensure(table, what, rec.state, to)
        rec.state = to
        if to == SUBMITTED:
            rec.submitted_at = now()
        elif to == COMPLETED:
            rec.completed_at = now()
        if note:
            self.event(note)
