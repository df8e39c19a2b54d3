"""The run record on ZooKeeper: where it lives, how it is read, and RunManager, the only code that changes a run's
state (Cruise Control's ExecutionTask / ExecutionTaskManager are the model: PENDING -> IN_PROGRESS -> COMPLETED,
with ABORTING -> ABORTED for a revert). The record's types and its table of legal transitions are runrecord.py
(backend-neutral: a KRaft backend keeps the same record elsewhere).

Layout inside the cluster's chroot:
    /kplan/lock                      kazoo Lock recipe: one writer (apply, cancel, verify's writes) at a time
    /kplan/runs/<plan hex>           this record (JSON, below)
    /kplan/runs/<plan hex>/throttles the throttles this run set and what it must restore (throttles.py)
    /kplan/runs/<plan hex>/cancel    a cancel request ({"mode": "after-batch"|"revert", ...})

Unit states: "pending" -> "submitted" (its reassignment znode was created, in the same transaction that
recorded this state, so a unit is submitted exactly once) -> ["electing" (leadership units: the preferred
election znode was created, same transaction)] -> "completed". Run states: "running", "completed",
"failed" (stopped by an error; a re-run resumes), "cancelling", "cancelled", "reverting", "reverted".
Every update is a conditional set on the znode's version, inside a transaction fenced by the lock.
Another process (the Airflow UI) reads progress from here without taking the lock.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from planner import codec
from planner.errors import CodecError
from planner.execution.runrecord import (  # noqa: F401 - the states, re-exported for the modules that read them
    CANCELLED,
    CANCELLING,
    COMPLETED,
    DONE,
    ELECTING,
    FAILED,
    FORMAT,
    HISTORY,
    PENDING,
    REVERTED,
    REVERTING,
    RUNNING,
    SUBMITTED,
    TERMINAL,
    IllegalTransition,
    RunRecord,
    now,
)
from planner.zkgate import NAMESPACE, Op, WriteGate

LOCK_PATH = f"{NAMESPACE}/lock"
RUNS = f"{NAMESPACE}/runs"


def run_path(plan_hex: str) -> str:
    return f"{RUNS}/{plan_hex}"


def throttles_path(plan_hex: str) -> str:
    return f"{RUNS}/{plan_hex}/throttles"


def cancel_path(plan_hex: str) -> str:
    return f"{RUNS}/{plan_hex}/cancel"


def identity(command: str, plan_id: str) -> dict[str, Any]:
    """Who holds the lock or runs the apply: named in refusals, so an operator can find the process."""
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry in some containers
        user = str(os.getuid())
    return {"command": command, "host": socket.gethostname(), "pid": os.getpid(), "user": user,
            "plan_id": plan_id, "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def describe_holder(raw: str | bytes | None) -> str:
    if raw is None:
        return "an unknown holder"
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    try:
        h = json.loads(text)
        return (f"kplan {h.get('command', '?')} of plan {h.get('plan_id', '?')} (pid {h.get('pid')} on "
                f"{h.get('host')}, user {h.get('user')}, since {h.get('since')})")
    except (ValueError, AttributeError):
        return repr(text[:200])


@dataclass
class Run:
    """A run record (runrecord.RunRecord) and the znode version it was read at. Read-only here: its state
    changes only through RunManager."""

    path: str
    record: RunRecord
    version: int = -1  # -1: not created yet

    @property
    def state(self) -> str:
        return self.record.state

    def unit_state(self, i: int) -> str:
        return self.record.unit_state(i)

    def in_flight(self) -> list[int]:
        return self.record.in_flight()

    def encode(self) -> bytes:
        self.record.updated_at = now()
        return codec.dumps(self.record.to_json())


def load(client: KazooClient, plan_hex: str, gate: WriteGate | None = None) -> Run | None:
    path = run_path(plan_hex)
    if gate is not None:
        seen, data = gate.overlay(path)
        if seen:
            return Run(path, RunRecord.from_json(json.loads(data)), 0) if data is not None else None
    try:
        data, stat = client.get(path)
    except NoNodeError:
        return None
    try:
        doc = json.loads(data)
    except ValueError:
        raise CodecError(path, "the run record is not valid JSON") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CodecError(path, f"not a {FORMAT} run record")
    return Run(path, RunRecord.from_json(doc), stat.version)


def record_ops(gate: WriteGate, run: Run) -> list[Op]:
    """The writes that store `run` as it is now: created (with its namespace parents) the first time, else a
    conditional set on the version it was read at."""
    data = run.encode()
    if run.version < 0:
        return [Op("create", p) for p in _parents(gate, run.path)] + [Op("create", run.path, data)]
    return [Op("set", run.path, data, run.version)]


class RunManager:
    """The only code that changes a run's state (Cruise Control's ExecutionTaskManager). Each transition checks the
    table (runrecord.RUN_TRANSITIONS / UNIT_TRANSITIONS: an illegal one raises before anything changes), changes
    the record in memory and returns the operations of ONE WriteGate transaction: the record's conditional write
    plus the cluster writes that must happen with it (a reassignment created with the state `submitted`, an
    election with `electing`), so the state and the act are recorded together or not at all. `send` sends
    them through the gate. A transition whose ops are not committed is carried by the next one's (the record is written whole)."""

    def __init__(self, gate: WriteGate, run: Run | None = None):
        self.gate = gate
        self.run = run

    @property
    def record(self) -> RunRecord:
        if self.run is None:
            raise IllegalTransition("no run record loaded")
        return self.run.record

    def ops(self, extra: list[Op] | None = None) -> list[Op]:
        return record_ops(self.gate, self.run) + list(extra or ())  # type: ignore[arg-type]

    def send(self, ops: list[Op], fenced: bool = True) -> list[Any]:
        """Send one transaction (ops from a transition); the record's version follows it."""
        run = self.run
        assert run is not None
        at = next(i for i, op in enumerate(ops) if op.path == run.path and op.kind in ("create", "set"))
        results = self.gate.commit(ops, fenced=fenced)
        if run.version < 0:
            run.version = 0
        elif self.gate.dry_run:
            run.version += 1
        else:
            run.version = results[at].version
        return results

    def checkpoint(self) -> RunRecord:
        """A copy of the record as it is now (restore() puts it back when a transaction was refused)."""
        return RunRecord.from_json(self.record.to_json())   # from_json copies what transitions change in place

    def restore(self, record: RunRecord) -> None:
        assert self.run is not None
        self.run.record = record

    # ----------------------------------------------------------------------------------- transitions
    def start(self, path: str, new: RunRecord | None, holder: dict[str, Any], command: str,
              maintenance: list[Op]) -> list[Op]:
        """A first apply (`new`, stored at `path`) or a resume of the run loaded: who runs it, the error cleared,
        a failed run running again."""
        if new is not None:
            self.run = Run(path, new)
        else:
            rec = self.record
            rec.holder = holder
            rec.error = None
            if rec.state == FAILED:
                rec.move_run(RUNNING)
            rec.event(f"resumed by {command} (pid {holder['pid']})")
        if maintenance:   # the brokers' maintenance state, in the same transaction as the record
            self.record.event("maintenance: " + ", ".join(f"{op.kind} {op.path}" for op in maintenance))
        return self.ops(maintenance)

    def submit(self, i: int, label: str, partitions: int, reassignment: bytes,
               extra: list[Op] | None = None) -> list[Op]:
        """pending -> submitted, with /admin/reassign_partitions created in the same transaction: exactly once."""
        self.record.move_unit(i, SUBMITTED, f"{label} submitted ({partitions} partitions)")
        return self.ops(list(extra or ()) + [Op("create", codec.REASSIGN, reassignment)])

    def elect(self, i: int, label: str, keys: list[tuple[str, int]]) -> list[Op]:
        """submitted -> electing, with /admin/preferred_replica_election created in the same transaction."""
        self.record.move_unit(i, ELECTING, f"{label}: preferred election for {len(keys)} partitions")
        return self.ops([Op("create", codec.PREFERRED_ELECTION, codec.encode_preferred_election(keys))])

    def complete(self, i: int, label: str) -> list[Op]:
        self.record.move_unit(i, COMPLETED, f"{label} completed")
        return self.ops()

    def finish(self, intent: dict[str, Any] | None) -> list[Op]:
        rec = self.record
        rec.move_run(DONE, "completed")
        if intent is not None:
            rec.extra["intent"] = {"holds": intent["holds"], "remaining_count": intent["remaining_count"],
                                   "leading_count": intent["leading_count"]}
        return self.ops()

    def stop(self, error: str, note: str) -> list[Op]:
        """Stopped (an error, an interrupt, a stop request): a running run is failed (a re-run resumes it); a
        cancelling or reverting one keeps its state. The error is recorded either way."""
        rec = self.record
        if rec.state == RUNNING:
            rec.move_run(FAILED)
        rec.error = error[:2000]
        rec.event(note)
        return self.ops()

    def cancelling(self, mode: str) -> list[Op]:
        self.record.move_run(CANCELLING, f"cancel requested ({mode})")
        return self.ops()

    def end(self, state: str, request: dict[str, Any], mode: str) -> list[Op]:
        """cancelled or reverted: the cancel request that ended it is kept in the record."""
        rec = self.record
        rec.move_run(state)
        rec.extra["cancel"] = {k: v for k, v in request.items() if not k.startswith("_")}
        rec.event(f"{state} ({mode})")
        return self.ops()

    def begin_revert(self, i: int) -> list[Op]:
        self.record.begin_revert(i)
        return self.ops()

    def submit_revert(self, label: str, partitions: int, reassignment: bytes, extra: list[Op] | None = None
                      ) -> list[Op]:
        self.record.move_revert(SUBMITTED, f"{label} submitted ({partitions} partitions)")
        return self.ops(list(extra or ()) + [Op("create", codec.REASSIGN, reassignment)])

    def complete_revert(self, label: str) -> list[Op]:
        self.record.move_revert(COMPLETED, f"{label} reverted")
        return self.ops()

    def note_progress(self, progress: dict[str, Any]) -> None:
        """Not a state: kept in memory, written with the next transaction (`ops()` writes it now)."""
        self.record.progress = progress

    def note_verify(self, verify: dict[str, Any]) -> list[Op]:
        self.record.verify = verify
        return self.ops()


def _parents(gate: WriteGate, path: str) -> list[str]:
    """Namespace parents of `path` that do not exist yet (created in the same transaction)."""
    parts = path.strip("/").split("/")
    missing = []
    for i in range(1, len(parts)):
        p = "/" + "/".join(parts[:i])
        seen, data = gate.overlay(p)
        if seen and data is not None:
            continue
        if gate.client.exists(p) is None:
            missing.append(p)
    return missing


def read_cancel(client: KazooClient, plan_hex: str, watch: Any = None) -> dict[str, Any] | None:
    """The cancel request, if any. With `watch`, a one-shot watch fires when it is created, changed or deleted
    (exists() sets it whether or not the znode is there; getData would not on a missing znode)."""
    try:
        if watch is not None and client.exists(cancel_path(plan_hex), watch=watch) is None:
            return None
        data, _ = client.get(cancel_path(plan_hex))
    except NoNodeError:
        return None
    try:
        doc = json.loads(data)
        return doc if isinstance(doc, dict) else {"mode": "after-batch"}
    except ValueError:
        return {"mode": "after-batch"}
