"""planner/maintenance.py (the table) and planner/maintenance_zk.py (its znodes) on a real ZooKeeper: the
transition table, entries written and read back, the operator's clear and its refusals (nothing written on any
of them), the fence and version conditions."""

from __future__ import annotations

import itertools
import json

import pytest
from apply_support import Checker
from kazoo.exceptions import BadVersionError

from planner import loader
from planner import maintenance as mt
from planner import maintenance_zk as zkm
from planner.errors import BadInput, SafetyRefusal
from planner.execution.lock import ApplyLock
from planner.zkgate import Op, WriteGate, check_write

CLUSTER = {"brokers": [{"id": i} for i in (1, 2, 3)], "topics": [{"name": "t", "partitions": [{"replicas": [1, 2]}]}]}
PLAN = "sha256:" + "a" * 64
OTHER = "sha256:" + "b" * 64

# The legal moves, written out by hand from the design (docs/DESIGN.md "Maintenance lifecycle"), independently of
# the module's table: (actor, from, to); None = in service.
LEGAL = {
    ("drain-apply", None, "draining"), ("drain-apply", "draining", "draining"),
    ("drain-apply", "drained", "draining"), ("drain-apply", "returning", "draining"),
    ("drain-verify", "draining", "drained"),
    ("return-apply", "drained", "returning"), ("return-apply", "returning", "returning"),
    ("return-verify", "returning", None),
    ("restart", None, "restarting"), ("restart", "restarting", "restarting"), ("restart", "restarting", None),
    *(("operator", s, None) for s in ("draining", "drained", "restarting", "returning", "unknown")),
}
FROM = (None, "draining", "drained", "restarting", "returning", "unknown")
TO = (None, "draining", "drained", "restarting", "returning")


def entry(state: str | None, plan: str = PLAN) -> mt.Entry | None:
    return None if state is None else mt.Entry(1, state, plan)


@pytest.mark.parametrize("actor", sorted(mt.TRANSITIONS))
def test_the_table_allows_exactly_the_designed_moves(actor):
    for frm, to in itertools.product(FROM, TO):
        if (actor, frm, to) in LEGAL:
            mt.check(entry(frm), actor, to, PLAN)
        else:
            with pytest.raises(mt.MaintenanceConflict, match="nothing was written"):
                mt.check(entry(frm), actor, to, PLAN)


def test_a_state_set_by_one_plan_is_not_moved_on_by_another():
    with pytest.raises(mt.MaintenanceConflict, match="belongs to another plan"):
        mt.check(entry("draining", OTHER), "drain-verify", "drained", PLAN)
    with pytest.raises(mt.MaintenanceConflict, match="belongs to another plan"):
        mt.check(entry("restarting", OTHER), "restart", None, PLAN)
    mt.check(entry("drained", OTHER), "drain-apply", "draining", PLAN)   # a follow-up drain may
    with pytest.raises(mt.MaintenanceConflict, match="restart roll"):
        mt.check(entry("restarting", OTHER), "drain-apply", "draining", PLAN)


def _tree(check: Checker) -> dict:
    """Every persistent znode but the lock's parent, whose child version the test's own lock holders change."""
    return {p: v for p, v in check.tree().items() if p != "/kplan/lock"}


def _setup(zk_client) -> Checker:
    loader.load_cluster(zk_client, CLUSTER)
    return Checker(zk_client)


def test_entries_written_in_a_locked_transaction_read_back_by_anyone(zk_client):
    check = _setup(zk_client)
    assert zkm.read_all(zk_client).entries == {}
    got = zkm.change(zk_client, [2, 1], "restart", "restarting", plan_id=PLAN, run="runs/r1", reason="OS patch",
                    command="restart")
    assert [(c.broker, c.before, c.after) for c in got] == [(1, None, "restarting"), (2, None, "restarting")]
    raw = check.json("/kplan/maintenance/1")
    assert raw["format"] == "kplan-maintenance/1" and raw["broker"] == 1 and raw["state"] == "restarting"
    assert (raw["plan_id"], raw["run"], raw["reason"]) == (PLAN, "runs/r1", "OS patch")
    assert raw["by"]["command"] == "kplan restart" and raw["by"]["user"] and raw["since"].endswith("Z")
    assert check.lock_holders() == []          # the lock was taken and released
    states = zkm.read_all(zk_client)
    assert states.brokers() == [1, 2] and states.get(1).state == "restarting" and states.get(1).version == 0
    # the same state for the same plan again writes nothing (its `since` stays)
    before = check.tree("/kplan/maintenance")
    zkm.change(zk_client, [1], "restart", "restarting", plan_id=PLAN, command="restart")
    assert check.tree("/kplan/maintenance") == before
    # its owner takes it out again; another plan may not
    with pytest.raises(mt.MaintenanceConflict):
        zkm.change(zk_client, [2], "restart", None, plan_id=OTHER, command="restart")
    zkm.change(zk_client, [1, 2], "restart", None, plan_id=PLAN, command="restart")
    assert zk_client.get_children("/kplan/maintenance") == []


