"""The run record's transition table (planner/execution/runrecord.py) and its manager (runstate.RunManager):
an illegal transition raises and changes nothing; each transition returns the operations of one gate
transaction; a record in the `kplan-run/1` JSON written by the kplan before the typed record is read, resumed
and written back with nothing lost."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest
from apply_support import FINAL, MB, drain_desc, drain_plan, make_cluster, plan_hex, rf_of

from planner import codec
from planner.errors import NotConverged
from planner.execution import runrecord as rr
from planner.execution.rollcluster import Presence
from planner.execution.rollrecord import RollOptions
from planner.execution.rollsteps import BrokerSteps
from planner.execution.runstate import Run, RunManager
from planner.zkgate import WriteGate

# A record as the kplan before the typed record wrote it (hand-written: units are [state, submitted_at,
# completed_at] lists, the revert a dict; "intent" and "cancel" were added to the dict when set).
OLD = {"format": "kplan-run/1", "plan_id": "p:abc", "kind": "drain", "digest": "d1", "state": "cancelled",
       "created_at": 100.0, "updated_at": 180.5, "holder": {"command": "cancel", "pid": 7},
       "options": {"throttle": None, "max_concurrent": 5, "poll": 1.0},
       "units": [["completed", 101.0, 120.0], ["completed", 121.0, 150.0], ["pending", None, None]],
       "revert": {"unit": 1, "state": "completed", "submitted_at": 151.0, "completed_at": 170.0},
       "error": None, "progress": {"state": "reverted"}, "verify": None,
       "history": [[100.0, "created"], [180.5, "reverted (revert)"]],
       "cancel": {"mode": "revert", "requested_at": 140.0}, "intent": {"holds": False}}


def test_a_record_written_before_the_types_reads_back_to_the_same_json():
    rec = rr.RunRecord.from_json(json.loads(json.dumps(OLD)))
    assert rec.units[1] == rr.UnitRecord("completed", 121.0, 150.0)
    assert rec.revert == rr.RevertRecord(1, "completed", 151.0, 170.0)
    assert rec.extra == {"cancel": OLD["cancel"], "intent": OLD["intent"]}
    assert codec.dumps(rec.to_json()) == codec.dumps(OLD)   # same keys, same order, same values


class _Gate(WriteGate):
    """A dry-run gate (nothing is sent; it records each transaction)."""

    def __init__(self) -> None:
        super().__init__(None, dry_run=True)  # type: ignore[arg-type]
        self.fence = "/kplan/lock/held"


def _manager(states: list[str], run_state: str = rr.RUNNING) -> RunManager:
    rec = rr.RunRecord("p:abc", "drain", "d1", run_state, units=[rr.UnitRecord(s) for s in states])
    return RunManager(_Gate(), Run("/kplan/runs/abc", rec, version=3))


@pytest.mark.parametrize("states,i,to", [
    (["pending"], 0, rr.COMPLETED),     # never submitted: it cannot have completed
    (["pending"], 0, rr.ELECTING),
    (["completed"], 0, rr.SUBMITTED),   # submitted exactly once
    (["electing"], 0, rr.SUBMITTED),
])
def test_an_illegal_unit_transition_raises_and_changes_nothing(states, i, to):
    mgr = _manager(states)
    before = json.dumps(mgr.record.to_json())
    with pytest.raises(rr.IllegalTransition, match=f"{states[i]} -> {to} is not a legal transition"):
        mgr.record.move_unit(i, to)
    assert json.dumps(mgr.record.to_json()) == before


@pytest.mark.parametrize("frm,call", [
    (rr.DONE, lambda m: m.cancelling("after-batch")),        # a completed run is not cancelled
    (rr.CANCELLED, lambda m: m.finish(None)),                 # nor a cancelled one completed
    (rr.REVERTED, lambda m: m.end(rr.CANCELLED, {}, "after-batch")),
    (rr.RUNNING, lambda m: m.end(rr.REVERTED, {}, "revert")),  # a revert ends only a cancel
])
def test_an_illegal_run_transition_raises_and_writes_nothing(frm, call):
    mgr = _manager(["completed"], frm)
    with pytest.raises(rr.IllegalTransition):
        call(mgr)
    assert mgr.record.state == frm and mgr.gate.writes == []


def test_a_revert_moves_only_after_it_began():
    mgr = _manager(["completed"], rr.CANCELLING)
    with pytest.raises(rr.IllegalTransition, match="no revert recorded"):
        mgr.complete_revert("batch 1")
    mgr.begin_revert(0)
    with pytest.raises(rr.IllegalTransition, match="pending -> completed"):
        mgr.complete_revert("batch 1")
    assert mgr.record.state == rr.REVERTING


def test_each_transition_returns_the_ops_of_one_transaction_with_the_act_it_records():
    mgr = _manager(["pending", "pending"])
    ops = mgr.submit(0, "batch 1", 1, b'{"version":1,"partitions":[]}')
    assert [(op.kind, op.path, op.version) for op in ops] == [
        ("set", "/kplan/runs/abc", 3), ("create", "/admin/reassign_partitions", -1)]
    assert json.loads(ops[0].data)["units"][0][0] == "submitted"   # the state travels with the znode it records
    mgr.send(ops)
    assert mgr.gate.transactions == 1 and mgr.run.version == 4
    ops = mgr.elect(0, "batch 1", [("t", 0)])
    assert [op.path for op in ops] == ["/kplan/runs/abc", "/admin/preferred_replica_election"]
    assert json.loads(ops[1].data) == {"version": 1, "partitions": [{"topic": "t", "partition": 0}]}
    # A completion not sent is carried by the next transition's write (the record is written whole).
    mgr.complete(0, "batch 1")
    ops = mgr.submit(1, "batch 2", 1, b"{}")
    assert [u[0] for u in json.loads(ops[0].data)["units"]] == ["completed", "submitted"]


@pytest.fixture
def cluster(tmp_path, zk_connect):
    yield from make_cluster(tmp_path, zk_connect)


@pytest.mark.sandbox
def test_a_run_recorded_before_the_upgrade_is_resumed_by_this_version(cluster, tmp_path):
    """An apply stopped with batch 1 in flight; its record is replaced by one in the old layout, written by hand
    (as the kplan before the typed record left it, with a key this version does not know); apply resumes it."""
    env = cluster(drain_desc(size=20 * MB))
    plan_dir = tmp_path / "run" / "plan"
    doc = drain_plan(plan_dir, size=20 * MB)
    assert env.kplan("apply", "--zk", env.connect, "--plan", str(plan_dir), "--throttle", "2MB", "--poll", "0.2",
                     "--timeout", "2") == 1
    now = env.check.run(doc)
    assert [u[0] for u in now["units"]] == ["completed", "submitted", "pending"]
    path = f"/kplan/runs/{plan_hex(doc)}"
    old = {"format": "kplan-run/1", "plan_id": doc["id"], "kind": "drain", "digest": now["digest"],
           "state": "failed", "created_at": 1000.0, "updated_at": 1010.0,
           "holder": {"command": "apply", "host": "old-host", "pid": 1, "user": "u", "plan_id": doc["id"],
                      "since": "2026-11-25T00:00:00Z"},
           "options": {"throttle": 2000000, "max_concurrent": now["options"]["max_concurrent"], "poll": 0.2},
           "units": [["completed", 1001.0, 1002.0], ["submitted", 1003.0, None], ["pending", None, None]],
           "revert": None, "error": "NotConverged: apply timed out", "progress": None, "verify": None,
           "history": [[1000.0, "created"], [1010.0, "stopped: NotConverged"]], "written_by": "kplan 0.x"}
    env.zk.set(path, json.dumps(old).encode())
    assert env.kplan("apply", "--zk", env.connect, "--plan", str(plan_dir), "--throttle", "1GB", "--poll",
                     "0.2") == 0
    after = env.check.run(doc)
    assert after["state"] == "completed" and [u[0] for u in after["units"]] == ["completed"] * 3
    assert after["units"][0] == ["completed", 1001.0, 1002.0]   # as recorded before the upgrade
    assert after["units"][1][1] == 1003.0                # submitted once, before the upgrade: not again
    assert after["written_by"] == "kplan 0.x" and after["history"][:2] == old["history"]
    assert list(after)[:15] == list(old)[:15]            # the stored layout is the old one
    env.check.assert_nothing_lost(rf_of(env.desc), FINAL)


def test_the_roll_record_moves_only_as_its_tables_allow():
    from planner.execution import rollrecord as rl

    step = {"broker": 3, "state": "pending"}
    with pytest.raises(rr.IllegalTransition, match="pending -> restarting"):
        rl.move_step(step, rl.RESTARTING)          # never restarted before its leadership moved off
    for to in (rl.DEMOTING, rl.DEMOTED, rl.RESTARTING, rl.BACK, rl.RESTORING, rl.STEP_DONE):
        rl.move_step(step, to)
    with pytest.raises(rr.IllegalTransition, match="done -> demoting"):
        rl.move_step(step, rl.DEMOTING)
    rec = {"plan_id": "p", "state": rl.RUNNING, "phase": rl.PROTECT}
    with pytest.raises(rr.IllegalTransition, match="protect -> undo"):
        rl.move_phase(rec, rl.UNDO)                # no phase skipped
    rl.move_phase(rec, rl.STEPS)
    with pytest.raises(rr.IllegalTransition, match="steps -> protect"):
        rl.move_phase(rec, rl.PROTECT)             # nor gone back to
    rl.move_state(rec, rl.COMPLETED)
    with pytest.raises(rr.IllegalTransition, match="completed -> running"):
        rl.move_state(rec, rl.RUNNING)
    assert rec == {"plan_id": "p", "state": rl.COMPLETED, "phase": rl.STEPS}


class _RestartWait(BrokerSteps):
    """BrokerSteps' wait for a broker's restart on its own: the broker as the roll's cluster reads it, one Presence
    per read (the last repeated); saves are no-ops, the roll's lines are kept. (The same path on real brokers, a roll
    killed in `restarting` and resumed, is tests/test_kraft_roll.py's; this is the case it does not reach: a step
    resumed long after its restart, with no run of the roll having seen the broker leave.)"""

    def __init__(self, backend: str, *seen: Presence):
        self.cluster = SimpleNamespace(backend=backend, sleep=lambda: None)
        self.opts = RollOptions(restart_timeout=30.0, poll=0.01)
        self.seen, self.said = list(seen), []

    def _registration(self, broker: int, watch: bool = False) -> Presence:
        return self.seen.pop(0) if len(self.seen) > 1 else self.seen[0]

    def _save(self, extra=None) -> None:
        pass

    def _event(self, text: str) -> None:
        pass

    def say(self, message: str, broker: int | None = None, state: str = "") -> None:
        self.said.append(message)


def test_a_restart_the_roll_did_not_see_is_told_apart_on_zookeeper_and_admitted_unknown_on_kraft():
    an_hour_ago = time.time() - 3600        # the roll was killed in `restarting` and is run again an hour later
    # ZooKeeper: the registration's czxid says it. Unchanged: it did not restart; replaced: it did, unseen.
    step = {"broker": 2, "state": "restarting", "czxid": 7, "restart_at": an_hour_ago}
    with pytest.raises(NotConverged, match=r"broker 2 did not restart within 30 s \(its registration is unchanged\)"):
        _RestartWait("zookeeper", Presence(True, 7))._await_restart(step, "step 1/1")
    _RestartWait("zookeeper", Presence(True, 9))._await_restart(step, "step 1/1")
    assert step["state"] == "back"
    # KRaft: registered and unfenced now, which it is whether or not it restarted meanwhile: no claim either way
    step = {"broker": 2, "state": "restarting", "czxid": None, "restart_at": an_hour_ago}
    with pytest.raises(NotConverged) as e:
        _RestartWait("kraft", Presence(True))._await_restart(step, "step 1/1")
    said = str(e.value)
    assert "the roll cannot tell whether broker 2 restarted" in said and "registration is unchanged" not in said
    assert "restarting it again is safe" in said, said
    assert (step["state"], step.get("left_at")) == ("restarting", None)
    # ... and what it says to do gets the step on: run again while broker 2 is down (it records that it left; the
    # wait is long over, so it stops, saying so), then once it is started again
    with pytest.raises(NotConverged, match="broker 2 left at .* and has not registered again within 30 s"):
        _RestartWait("kraft", Presence(False))._await_restart(step, "step 1/1")
    assert step["state"] == "restarting" and step["left_at"] > an_hour_ago
    _RestartWait("kraft", Presence(True))._await_restart(step, "step 1/1")
    assert step["state"] == "back"


def test_a_refused_transaction_is_undone_in_memory_from_a_checkpoint():
    mgr = _manager(["completed", "pending"])
    mgr.record.extra["intent"] = {"holds": True}
    before = json.dumps(mgr.record.to_json())
    cp = mgr.checkpoint()
    mgr.submit(1, "batch 2", 1, b"{}")
    mgr.record.extra["cancel"] = {"mode": "revert"}
    assert json.dumps(mgr.record.to_json()) != before
    mgr.restore(cp)
    assert json.dumps(mgr.record.to_json()) == before
