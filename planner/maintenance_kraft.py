"""The brokers' maintenance state on a KRaft cluster: records of the `__kplan` topic, where the KRaft backend keeps
its lock and run records (the rules, the entries and their JSON: planner/maintenance.py; the ZooKeeper storage of
the same entries: planner/maintenance_zk.py).

    key `maintenance/<broker id>`   the entry (the same `kplan-maintenance/1` JSON), a tombstone = in service

Written only inside planner.execution.kraftstore's fenced transactions (one transactional.id per cluster, the
producer epoch fencing any earlier writer: docs/KRAFT.md "The one-writer fence"): by an apply in the same
transaction as its run record's transition, by verify with its note in the run record, by the roll in its
step's transaction, and by `change` / `clear` below as one transaction of their own that also releases the lock
record. Read by anyone with a read_committed consumer to the end of `__kplan` (`read_all`), with no lock and no
transactional producer: an aborted or open transaction's records are never seen (Kafka's read_committed reads up
to the last stable offset, KIP-98), and an absent `__kplan` means nobody is in maintenance. A record that does
not parse reads as `unknown` (in maintenance until cleared), as a malformed znode does on ZooKeeper.

No version conditions are needed, unlike ZooKeeper's: a writer takes the fence (initTransactions), then reads
`__kplan` to its end and decides on what it finds; no other writer can commit after that (PRODUCER_FENCED).
Records only: none of these writes is an Admin request, so the lease's wait does not apply to them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from planner import maintenance as mt
from planner.errors import BadInput, NextStep, SafetyRefusal
from planner.execution.kraftstore import (
    LOCK,
    TOPIC,
    Store,
    Unreadable,
    describe,
    holder_alive,
    maintenance_key,
)
from planner.execution.runstate import identity as holder_identity

log = logging.getLogger(__name__)

PREFIX = maintenance_key(0)[:-1]          # "maintenance/"


def _where(key: str) -> str:
    return f"{TOPIC} record {key}"


def entries_of(values: Mapping[str, Any]) -> dict[int, mt.Entry]:
    """The entries among `__kplan`'s latest values (key -> parsed JSON, None for a tombstone)."""
    out: dict[int, mt.Entry] = {}
    for key, value in values.items():
        if not key.startswith(PREFIX) or value is None:
            continue
        name = key[len(PREFIX):]
        b = mt.broker_id(name)
        if b is None:
            log.warning("ignoring %s record %s: not a broker id", TOPIC, key)
            continue
        out[b] = (mt.decode(name, value.data, where=_where(key)) if isinstance(value, Unreadable)
                  else mt.from_doc(b, value, where=_where(key)))
    return out


# ------------------------------------------------------------------------------------------ reading
def read_all(store: Store, exists: bool | None = None) -> mt.States:
    """Every broker's maintenance state: `__kplan` read to its end, read_committed, without the lock (`exists`:
    Store.read's)."""
    return mt.States(entries_of(store.read(exists)))


def read_entries(bootstrap: str, security: Any, timeout: float, admin: Any, topics: Iterable[str]
                 ) -> dict[int, mt.Entry]:
    """The snapshot's read (planner.admin_reader): `read_all` through the reader's own Admin client, which stays
    open (only the consumer made here is closed). `topics`: the cluster's topics as the snapshot read them; no
    `__kplan` among them = nobody in maintenance, and nothing more is asked."""
    store = Store(bootstrap, security, timeout, admin=admin)
    try:
        return dict(read_all(store, TOPIC in set(topics)).entries)
    finally:
        store.close_reader()


# ------------------------------------------------------------------------------------------ writing
def ops(states: mt.States, changes: Sequence[mt.Change]) -> dict[str, Any]:
    """The records of `changes` (maintenance.transition) for one of the caller's fenced transactions
    (Store.transact): each broker's entry, or a tombstone for one back in service."""
    del states   # no version conditions on KRaft: the fence makes the writer the only one (module docstring)
    return {maintenance_key(c.broker): None if c.after is None else c.after.as_dict() for c in changes}


