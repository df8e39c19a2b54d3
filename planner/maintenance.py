"""Per-broker maintenance state, kept in the cluster beside the apply lock (docs/DESIGN.md "Maintenance lifecycle").

    /kplan/maintenance/<broker id>   {"format": "kplan-maintenance/1", "broker": 1, "state": "drained",
                                      "plan_id": "sha256:…", "run": "<run folder or DAG run>",
                                      "by": {"user", "host", "command", "pid"}, "since": "…Z", "reason": "…"}

No znode = the broker is in service. Every plan kind gives a broker in maintenance no replica and no preferred
leadership (the snapshot reads these znodes; planning masks the brokers), except the plan that owns the state
(a follow-up drain of a drained broker; the return of a drained broker onto itself).

Written only through the write gate (planner/zkgate.py): by an apply inside its own fenced transactions (the
run record and the state in one transaction), by verify under the lock, and by `change` / `clear` below as one
small transaction under the apply lock of their own. Read by anyone without the lock (`read_all`).

The legal moves between states, and who may make them, are the table `TRANSITIONS` and nothing else (Cruise
Control's ExecutionTask.VALID_TRANSFER is the model): `check` refuses anything else before a byte is written.

API (small on purpose):
    read_all(client) -> States                      every entry, with znode versions, no lock
    set_ops(states, brokers, actor, to, ...) -> ops  the writes of one transition, for the caller's transaction
    change(client, brokers, actor, to, ...)          a transition as its own locked transaction (e.g. restart)
    clear(client, brokers, expect=...)               the operator's explicit clear (refuses a state a running
                                                     apply holds)
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from planner import codec
from planner import zk as zkmod
from planner.errors import BadInput, NextStep, SafetyRefusal
from planner.execution import runstate
from planner.execution.lock import ApplyLock, holder
from planner.execution.runstate import LOCK_PATH, describe_holder
from planner.zkgate import NAMESPACE, Op, WriteGate

log = logging.getLogger(__name__)

FORMAT = "kplan-maintenance/1"
ROOT = f"{NAMESPACE}/maintenance"

DRAINING, DRAINED, RESTARTING, RETURNING = "draining", "drained", "restarting", "returning"
UNKNOWN = "unknown"   # a znode that is not a valid entry: treated as in maintenance until someone clears it
STATES = (DRAINING, DRAINED, RESTARTING, RETURNING)

# Who moves a broker between states.
DRAIN_APPLY = "drain-apply"        # an apply of a drain plan, when it starts (and when it resumes)
DRAIN_VERIFY = "drain-verify"      # verify of a drain plan, once the drain's intent holds
RETURN_APPLY = "return-apply"      # an apply of a return plan, when it starts
RETURN_VERIFY = "return-verify"    # verify of a return plan, once converged and leadership is restored
RESTART = "restart"                # the restart roll (kplan plan restart / DAG kafka_broker_restart)
OPERATOR = "operator"              # `kplan maintenance clear`: the explicit act

# actor -> {from state (None: in service) -> states it may go to (None: in service, the znode deleted)}
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


def path(broker: int) -> str:
    return f"{ROOT}/{int(broker)}"


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass(frozen=True)
class Entry:
    """One broker's maintenance state. `version` is the znode's (for conditional writes), -1 when not read
    from ZooKeeper (a snapshot's manifest)."""

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
    """Every broker's entry (brokers in service have none) and whether the parents exist."""

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


def decode(name: str, data: bytes | None, version: int = -1) -> Entry | None:
    """The entry in znode `ROOT/<name>`; None when `name` is not a broker id. A znode that is not a valid
    entry is not ignored: it comes back as state `unknown` (in maintenance until cleared), saying why."""
    if not (name.isascii() and name.isdigit()) or int(name) >= 2**31:
        return None
    broker = int(name)
    try:
        doc = json.loads(data or b"")
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        if doc.get("format") != FORMAT:
            raise ValueError(f"format {doc.get('format')!r}, expected {FORMAT!r}")
        state = doc.get("state")
        if state not in STATES:
            raise ValueError(f"state {state!r} is not one of {', '.join(STATES)}")
        if doc.get("broker") != broker:
            raise ValueError(f"broker {doc.get('broker')!r} does not match the znode's name")
        by = doc.get("by") if isinstance(doc.get("by"), dict) else {}
        return Entry(broker, state, _str(doc.get("plan_id")), _str(doc.get("run")), by, _str(doc.get("since")),
                     str(doc.get("reason") or ""), version)
    except ValueError as e:
        return Entry(broker, UNKNOWN, reason=f"{path(broker)} is not a valid maintenance entry ({e}); clearing broker "
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


# ------------------------------------------------------------------------------------------ reading
def read_all(client: KazooClient) -> States:
    """Every broker's maintenance state, read without the lock."""
    namespace = client.exists(NAMESPACE) is not None
    try:
        names = client.get_children(ROOT)
    except NoNodeError:
        return States({}, False, namespace)
    entries: dict[int, Entry] = {}
    for name in sorted(names):
        try:
            data, stat = client.get(f"{ROOT}/{name}")
        except NoNodeError:
            continue
        e = decode(name, data, stat.version)
        if e is None:
            log.warning("ignoring %s/%s: not a broker id", ROOT, name)
            continue
        entries[e.broker] = e
    return States(entries, True, True)


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


def set_ops(states: States, brokers: Iterable[int], actor: str, to: str | None, *, plan_id: str | None,
            run: str | None = None, reason: str = "", by: Mapping[str, Any] | None = None) -> list[Op]:
    """The writes that move `brokers` to `to` (None: clear), checked against the table, for one transaction of
    the caller's (conditional on each znode's version, so a concurrent change fails the whole transaction).
    A broker already in `to` for the same plan is left as it is (its `since` stays); when the same plan moves
    it on (draining -> drained), its run, who and why stay."""
    ops: list[Op] = []
    creates = False
    for b in sorted({int(x) for x in brokers}):
        cur = states.get(b)
        check(cur, actor, to, plan_id)
        if to is None:
            if cur is not None:
                ops.append(Op("delete", path(b), version=cur.version))
            continue
        if cur is not None and cur.state == to and cur.plan_id == plan_id:
            continue
        if cur is not None and cur.plan_id == plan_id and plan_id:   # the same plan moves on: who and why stay
            entry = Entry(b, to, plan_id, run or cur.run, dict(cur.by or by or {}), now_iso(), reason or cur.reason)
        else:
            entry = Entry(b, to, plan_id, run, dict(by or {}), now_iso(), reason)
        if cur is None:
            ops.append(Op("create", path(b), encode(entry)))
            creates = True
        else:
            ops.append(Op("set", path(b), encode(entry), cur.version))
    if creates and not states.root_exists:
        ops = ([] if states.namespace_exists else [Op("create", NAMESPACE)]) + [Op("create", ROOT)] + ops
    return ops


def identity(command: str) -> dict[str, Any]:
    """Who is acting (user, host, command, pid), as recorded in `by`."""
    i = runstate.identity(command, "")
    return {"user": i["user"], "host": i["host"], "command": f"kplan {command}", "pid": i["pid"]}


# ------------------------------------------------------------------------------------------ own transactions
@dataclass(frozen=True)
class Changed:
    broker: int
    before: Entry | None
    after: str | None


def change(client: KazooClient, brokers: Iterable[int], actor: str, to: str | None, *, plan_id: str | None,
           run: str | None = None, reason: str = "", command: str = "maintenance", lock_wait: float = 0.0,
           gate: WriteGate | None = None) -> list[Changed]:
    """Move `brokers` to `to` as one small transaction under the apply lock (taken and released here; refused,
    naming the holder, while another kplan holds it). Every refusal comes before the first write. With a
    `gate` that already holds the lock (the caller's apply), the transaction is fenced by that lock instead."""
    ids = sorted({int(b) for b in brokers})
    if not ids:
        raise BadInput("no broker given")
    zkmod.require_kafka(client)
    zkmod.refuse_kraft_migration(client)
    by = identity(command)
    if gate is not None and gate.fence is not None:
        return _commit(gate, read_all(client), ids, actor, to, plan_id, run, reason, by)
    set_ops(read_all(client), ids, actor, to, plan_id=plan_id, run=run, reason=reason, by=by)  # refuse early
    who = holder(client)
    if who and not lock_wait:
        raise SafetyRefusal(f"another kplan holds the lock: {who}; broker maintenance state changes only under "
                            "the lock; nothing was written")
    gate = WriteGate(client)
    lock = ApplyLock(gate, command, plan_id or "-")
    lock.acquire(lock_wait)
    try:
        return _commit(gate, read_all(client), ids, actor, to, plan_id, run, reason, by)
    finally:
        lock.release()


def _commit(gate: WriteGate, states: States, ids: list[int], actor: str, to: str | None, plan_id: str | None,
            run: str | None, reason: str, by: Mapping[str, Any]) -> list[Changed]:
    ops = set_ops(states, ids, actor, to, plan_id=plan_id, run=run, reason=reason, by=by)
    if ops:
        try:
            gate.commit(ops)
        except (BadVersionError, NodeExistsError, NoNodeError):
            raise SafetyRefusal(f"the maintenance state of brokers {ids} changed while it was being written; "
                                "nothing was written", next_steps=(NextStep("brokers", "shows them as they are now"),)
                                ) from None
    out = [Changed(b, states.get(b), to) for b in ids]
    for c in out:
        log.info("maintenance: broker %d %s -> %s (%s)", c.broker, c.before.state if c.before else "in service",
                 to or "in service", actor)
    return out


def held_by(client: KazooClient, entry: Entry) -> str | None:
    """The running apply holding `entry`: the lock's holder is the plan that set the state. Described, or None."""
    if not entry.plan_id:
        return None
    try:
        children = client.get_children(LOCK_PATH)
    except NoNodeError:
        return None
    for c in sorted((c for c in children if c[-10:].isdigit()), key=lambda n: n[-10:]):
        try:
            data, _ = client.get(f"{LOCK_PATH}/{c}")
        except NoNodeError:
            continue   # left meanwhile: the next one holds it
        try:
            h = json.loads(data)
        except ValueError:
            return None
        if isinstance(h, dict) and h.get("plan_id") == entry.plan_id:
            return describe_holder(data)
        return None
    return None


def clear(client: KazooClient, brokers: Iterable[int], expect: str | None = None,
          reason: str = "") -> list[Changed]:
    """The operator's explicit clear: each broker must be in maintenance (in `expect` when given), and no
    running apply may hold its state. One transaction under the lock; nothing written on any refusal."""
    ids = sorted({int(b) for b in brokers})
    if not ids:
        raise BadInput("name the brokers whose maintenance state to clear")
    if expect is not None and expect not in (*STATES, UNKNOWN):
        raise BadInput(f"state {expect!r} is not one of {', '.join((*STATES, UNKNOWN))}")
    zkmod.require_kafka(client)
    states = read_all(client)
    registered = {int(c) for c in (client.get_children(codec.BROKER_IDS) if client.exists(codec.BROKER_IDS) else [])
                  if c.isdigit()}
    in_maint = ", ".join(f"{b} {e.state}" for b, e in sorted(states.entries.items())) or "none"
    for b in ids:
        e = states.get(b)
        if e is None:
            what = "is not in maintenance" if b in registered else "is not a registered broker and has no " \
                                                                   "maintenance state"
            raise BadInput(f"broker {b} {what}: nothing to clear (brokers in maintenance: {in_maint}); nothing "
                           "was written")
        if expect is not None and e.state != expect:
            raise BadInput(f"broker {b} is {e.state}, not {expect}: nothing was cleared ({e.describe()})")
        who = held_by(client, e)
        if who:
            raise SafetyRefusal(f"broker {b} is {e.state} for {who}, which is running: stop it first; nothing was "
                                "cleared", next_steps=(NextStep("cancel", "stops it"),))
    return change(client, ids, OPERATOR, None, plan_id=None, reason=reason, command="maintenance clear")


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


def statuses(client: KazooClient) -> list[BrokerStatus]:
    """Registered brokers (with their racks) and brokers in maintenance, read now, without the lock."""
    zkmod.require_kafka(client)
    racks: dict[int, str | None] = {}
    try:
        ids = client.get_children(codec.BROKER_IDS)
    except NoNodeError:
        ids = []
    for name in ids:
        if not (name.isascii() and name.isdigit()):
            continue
        b = int(name)
        try:
            data, _ = client.get(codec.broker_path(b))
            racks[b] = codec.decode_broker(b, data).rack
        except NoNodeError:
            continue
        except BadInput:
            racks[b] = None   # registered, details malformed
    entries = read_all(client).entries
    return [BrokerStatus(b, racks.get(b), b in racks, entries.get(b)) for b in sorted(set(racks) | set(entries))]


def statuses_in_snapshot(brokers: Any, manifest: Mapping[str, Any]) -> list[BrokerStatus]:
    """The same rows as the snapshot recorded them (`brokers`: its brokers table)."""
    entries = from_manifest(manifest.get("maintenance"))
    cols = brokers.select(["broker", "alive", "rack"]).to_pydict()
    known = {int(b): (a, r) for b, a, r in zip(cols["broker"], cols["alive"], cols["rack"], strict=True)}
    return [BrokerStatus(b, known.get(b, (False, None))[1], bool(known.get(b, (False, None))[0]), entries.get(b))
            for b in sorted(set(known) | set(entries))]