def test_every_write_is_one_the_gate_allows_and_is_conditional():
    states = mt.States({1: mt.Entry(1, "draining", PLAN, version=4)}, True, True)
    ops = zkm.set_ops(states, [1], "drain-verify", "drained", plan_id=PLAN)
    assert [(o.kind, o.path, o.version) for o in ops] == [("set", "/kplan/maintenance/1", 4)]
    ops = zkm.set_ops(mt.States({}, False, False), [3], "drain-apply", "draining", plan_id=PLAN)
    assert [(o.kind, o.path) for o in ops] == [("create", "/kplan"), ("create", "/kplan/maintenance"),
                                               ("create", "/kplan/maintenance/3")]
    for o in ops:
        check_write(o.kind, o.path)


def test_a_stale_version_fails_the_whole_transaction(zk_client):
    check = _setup(zk_client)
    zkm.change(zk_client, [1], "restart", "restarting", plan_id=PLAN, command="restart")
    stale = zkm.read_all(zk_client)
    zkm.change(zk_client, [1], "restart", None, plan_id=PLAN, command="restart")
    zkm.change(zk_client, [1], "restart", "restarting", plan_id=OTHER, command="restart")   # version 0 again
    zk_client.set("/kplan/maintenance/1", zk_client.get("/kplan/maintenance/1")[0])        # version 1
    before = check.tree("/kplan/maintenance")
    gate = WriteGate(zk_client)
    lock = ApplyLock(gate, "test", PLAN)
    lock.acquire()
    try:
        ops = zkm.set_ops(stale, [1], "restart", None, plan_id=PLAN)
        with pytest.raises(BadVersionError):
            gate.commit(ops + [Op("create", "/kplan/other")])
    finally:
        lock.release()
    assert check.tree("/kplan/maintenance") == before and not check.exists("/kplan/other")


def test_clear_names_what_it_clears_and_refuses_what_it_must(zk_client):
    check = _setup(zk_client)
    zkm.change(zk_client, [1], "restart", "restarting", plan_id=PLAN, command="restart")
    before = _tree(check)
    # a broker with no state, an unknown broker, the wrong state named: bad input, nothing written
    with pytest.raises(BadInput, match=r"broker 2 is not in maintenance: nothing to clear \(brokers in "
                                       r"maintenance: 1 restarting\)"):
        zkm.clear(zk_client, [2])
    with pytest.raises(BadInput, match="broker 99 is not a registered broker and has no maintenance state"):
        zkm.clear(zk_client, [99])
    with pytest.raises(BadInput, match="broker 1 is restarting, not drained: nothing was cleared"):
        zkm.clear(zk_client, [1], expect="drained")
    with pytest.raises(BadInput, match="not one of"):
        zkm.clear(zk_client, [1], expect="gone")
    # the plan that set the state holds the lock (a running apply): refused, naming it
    gate = WriteGate(zk_client)
    running = ApplyLock(gate, "apply", PLAN)
    running.acquire()
    try:
        with pytest.raises(SafetyRefusal, match=r"broker 1 is restarting for kplan apply of plan sha256:a+ "
                                                r"\(pid \d+ .*which is running: stop it first"):
            zkm.clear(zk_client, [1])
        assert _tree(check) == before and len(check.lock_holders()) == 1   # only the running apply's
    finally:
        running.release()
    # someone else holds the lock: refused, naming the holder
    other = ApplyLock(WriteGate(zk_client), "apply", OTHER)
    other.acquire()
    try:
        with pytest.raises(SafetyRefusal, match="another kplan holds the lock: kplan apply of plan sha256:b"):
            zkm.clear(zk_client, [1])
        assert len(check.lock_holders()) == 1
    finally:
        other.release()
    assert _tree(check) == before
    got = zkm.clear(zk_client, [1], expect="restarting")
    assert [(c.broker, c.before.state, c.after) for c in got] == [(1, "restarting", None)]
    assert not check.exists("/kplan/maintenance/1") and check.lock_holders() == []


