"""The brokers' maintenance state on a ZooKeeper-mode cluster: znodes beside the apply lock (the rules, the
entries and their JSON: planner/maintenance.py; the KRaft storage of the same entries: planner/maintenance_kraft.py).

    /kplan/maintenance/<broker id>   the entry (maintenance.encode), no znode = in service

Written only through the write gate (planner/zkgate.py): by an apply inside its own fenced transactions (the
run record and the state in one multi-op), by verify under the lock, by the roll in its step's transaction, and
by `change` / `clear` below as one small transaction under the apply lock of their own. Every write is
conditional on the znode's version read, so a concurrent change fails the whole transaction. Read by anyone
without the lock (`read_all`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from planner import codec
from planner import maintenance as mt
from planner import zk as zkmod
from planner.errors import BadInput, NextStep, SafetyRefusal
from planner.execution.lock import ApplyLock, holder
from planner.execution.runstate import LOCK_PATH, describe_holder
from planner.zkgate import NAMESPACE, Op, WriteGate

log = logging.getLogger(__name__)

ROOT = f"{NAMESPACE}/maintenance"


def path(broker: int) -> str:
    return f"{ROOT}/{int(broker)}"


def decode(name: str, data: bytes | None, version: int = -1) -> mt.Entry | None:
    """The entry in znode `ROOT/<name>` (maintenance.decode: `unknown` when it does not parse)."""
    b = mt.broker_id(name)
    return mt.decode(name, data, version, where=path(b) if b is not None else None)


# ------------------------------------------------------------------------------------------ reading
def read_all(client: KazooClient) -> mt.States:
    """Every broker's maintenance state, read without the lock."""
    namespace = client.exists(NAMESPACE) is not None
    try:
        names = client.get_children(ROOT)
    except NoNodeError:
        return mt.States({}, False, namespace)
    entries: dict[int, mt.Entry] = {}
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
    return mt.States(entries, True, True)


# ------------------------------------------------------------------------------------------ writing
def ops(states: mt.States, changes: Sequence[mt.Change]) -> list[Op]:
    """The znode writes of `changes` (maintenance.transition), each conditional on the version read, for one
    transaction of the caller's (the parents created when the first entry is)."""
    out: list[Op] = []
    creates = False
    for c in changes:
        if c.after is None:
            if c.before is not None:
                out.append(Op("delete", path(c.broker), version=c.before.version))
        elif c.before is None:
            out.append(Op("create", path(c.broker), mt.encode(c.after)))
            creates = True
        else:
            out.append(Op("set", path(c.broker), mt.encode(c.after), c.before.version))
    if creates and not states.root_exists:
        out = ([] if states.namespace_exists else [Op("create", NAMESPACE)]) + [Op("create", ROOT)] + out
    return out


def set_ops(states: mt.States, brokers: Iterable[int], actor: str, to: str | None, *, plan_id: str | None,
            run: str | None = None, reason: str = "", by: Mapping[str, Any] | None = None) -> list[Op]:
    """The writes that move `brokers` to `to` (None: clear), checked against the table, for one transaction of
    the caller's (maintenance.transition, then `ops`)."""
    return ops(states, mt.transition(states, brokers, actor, to, plan_id=plan_id, run=run, reason=reason, by=by))


# ------------------------------------------------------------------------------------------ own transactions
def change(client: KazooClient, brokers: Iterable[int], actor: str, to: str | None, *, plan_id: str | None,
           run: str | None = None, reason: str = "", command: str = "maintenance", lock_wait: float = 0.0,
           gate: WriteGate | None = None) -> list[mt.Changed]:
    """Move `brokers` to `to` as one small transaction under the apply lock (taken and released here; refused,
    naming the holder, while another kplan holds it). Every refusal comes before the first write. With a
    `gate` that already holds the lock (the caller's apply), the transaction is fenced by that lock instead."""
    ids = sorted({int(b) for b in brokers})
    if not ids:
        raise BadInput("no broker given")
    zkmod.require_kafka(client)
    zkmod.refuse_kraft_migration(client)
    by = mt.identity(command)
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


def _commit(gate: WriteGate, states: mt.States, ids: list[int], actor: str, to: str | None, plan_id: str | None,
            run: str | None, reason: str, by: Mapping[str, Any]) -> list[mt.Changed]:
    writes = set_ops(states, ids, actor, to, plan_id=plan_id, run=run, reason=reason, by=by)
    if writes:
        try:
            gate.commit(writes)
        except (BadVersionError, NodeExistsError, NoNodeError):
            raise SafetyRefusal(f"the maintenance state of brokers {ids} changed while it was being written; "
                                "nothing was written", next_steps=(NextStep("brokers", "shows them as they are now"),)
                                ) from None
    return mt.report(ids, states, actor, to)


def held_by(client: KazooClient, entry: mt.Entry) -> str | None:
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
          reason: str = "") -> list[mt.Changed]:
    """The operator's explicit clear: each broker must be in maintenance (in `expect` when given), and no
    running apply may hold its state. One transaction under the lock; nothing written on any refusal."""
    ids = mt.clear_args(brokers, expect)
    zkmod.require_kafka(client)
    states = read_all(client)
    mt.check_clear(states, ids, expect, _registered(client), lambda e: held_by(client, e))
    return change(client, ids, mt.OPERATOR, None, plan_id=None, reason=reason, command="maintenance clear")


def _registered(client: KazooClient) -> set[int]:
    names = client.get_children(codec.BROKER_IDS) if client.exists(codec.BROKER_IDS) else []
    return {int(c) for c in names if c.isdigit()}


# ------------------------------------------------------------------------------------------ the brokers' view
def statuses(client: KazooClient) -> list[mt.BrokerStatus]:
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
    return mt.statuses_of(racks, read_all(client).entries)
