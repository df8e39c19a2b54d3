"""The run record: explicit per-unit states persisted in the planner's namespace (Cruise Control's
ExecutionTask is the model: PENDING -> IN_PROGRESS -> COMPLETED, with ABORTING -> ABORTED for a revert).

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
from planner.zkgate import NAMESPACE, Op, WriteGate

FORMAT = "kplan-run/1"
LOCK_PATH = f"{NAMESPACE}/lock"
RUNS = f"{NAMESPACE}/runs"

PENDING, SUBMITTED, ELECTING, COMPLETED = "pending", "submitted", "electing", "completed"
RUNNING, DONE, FAILED = "running", "completed", "failed"
CANCELLING, CANCELLED, REVERTING, REVERTED = "cancelling", "cancelled", "reverting", "reverted"
TERMINAL = (DONE, CANCELLED, REVERTED)
HISTORY = 50


def run_path(plan_hex: str) -> str:
    return f"{RUNS}/{plan_hex}"


def throttles_path(plan_hex: str) -> str:
    return f"{RUNS}/{plan_hex}/throttles"


def cancel_path(plan_hex: str) -> str:
    return f"{RUNS}/{plan_hex}/cancel"


def now() -> float:
    return round(time.time(), 3)


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
    """The record of one plan's run on this cluster and the znode version it was read at."""

    path: str
    doc: dict[str, Any]
    version: int = -1  # -1: not created yet

    @property
    def state(self) -> str:
        return self.doc["state"]

    def unit_state(self, i: int) -> str:
        return self.doc["units"][i][0]

    def set_unit(self, i: int, state: str) -> None:
        u = self.doc["units"][i]
        u[0] = state
        if state == SUBMITTED:
            u[1] = now()
        elif state == COMPLETED:
            u[2] = now()

    def event(self, text: str) -> None:
        hist = self.doc.setdefault("history", [])
        hist.append([now(), text])
        del hist[:-HISTORY]

    def encode(self) -> bytes:
        self.doc["updated_at"] = now()
        return codec.dumps(self.doc)

    def in_flight(self) -> list[int]:
        return [i for i, u in enumerate(self.doc["units"]) if u[0] in (SUBMITTED, ELECTING)]


def new_run(plan_id: str, kind: str, digest: str, units: int, holder: dict[str, Any],
            options: dict[str, Any]) -> dict[str, Any]:
    t = now()
    return {"format": FORMAT, "plan_id": plan_id, "kind": kind, "digest": digest, "state": RUNNING,
            "created_at": t, "updated_at": t, "holder": holder, "options": options,
            "units": [[PENDING, None, None] for _ in range(units)], "revert": None, "error": None,
            "progress": None, "verify": None, "history": [[t, "created"]]}


def load(client: KazooClient, plan_hex: str, gate: WriteGate | None = None) -> Run | None:
    path = run_path(plan_hex)
    if gate is not None:
        seen, data = gate.overlay(path)
        if seen:
            return Run(path, json.loads(data), 0) if data is not None else None
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
    return Run(path, doc, stat.version)


def save(gate: WriteGate, run: Run, extra: list[Op] | None = None, fenced: bool = True) -> list[Any]:
    """Write the record (created on first save) together with `extra` ops in one transaction."""
    data = run.encode()
    if run.version < 0:
        ops = [Op("create", p) for p in _parents(gate, run.path)] + [Op("create", run.path, data)]
    else:
        ops = [Op("set", run.path, data, run.version)]
    results = gate.commit(ops + list(extra or ()), fenced=fenced)
    if gate.dry_run:
        run.version = 0 if run.version < 0 else run.version + 1
    else:
        res = results[len(ops) - 1]
        run.version = 0 if run.version < 0 else res.version
    return results


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