def test_a_malformed_entry_counts_as_in_maintenance_until_cleared(zk_client):
    _setup(zk_client)
    zk_client.ensure_path("/kplan/maintenance")
    zk_client.create("/kplan/maintenance/2", b'{"state":"off"}')
    zk_client.create("/kplan/maintenance/notes", b"x")
    e = zkm.read_all(zk_client).get(2)
    assert e.state == "unknown" and "not a valid maintenance entry" in e.reason
    assert list(zkm.read_all(zk_client).entries) == [2]
    zkm.clear(zk_client, [2], expect="unknown")
    assert zkm.read_all(zk_client).entries == {}


def test_nothing_is_written_to_a_chroot_without_kafka(zk_client):
    before = Checker(zk_client).tree()
    with pytest.raises(BadInput, match="no Kafka cluster"):
        zkm.change(zk_client, [1], "restart", "restarting", plan_id=PLAN, command="restart")
    assert Checker(zk_client).tree() == before


def test_manifest_section_round_trip():
    e = mt.Entry(3, "drained", PLAN, "/runs/x", {"user": "ann", "host": "h", "command": "kplan verify"},
                 "2026-11-25T10:00:00Z", "disk swap")
    section = mt.manifest_section({3: e})
    assert section == [{"broker": 3, "state": "drained", "plan_id": PLAN, "run": "/runs/x",
                        "by": {"user": "ann", "host": "h", "command": "kplan verify"},
                        "since": "2026-11-25T10:00:00Z", "reason": "disk swap"}]
    assert mt.from_manifest(json.loads(json.dumps(section))) == {3: e}
    assert mt.from_manifest(None) == {}
    with pytest.raises(BadInput):
        mt.from_manifest([{"broker": "3", "state": "drained"}])
    assert e.describe() == (f"broker 3 drained since 2026-11-25T10:00:00Z by ann@h (kplan verify), plan "
                            f"{PLAN[:19]}…: disk swap")


def test_verify_sets_drained_only_when_the_drain_holds_and_only_for_its_own_plan(zk_client):
    from planner.execution import lifecycle
    from planner.execution.planview import RunPlan

    check = _setup(zk_client)
    plan = RunPlan(PLAN, "drain", {}, (), None, None, drained=(1, 2))
    gate = WriteGate(zk_client)
    lock = ApplyLock(gate, "apply", PLAN)
    lock.acquire()
    try:
        gate.commit(zkm.set_ops(zkm.read_all(zk_client), [1], "drain-apply", "draining", plan_id=PLAN, run="/r",
                               reason="why"))
        gate.commit(zkm.set_ops(zkm.read_all(zk_client), [2], "drain-apply", "draining", plan_id=OTHER))
        before = check.tree("/kplan/maintenance")
        out = lifecycle.after_verify(zk_client, gate, plan, True, {"holds": False, "remaining": ["late-0"]})
        assert out["set"] == {} and "1 partitions still on it" in out["kept"]["1"]
        out = lifecycle.after_verify(zk_client, gate, plan, False, None)
        assert out["set"] == {} and out["kept"]["2"] == "the plan has not converged"
        assert check.tree("/kplan/maintenance") == before
        out = lifecycle.after_verify(zk_client, gate, plan, True, {"holds": True, "remaining": []})
        assert out["set"] == {"1": "drained"} and "belongs to another plan" not in out["kept"]["2"]
        assert "its state is not this plan's" in out["kept"]["2"]
    finally:
        lock.release()
    one = check.json("/kplan/maintenance/1")
    assert (one["state"], one["plan_id"], one["run"], one["reason"]) == ("drained", PLAN, "/r", "why")
    assert check.json("/kplan/maintenance/2")["state"] == "draining"


def test_a_migration_snapshot_takes_the_znodes_and_refuses_a_differing_record():
    """A `--zk` snapshot of a migrating cluster (planner.snapshot.migration_maintenance): the znodes' states; an
    uncarried znode is kept, an equal record (the carry's copy) agrees, any differing record is refused."""
    from planner.snapshot import migration_maintenance

    z = {3: mt.Entry(3, mt.DRAINED, PLAN, version=2)}
    assert migration_maintenance(z, {}) == z
    assert migration_maintenance(z, {3: mt.Entry(3, mt.DRAINED, PLAN, reason="copied")}) == z
    with pytest.raises(SafetyRefusal, match=r"broker 3: drained \(plan sha256:aaaa.*\) in ZooKeeper, returning "
                                            r"\(plan .*\) in __kplan.*nothing was written") as e:
        migration_maintenance(z, {3: mt.Entry(3, mt.RETURNING, PLAN)})
    assert [(s.step, s.brokers) for s in e.value.next_steps] == [("maintenance clear", (3,)), ("brokers", ())]
    with pytest.raises(SafetyRefusal, match=r"broker 2: in service in ZooKeeper, drained in __kplan"):
        migration_maintenance(z, {3: z[3], 2: mt.Entry(2, mt.DRAINED)})
