"""Pure parts of the executor: the plan's execution units and Kafka's throttle arithmetic (no ZooKeeper)."""

from __future__ import annotations

import json

import pytest
from apply_support import write_plan

from planner.errors import BadInput
from planner.execution.planview import from_document
from planner.execution.throttles import (
    FOLLOWER_REPLICAS,
    LEADER_REPLICAS,
    join_entries,
    parse_entries,
    spec_for,
)


def test_throttles_follow_kafkas_reassign_tool():
    # ReassignPartitionsCommand.calculateLeaderThrottles / calculateFollowerThrottles, worked by hand:
    # t-0 [1,2] -> [2,3]: sources 1,2 leader-throttled; 3 follower-throttled; brokers 1,2,3.
    # t-5 [4,1] -> [1,4]: a reorder copies nothing: not throttled.
    # u-1 [2,3,4] -> [5,6,4]: sources 2,3,4; destinations 5,6.
    spec = spec_for([("t", 0, [1, 2], [2, 3]), ("t", 5, [4, 1], [1, 4]), ("u", 1, [2, 3, 4], [5, 6, 4])])
    assert {t: {k: sorted(v) for k, v in keys.items()} for t, keys in spec.replicas.items()} == {
        "t": {LEADER_REPLICAS: ["0:1", "0:2"], FOLLOWER_REPLICAS: ["0:3"]},
        "u": {LEADER_REPLICAS: ["1:2", "1:3", "1:4"], FOLLOWER_REPLICAS: ["1:5", "1:6"]},
    }
    assert spec.brokers == {1, 2, 3, 4, 5, 6}
    assert join_entries({"10:1", "2:3", "2:1"}) == "2:1,2:3,10:1"
    assert parse_entries(" * ") == "*" and parse_entries("0:1, 1:2") == {"0:1", "1:2"} and parse_entries(None) == set()


def _doc(tmp_path, **kw):
    doc = write_plan(tmp_path / "p", [("t", 0, [1, 2], [3, 2], 100), ("t", 1, [1, 4], [4, 5], 100),
                                      ("t", 2, [2, 1], [2, 6], 100), ("t", 3, [1, 2], [2, 1], 0)],
                     [("leadership", [("t", 3, [2, 1]), ("t", 1, [4, 1])]),
                      ("data", [("t", 0, [3, 2]), ("t", 1, [4, 5]), ("t", 2, [2, 6])])], **kw)
    return json.loads(json.dumps(doc))


def test_units_keep_the_plans_order_and_track_each_partitions_replicas(tmp_path):
    plan = from_document(_doc(tmp_path))
    assert [(u.label, u.kind) for u in plan.units] == [("batch 0", "leadership"), ("batch 1", "data")]
    lead, data = plan.units
    # t-1 starts batch 1 from what the leadership batch wrote, not from the plan's "from"
    assert dict(zip(data.keys(), data.before, strict=True))[("t", 1)] == (4, 1)
    assert data.bytes == 300 and lead.bytes == 0
    assert plan.final_unit() == {("t", 3): 0, ("t", 1): 1, ("t", 0): 1, ("t", 2): 1}


def test_lowering_concurrency_splits_batches_first_fit_and_raising_it_is_refused(tmp_path):
    doc = _doc(tmp_path, max_concurrent=5)
    # every data move here removes a replica from broker 1 (t-0: 1 out, 3 in; t-1: 1 out, 5 in; t-2: 1 out, 6 in)
    plan = from_document(doc, max_concurrent=1)
    assert [(u.label, u.keys()) for u in plan.units] == [
        ("batch 0", [("t", 3), ("t", 1)]), ("batch 1.1/3", [("t", 0)]), ("batch 1.2/3", [("t", 1)]),
        ("batch 1.3/3", [("t", 2)])]
    assert from_document(doc, max_concurrent=2).units[1].keys() == [("t", 0), ("t", 1)]
    assert from_document(doc).digest() != plan.digest()
    with pytest.raises(BadInput, match="lower that"):
        from_document(doc, max_concurrent=6)


def test_the_plans_suggested_throttle_per_batch_is_the_default(tmp_path):
    doc = _doc(tmp_path)
    doc["batches"][1]["suggested_throttle_bytes_per_s"] = 4_000_000
    plan = from_document(doc)
    assert [u.throttle for u in plan.units] == [None, 4_000_000]


def test_broker_rates_cover_the_following_batches_of_the_same_rate(tmp_path):
    from planner.execution.executor import brokers_ahead

    # Batch 1 split one move per unit: 1.1 t-0 [1,2]->[3,2] (brokers 1,2,3), 1.2 t-1 [4,1]->[4,5] (1,4,5),
    # 1.3 t-2 [2,1]->[2,6] (1,2,6). The leadership batch sets no throttle.
    plan = from_document(_doc(tmp_path, max_concurrent=5), max_concurrent=1)
    assert brokers_ahead(plan.units, lambda u: 5) == [set(), {1, 2, 3, 4, 5, 6}, {1, 2, 4, 5, 6}, {1, 2, 6}]
    # A change of rate ends a stretch: 1.3 runs at another rate, so 1.1's rates cover 1.1 and 1.2 only.
    rates = {1: 5, 2: 5, 3: 7}
    assert brokers_ahead(plan.units, lambda u: rates.get(u.index)) == [set(), {1, 2, 3, 4, 5}, {1, 4, 5}, {1, 2, 6}]
    # Unthrottled data batches set nothing.
    assert brokers_ahead(plan.units, lambda u: None) == [set()] * 4


def test_the_znode_of_the_unit_completed_last_is_the_runs_own_until_the_controller_deletes_it(tmp_path):
    # A unit is complete once its partitions are at their targets, a moment before the controller deletes
    # /admin/reassign_partitions: a run resumed in that moment must wait for it, not refuse it as foreign.
    from planner.codec import ReassignEntry
    from planner.execution.clusterview import AdminZnode
    from planner.execution.preflight import own_reassignment
    from planner.execution.runstate import Run, RunRecord

    plan = from_document(_doc(tmp_path))  # unit 0: t-3 -> [2,1], t-1 -> [4,1]; unit 1: t-0, t-1 -> [4,5], t-2

    def run(*states):
        return Run("/kplan/runs/x", RunRecord.from_json({"units": [[s, None, None] for s in states], "revert": None}))

    def znode(*entries):
        return AdminZnode(True, b"", 0, tuple(ReassignEntry(t, p, tuple(r)) for t, p, r in entries))

    leadership_left = znode(("t", 3, [2, 1]))
    assert own_reassignment(leadership_left, run("completed", "pending"), plan)
    assert own_reassignment(znode(("t", 3, [2, 1]), ("t", 1, [4, 1])), run("completed", "pending"), plan)
    assert not own_reassignment(leadership_left, run("completed", "completed"), plan)   # no longer the last
    assert not own_reassignment(znode(("t", 3, [1, 2])), run("completed", "pending"), plan)  # other replicas
    assert not own_reassignment(znode(("t", 0, [3, 2])), run("completed", "pending"), plan)  # not submitted yet
    assert own_reassignment(znode(("t", 0, [3, 2])), run("completed", "submitted"), plan)    # in flight
    assert not own_reassignment(leadership_left, None, plan)
