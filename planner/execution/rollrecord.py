"""The restart roll's record: `/kplan/rolls/<plan hex>` (JSON `kplan-roll/1`), its phases and states, the
legal moves between them in one table each (as the run record's, runrecord.py), and the roll's options and
outcome types. `status` reads it without the lock.

Phases run in order: protect -> steps -> undo -> leaders -> done. A broker's step moves
pending -> demoting -> [electing] -> demoted -> restarting -> back -> restoring -> [restore-electing] -> done.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from planner import codec
from planner.execution.clusterview import retrying
from planner.execution.runrecord import ensure
from planner.zkgate import NAMESPACE

FORMAT = "kplan-roll/1"
ROLLS = f"{NAMESPACE}/rolls"
PROTECT, STEPS, UNDO, LEADERS, DONE = "protect", "steps", "undo", "leaders", "done"
RUNNING, PAUSED, FAILED, COMPLETED, STOPPED = "running", "paused", "failed", "completed", "stopped"
ELECTION_CHUNK = 10_000   # partitions per preferred-election znode (well under ZooKeeper's 1 MiB request)
UNDO_CHUNK = 5_000        # partitions per undo batch
RECORDS = ("progress.json", "outcome.json")
STEP_PENDING, DEMOTING, ELECTING, DEMOTED = "pending", "demoting", "electing", "demoted"
RESTARTING, BACK, RESTORING, RESTORE_ELECTING, STEP_DONE = "restarting", "back", "restoring", "restore-electing", "done"

PHASE_ORDER = (PROTECT, STEPS, UNDO, LEADERS, DONE)
STEP_TRANSITIONS: dict[str, frozenset[str]] = {
    STEP_PENDING: frozenset({DEMOTING}),
    DEMOTING: frozenset({ELECTING, DEMOTED}),
    ELECTING: frozenset({ELECTING, DEMOTED}),          # one election per chunk of partitions
    DEMOTED: frozenset({RESTARTING}),
    RESTARTING: frozenset({BACK}),
    BACK: frozenset({RESTORING}),
    RESTORING: frozenset({RESTORE_ELECTING, STEP_DONE}),
    RESTORE_ELECTING: frozenset({RESTORE_ELECTING, STEP_DONE}),
    STEP_DONE: frozenset(),
}
ROLL_TRANSITIONS: dict[str, frozenset[str]] = {
    RUNNING: frozenset({RUNNING, PAUSED, FAILED, STOPPED, COMPLETED}),
    PAUSED: frozenset({RUNNING, PAUSED, FAILED, STOPPED}),   # a person's say between brokers
    FAILED: frozenset({RUNNING, PAUSED, FAILED, STOPPED}),
    STOPPED: frozenset({RUNNING, PAUSED, FAILED, STOPPED}),
    COMPLETED: frozenset(),
}


def move_step(step: dict[str, Any], to: str) -> None:
    """A broker's step to state `to` (raises IllegalTransition, changing nothing, unless the table allows it)."""
    ensure(STEP_TRANSITIONS, f"roll step of broker {step.get('broker')}", step["state"], to)
    step["state"] = to


def move_state(rec: dict[str, Any], to: str) -> None:
    ensure(ROLL_TRANSITIONS, f"roll of plan {rec.get('plan_id')}", rec.get("state", RUNNING), to)
    rec["state"] = to


def move_phase(rec: dict[str, Any], to: str) -> None:
    """The next phase, never back and never one skipped."""
    frm = rec["phase"]
    i = PHASE_ORDER.index(frm)
    ensure({frm: frozenset(PHASE_ORDER[i + 1: i + 2])}, f"roll of plan {rec.get('plan_id')} (phase)", frm, to)
    rec["phase"] = to


class StopRequested(Exception):
    """A stop request (Ctrl-C, SIGTERM) honoured where nothing of the roll is in flight; the text says where."""


class Waiting(Exception):
    """A step whose broker has not restarted yet, with the roll not waiting for it (a deferring task)."""

    def __init__(self, broker: int, czxid: int | None):
        super().__init__(broker)
        self.broker, self.czxid = broker, czxid


def roll_path(plan_hex: str) -> str:
    return f"{ROLLS}/{plan_hex}"


@dataclass
class RollOptions:
    throttle: int | None = None         # bytes/s of the protecting batches (None: the plan's suggestion)
    poll: float = 1.0
    restart_timeout: float = 900.0      # how long a broker may take to leave and register again
    gate_timeout: float = 900.0         # how long its partitions may take to rejoin the ISRs (each gate)
    election_timeout: float = 120.0
    lock_wait: float = 0.0
    keep_temporary: bool = False        # after the last broker, keep the temporary replicas (no undo)
    pause: bool = False                 # stop after each broker (state paused); running again continues
    restart: Callable[[int], None] | None = None   # restarts a broker; None: someone else does
    wait_restart: bool = True           # False: return state `restarting` instead of waiting (a deferring task)
    progress_file: Path | None = None
    run: str | None = None              # named in the brokers' maintenance state (the records folder, a DAG run)
    reason: str = ""                    # why the brokers restart (an OS patch, a ticket): in their maintenance state
    stop: threading.Event | None = None  # set from outside (Ctrl-C / SIGTERM): stop after the broker in flight


@dataclass
class RollResult:
    plan_id: str
    state: str                 # completed | already-completed | paused | interrupted (a stop request honoured)
    message: str
    steps_done: int = 0
    steps_total: int = 0
    resumed: bool = False
    kept_temporary: bool = False
    cannot_move: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    broker: int | None = None  # state restarting: the broker the roll waits for, and its registration before
    czxid: int | None = None


@dataclass(frozen=True)
class RollProgress:
    step: str
    message: str
    done: int
    total: int
    phase: str = ""
    broker: int | None = None
    state: str = ""
    at: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"step": self.step, "message": self.message, "done": self.done, "total": self.total,
                "phase": self.phase, "broker": self.broker, "state": self.state, "at": self.at}


def status(client: KazooClient, plan: Any) -> dict[str, Any]:
    """The roll as recorded (read-only, no lock), with each roll broker's registration now: for a scheduler
    that waits for a broker to restart, or for a step's turn."""
    hexid = plan.id.split(":", 1)[-1]
    order = [int(b) for b in plan.section("roll").get("order", ())]
    try:
        data, _ = retrying(lambda: client.get(roll_path(hexid)))
        rec = json.loads(data)
    except NoNodeError:
        rec = None
    regs = {}
    for b in order:
        st = retrying(lambda b=b: client.exists(codec.broker_path(b)))
        regs[b] = st.czxid if st is not None else None
    steps = [{"broker": s["broker"], "state": s["state"], "czxid": s.get("czxid")} for s in (rec or {}).get("steps", ())]
    return {"plan_id": plan.id, "recorded": rec is not None, "state": (rec or {}).get("state"),
            "phase": (rec or {}).get("phase"), "error": (rec or {}).get("error"), "steps": steps,
            "registrations": regs}
