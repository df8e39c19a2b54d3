"""Per-broker maintenance state, kept in the cluster beside the apply lock (docs/DESIGN.md "Maintenance lifecycle").

One entry per broker in maintenance, the same JSON on both backends:

    {"format": "kplan-maintenance/1", "broker": 1, "state": "drained", "plan_id": "sha256:…",
     "run": "<run folder or DAG run>", "by": {"user", "host", "command", "pid"}, "since": "…Z", "reason": "…"}

No entry = the broker is in service. Every plan kind gives a broker in maintenance no replica and no preferred
leadership (the snapshot reads the entries; planning masks the brokers), except the plan that owns the state
(a follow-up drain of a drained broker; the return of a drained broker onto itself).

This module is the single source of the rules, for both backends: the states, the legal moves between them and
who may make them (`TRANSITIONS` and nothing else; Cruise Control's ExecutionTask.VALID_TRANSFER is the model:
`check` refuses anything else before a byte is written), the entry's encoding, and `transition`, which turns
a move into the entries to write (`Change`s). Where the entries live is a storage's business, and there are two
of the same shape (kafka-kit's narrow interface is the model):

| storage | where | written |
|---|---|---|
| planner.maintenance_zk (ZooKeeper mode) | znode `/kplan/maintenance/<id>` | through planner.zkgate.WriteGate only: ops for the caller's fenced multi-op |
| planner.maintenance_kraft (KRaft) | key `maintenance/<id>` of the compacted `__kplan` topic | records for one of planner.execution.kraftstore's fenced transactions |

Each exposes `read_all(handle) -> States` (no lock), `ops(states, changes)` (the writes of one transition, for
the caller's own fenced transaction: an apply writes them with its run record, a roll with its step),
`set_ops(states, brokers, actor, to, ...)` (`ops` of `transition`), `change(handle, ...)` (a transition as its
own fenced transaction), `clear(handle, brokers, expect=...)` (the operator's explicit clear, refusing a state
a live apply holds) and `statuses(handle)` (`kplan brokers`); `handle` is a KazooClient or a kraftstore.Store.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from planner import codec
from planner.errors import BadInput, NextStep, SafetyRefusal
from planner.execution import runstate

log = logging.getLogger(__name__)

FORMAT = "kplan-maintenance/1"

DRAINING, DRAINED, RESTARTING, RETURNING = "draining", "drained", "restarting", "returning"
UNKNOWN = "unknown"   # a stored entry that does not parse: treated as in maintenance until someone clears it
STATES = (DRAINING, DRAINED, RESTARTING, RETURNING)

# Who moves a broker between states.
DRAIN_APPLY = "drain-apply"        # an apply of a drain plan, when it starts (and when it resumes)
DRAIN_VERIFY = "drain-verify"      # verify of a drain plan, once the drain's intent holds
RETURN_APPLY = "return-apply"      # an apply of a return plan, when it starts
RETURN_VERIFY = "return-verify"    # verify of a return plan, once converged and leadership is restored
RESTART = "restart"                # the restart roll (kplan plan restart / DAG kafka_broker_restart)
OPERATOR = "operator"              # `kplan maintenance clear`: the explicit act

# actor -> {from state (None: in service) -> states it may go to (None: in service, the entry deleted)}
TRANSITIONS: Mapping[str, Mapping[str | None, frozenset[str | None]]] = {
    # a drain starts on a broker in service, resumes itself, or follows up an earlier drain (whatever
    # appeared on the broker since), or drains a broker whose return stopped half way
    DRAIN_APPLY: {None: frozenset({DRAINING}), DRAINING: frozenset({DRAINING}), DRAINED: frozenset({DRAINING}),
                  RETURNING: frozenset({DRAINING})},
    DRAIN_VERIFY: {DRAINING: frozenset({DRAINED})},
    RETURN_APPLY: {DRAINED: frozenset({RETURNING}), RETURNING: frozenset({RETURNING})},
    RETURN_VERIFY: {RETURNING: frozenset({None})},
    RESTART: {None: frozenset({RESTARTING}), RESTARTING: frozenset({RESTARTING, None})},
    OPERATOR: {s: frozenset({None}) for s in (*STATES, UNKNOWN)},
}
# (actor, from state): the move belongs to the plan that set the state (same plan_id), nobody else's
OWNED = frozenset({(DRAIN_VERIFY, DRAINING), (RETURN_VERIFY, RETURNING), (RESTART, RESTARTING),
                   (RETURN_APPLY, RETURNING)})


class MaintenanceConflict(SafetyRefusal):
    """A transition the table does not allow (or one that belongs to another plan): nothing was written."""


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass(frozen=True)
class Entry:
    """One broker's maintenance state. `version` is the znode's (for ZooKeeper's conditional writes), -1 when
    not read from ZooKeeper (KRaft, whose fence is the transactional producer's epoch; a snapshot's manifest)."""

    broker: int
    state: str
    plan_id: str | None = None
    run: str | None = None
    by: Mapping[str, Any] = field(default_factory=dict)
    since: str | None = None
    reason: str = ""
    version: int = -1

    @property
    def who(self) -> str:
        b = self.by or {}
        user, host, cmd = b.get("user"), b.get("host"), b.get("command")
        who = f"{user or '?'}@{host or '?'}" if (user or host) else "unknown"
        return who + (f" ({cmd})" if cmd else "")

    def as_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "broker": self.broker, "state": self.state, "plan_id": self.plan_id,
                "run": self.run, "by": dict(self.by or {}), "since": self.since, "reason": self.reason}

    def describe(self) -> str:
        """'broker 1 drained since 2026-11-25T10:00:00Z by alice@host (kplan apply): drain of … (plan sha256:…)'"""
        plan = f", plan {self.plan_id[:19]}…" if self.plan_id else ""
        why = f": {self.reason}" if self.reason else ""
        return f"broker {self.broker} {self.state} since {self.since or '?'} by {self.who}{plan}{why}"


@dataclass(frozen=True)
class States:
    """Every broker's entry (brokers in service have none) and, on ZooKeeper, whether the parent znodes exist."""

    entries: Mapping[int, Entry]
    root_exists: bool = False
    namespace_exists: bool = False

    def get(self, broker: int) -> Entry | None:
        return self.entries.get(int(broker))

    def brokers(self) -> list[int]:
        return sorted(self.entries)


# ------------------------------------------------------------------------------------------ encoding
def encode(e: Entry) -> bytes:
    return codec.dumps(e.as_dict())


def broker_id(name: str) -> int | None:
    """The broker id a storage's name for an entry ends in (`1` of `/kplan/maintenance/1` or `maintenance/1`)."""
    if not (name.isascii() and name.isdigit()) or int(name) >= 2**31:
        return None
    return int(name)


def decode(name: str, data: bytes | str | None, version: int = -1, where: str | None = None) -> Entry | None:
    """The entry stored under `name` (a broker id) as bytes; None when `name` is not one. `where` names the place
    in the error (the znode, the `__kplan` key). A stored entry that is not valid is not ignored: it comes back
    as state `unknown` (in maintenance until cleared), saying why, on either backend."""
    broker = broker_id(name)
    if broker is None:
        return None
    try:
        doc = json.loads(data or b"")
    except ValueError as e:
        return _unknown(broker, where, e, version)
    return from_doc(broker, doc, version, where)


def from_doc(broker: int, doc: Any, version: int = -1, where: str | None = None) -> Entry:
    """The entry of `broker` from its parsed JSON (`unknown`, saying why, when it is not a valid entry)."""
    try:
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        if doc.get("format") != FORMAT:
            raise ValueError(f"format {doc.get('format')!r}, expected {FORMAT!r}")
        state = doc.get("state")
        if state not in STATES:
            raise ValueError(f"state {state!r} is not one of {', '.join(STATES)}")
        if doc.get("broker") != broker:
            raise ValueError(f"broker {doc.get('broker')!r} does not match its name")
    except ValueError as e:
        return _unknown(broker, where, e, version)
    by = doc.get("by") if isinstance(doc.get("by"), dict) else {}
    return Entry(broker, state, _str(doc.get("plan_id")), _str(doc.get("run")), by, _str(doc.get("since")),
                 str(doc.get("reason") or ""), version)


def _unknown(broker: int, where: str | None, error: ValueError, version: int) -> Entry:
    where = where or f"broker {broker}'s maintenance entry"
    return Entry(broker, UNKNOWN, reason=f"{where} is not a valid maintenance entry ({error}); clearing broker "
                                         f"{broker}'s maintenance state removes it", version=version)


def _str(v: Any) -> str | None:
    return None if v is None else str(v)


def from_manifest(section: Any) -> dict[int, Entry]:
    """The entries a snapshot recorded (manifest "maintenance": a list of entry objects); {} when absent
    (snapshots taken before the section existed)."""
    out: dict[int, Entry] = {}
    for doc in section or ():
        if not isinstance(doc, dict) or type(doc.get("broker")) is not int or doc.get("state") not in (*STATES, UNKNOWN):
            raise BadInput(f"the snapshot's maintenance section holds {str(doc)[:80]!r}, not a broker's state")
        by = doc.get("by") if isinstance(doc.get("by"), dict) else {}
        out[doc["broker"]] = Entry(doc["broker"], doc["state"], _str(doc.get("plan_id")), _str(doc.get("run")), by,
                                   _str(doc.get("since")), str(doc.get("reason") or ""))
    return out


def manifest_section(entries: Mapping[int, Entry]) -> list[dict[str, Any]]:
    """What a snapshot's manifest records (docs/SNAPSHOT.md): one object per broker in maintenance."""
    return [{k: v for k, v in entries[b].as_dict().items() if k != "format"} for b in sorted(entries)]


# ------------------------------------------------------------------------------------------ transitions
def check(current: Entry | None, actor: str, to: str | None, plan_id: str | None = None) -> None:
    """Raise MaintenanceConflict unless `actor` may move a broker from `current` to `to` (TRANSITIONS)."""
    if actor not in TRANSITIONS:
        raise ValueError(f"unknown maintenance actor {actor!r}")
    frm = None if current is None else current.state
    allowed = TRANSITIONS[actor].get(frm, frozenset())
    if to not in allowed:
        broker = "a broker" if current is None else f"broker {current.broker}"
        now = "in service" if current is None else current.describe()
        want = "in service" if to is None else to
        raise MaintenanceConflict(f"{actor} may not move {broker} to {want}: it is {now}. "
                                  + _advice(current, actor) + "; nothing was written",
                                  next_steps=() if current is None else
                                  (NextStep("maintenance clear", "clears it", (current.broker,)),))
    if current is not None and (actor, frm) in OWNED and current.plan_id != plan_id:
        raise MaintenanceConflict(f"{actor} of plan {plan_id} may not change broker {current.broker}'s state: "
                                  f"{current.describe()} belongs to another plan; nothing was written")


def _advice(current: Entry | None, actor: str) -> str:
    if current is None:
        return "only a plan that put it into maintenance can take it on from here"
    return {RESTARTING: "wait for its restart roll to finish, or clear its maintenance state if the roll was "
                        "abandoned",
            DRAINING: "verify its drain first, or clear its maintenance state",
            UNKNOWN: "clear its maintenance state first"}.get(
        current.state, "clear its maintenance state first if it is back in service")


@dataclass(frozen=True)
class Change:
    """One broker's entry before and after a transition (`after` None: back in service, the entry deleted)."""

    broker: int
    before: Entry | None
    after: Entry | None


def transition(states: States, brokers: Iterable[int], actor: str, to: str | None, *, plan_id: str | None,
               run: str | None = None, reason: str = "", by: Mapping[str, Any] | None = None) -> list[Change]:
    """The entries that move `brokers` to `to` (None: clear), every move checked against the table first (one
    refused: MaintenanceConflict, nothing to write). A broker already in `to` for the same plan is left as it
    is (its `since` stays); when the same plan moves it on (draining -> drained), its run, who and why stay.
    A storage's `ops` turns the changes into its writes, for one fenced transaction."""
    out: list[Change] = []
    ids = sorted({int(x) for x in brokers})
    for b in ids:
        check(states.get(b), actor, to, plan_id)
    for b in ids:
        cur = states.get(b)
        if to is None:
            if cur is not None:
                out.append(Change(b, cur, None))
            continue
        if cur is not None and cur.state == to and cur.plan_id == plan_id:
            continue
        if cur is not None and cur.plan_id == plan_id and plan_id:   # the same plan moves on: who and why stay
            entry = Entry(b, to, plan_id, run or cur.run, dict(cur.by or by or {}), now_iso(), reason or cur.reason)
        else:
            entry = Entry(b, to, plan_id, run, dict(by or {}), now_iso(), reason)
        out.append(Change(b, cur, entry))
    return out


def identity(command: str) -> dict[str, Any]:
    """Who is acting (user, host, command, pid), as recorded in `by`."""
    i = runstate.identity(command, "")
    return {"user": i["user"], "host": i["host"], "command": f"kplan {command}", "pid": i["pid"]}


# ------------------------------------------------------------------------------------------ either storage's own transactions
@dataclass(frozen=True)
class Changed:
    broker: int
    before: Entry | None
    after: str | None


def report(ids: Iterable[int], states: States, actor: str, to: str | None) -> list[Changed]:
    """What a storage's own transaction did to each broker asked for (logged: library code logs, the CLI
    presents)."""
    out = [Changed(b, states.get(b), to) for b in sorted({int(i) for i in ids})]
    for c in out:
        log.info("maintenance: broker %d %s -> %s (%s)", c.broker, c.before.state if c.before else "in service",
                 to or "in service", actor)
    return out


def clear_args(brokers: Iterable[int], expect: str | None) -> list[int]:
    """The operator's clear, its arguments checked before any connection: the broker ids, sorted."""
    ids = sorted({int(b) for b in brokers})
    if not ids:
        raise BadInput("name the brokers whose maintenance state to clear")
    if expect is not None and expect not in (*STATES, UNKNOWN):
        raise BadInput(f"state {expect!r} is not one of {', '.join((*STATES, UNKNOWN))}")
    return ids


def check_clear(states: States, ids: list[int], expect: str | None, registered: Iterable[int],
                held_by: Callable[[Entry], str | None]) -> None:
    """The operator's clear, refused before anything is written: each broker must be in maintenance (in `expect`
    when given), and no running apply may hold its state (`held_by` names it: the backend's lock)."""
    known = set(registered)
    in_maint = ", ".join(f"{b} {e.state}" for b, e in sorted(states.entries.items())) or "none"
    for b in ids:
        e = states.get(b)
        if e is None:
            what = "is not in maintenance" if b in known else "is not a registered broker and has no " \
                                                              "maintenance state"
            raise BadInput(f"broker {b} {what}: nothing to clear (brokers in maintenance: {in_maint}); nothing "
                           "was written")
        if expect is not None and e.state != expect:
            raise BadInput(f"broker {b} is {e.state}, not {expect}: nothing was cleared ({e.describe()})")
        who = held_by(e)
        if who:
            raise SafetyRefusal(f"broker {b} is {e.state} for {who}, which is running: stop it first; nothing was "
                                "cleared", next_steps=(NextStep("cancel", "stops it"),))


# ------------------------------------------------------------------------------------------ the brokers' view
@dataclass(frozen=True)
class BrokerStatus:
    """One row of `kplan brokers`: a broker that is registered or in maintenance (or named by the snapshot)."""

    broker: int
    rack: str | None
    registered: bool
    entry: Entry | None

    @property
    def state(self) -> str:
        return self.entry.state if self.entry else "in service"


def statuses_of(racks: Mapping[int, str | None], entries: Mapping[int, Entry]) -> list[BrokerStatus]:
    """The rows of `kplan brokers`: registered brokers (`racks`) and brokers in maintenance."""
    return [BrokerStatus(b, racks.get(b), b in racks, entries.get(b)) for b in sorted(set(racks) | set(entries))]


def statuses_in_snapshot(brokers: Any, manifest: Mapping[str, Any]) -> list[BrokerStatus]:
    """The same rows as the snapshot recorded them (`brokers`: its brokers table)."""
    entries = from_manifest(manifest.get("maintenance"))
    cols = brokers.select(["broker", "alive", "rack"]).to_pydict()
    known = {int(b): (a, r) for b, a, r in zip(cols["broker"], cols["alive"], cols["rack"], strict=True)}
    return [BrokerStatus(b, known.get(b, (False, None))[1], bool(known.get(b, (False, None))[0]), entries.get(b))
            for b in sorted(set(known) | set(entries))]