def set_ops(states: mt.States, brokers: Iterable[int], actor: str, to: str | None, *, plan_id: str | None,
            run: str | None = None, reason: str = "", by: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The records that move `brokers` to `to` (None: clear), checked against the table (maintenance.transition,
    then `ops`)."""
    return ops(states, mt.transition(states, brokers, actor, to, plan_id=plan_id, run=run, reason=reason, by=by))


# ------------------------------------------------------------------------------------------ own transactions
def change(store: Store, brokers: Iterable[int], actor: str, to: str | None, *, plan_id: str | None,
           run: str | None = None, reason: str = "", command: str = "maintenance", lock_wait: float = 0.0
           ) -> list[mt.Changed]:
    """Move `brokers` to `to` as one fenced transaction of its own, which also releases the lock record: refused,
    naming the holder, while another kplan's lock is live (taking the fence would fence that apply), and
    checked again after the fence is taken. The lock record is marked released in the same transaction only when
    it was released before (a holder that died without releasing keeps its lease's wait for the next writer). Every refusal comes before the first write. For a caller that holds
    the fence already (an apply, the roll), `set_ops` in its own transaction instead."""
    ids = sorted({int(b) for b in brokers})
    if not ids:
        raise BadInput("no broker given")
    by = mt.identity(command)
    set_ops(read_all(store), ids, actor, to, plan_id=plan_id, run=run, reason=reason, by=by)   # refuse early
    _wait_for_lock(store, lock_wait)
    store.open()           # the fence: any earlier (dead) holder is fenced from here on
    try:
        states = read_all(store)            # decided again on everything committed before the fence
        records = set_ops(states, ids, actor, to, plan_id=plan_id, run=run, reason=reason, by=by)
        before = store.get(LOCK)
        if before is None or before.get("released"):
            records[LOCK] = {"holder": holder_identity(command, plan_id or "-"), "heartbeat": time.time(),
                             "released": True}
        # else the lock record stays the unreleased one of the holder fenced here: the next writer still waits
        # one lease before its first Admin write, as that holder's late writes may still be on their way
        store.transact(records)
    finally:
        store.close()
    return mt.report(ids, states, actor, to)


def carry(store: Store, entries: Mapping[int, mt.Entry], lock_wait: float = 0.0) -> list[int]:
    """Copy `entries` (the znodes of a cluster migrated from ZooKeeper: planner.maintenance_zk.read_all) into
    `__kplan` as they are (state, plan, run, who, since, reason), so that the cluster read through its bootstrap
    servers keeps its brokers in maintenance. One fenced transaction of its own, as `change`; the brokers it
    wrote, none when `__kplan` already holds the same states. A broker whose `__kplan` state differs from its
    znode's is refused, naming both, before anything is written: either may be the newer one (docs/KRAFT.md
    "Migration")."""
    def records(states: mt.States) -> dict[str, Any]:
        differ = [(b, e, states.entries[b]) for b, e in sorted(entries.items())
                  if b in states.entries and (states.entries[b].state, states.entries[b].plan_id)
                  != (e.state, e.plan_id)]
        if differ:
            raise SafetyRefusal("the brokers' maintenance state differs between ZooKeeper and __kplan (" + "; ".join(
                f"broker {b}: {z.state} in ZooKeeper, {k.state} in __kplan" for b, z, k in differ)
                + "); clear the side that is wrong first; nothing was written",
                next_steps=(NextStep("maintenance clear", "clears a broker's state on the side it is run on",
                                     tuple(b for b, _, _ in differ)), NextStep("brokers", "shows the __kplan side")))
        return {maintenance_key(b): e.as_dict() for b, e in sorted(entries.items()) if b not in states.entries}

    if not records(read_all(store)):      # refuse early, or nothing to do
        return []
    _wait_for_lock(store, lock_wait)
    store.open()           # the fence, as in `change`
    try:
        out = records(read_all(store))     # decided again on everything committed before the fence
        if out:
            before = store.get(LOCK)
            if before is None or before.get("released"):
                out[LOCK] = {"holder": holder_identity("maintenance carry", "-"), "heartbeat": time.time(),
                             "released": True}
            store.transact(out)
    finally:
        store.close()
    carried = sorted(int(k[len(PREFIX):]) for k in out if k.startswith(PREFIX))
    log.info("carried the maintenance state of brokers %s from ZooKeeper into %s", carried, TOPIC)
    return carried


def _wait_for_lock(store: Store, wait: float) -> None:
    limit = time.monotonic() + wait
    while True:
        lock = store.get(LOCK)
        if not holder_alive(lock, store.lease):
            return
        if time.monotonic() >= limit:
            raise SafetyRefusal(f"another kplan holds this cluster's lock ({describe(lock)}); broker maintenance "
                                "state changes only when no apply is writing; nothing was written",
                                next_steps=(NextStep("brokers", "shows every state"),))
        time.sleep(min(1.0, max(0.0, limit - time.monotonic())))
        store.read()


def held_by(store: Store, entry: mt.Entry) -> str | None:
    """The running apply holding `entry`: the live lock's holder is the plan that set the state. Described, or
    None."""
    lock = store.get(LOCK)
    if not entry.plan_id or not holder_alive(lock, store.lease):
        return None
    h = (lock or {}).get("holder") or {}
    return describe(lock) if h.get("plan_id") == entry.plan_id else None


def clear(store: Store, brokers: Iterable[int], expect: str | None = None, reason: str = "") -> list[mt.Changed]:
    """The operator's explicit clear: each broker must be in maintenance (in `expect` when given), and no
    running apply may hold its state. One fenced transaction; nothing written on any refusal."""
    ids = mt.clear_args(brokers, expect)
    states = read_all(store)
    mt.check_clear(states, ids, expect, _racks(store), lambda e: held_by(store, e))
    return change(store, ids, mt.OPERATOR, None, plan_id=None, reason=reason, command="maintenance clear")


def _racks(store: Store) -> dict[int, str | None]:
    """Registered, unfenced brokers and their racks (DescribeCluster: a fenced broker serves nothing, as a broker
    gone from ZooKeeper's /brokers/ids)."""
    from planner import kraft_admin as ka

    return {b: info["rack"] for b, info in ka.brokers(store.admin()).items() if not info["fenced"]}


# ------------------------------------------------------------------------------------------ the brokers' view
def statuses(store: Store) -> list[mt.BrokerStatus]:
    """Registered brokers (with their racks) and brokers in maintenance, read now, without the lock."""
    return mt.statuses_of(_racks(store), read_all(store).entries)
