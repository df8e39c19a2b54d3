"""Every plan kind respects the brokers' maintenance state (in memory, no ZooKeeper): no replica and no
preferred leadership for a broker in maintenance, from a rebalance, another drain or a return; a follow-up
drain may name a drained broker; a return moves replicas only onto the returning broker, reverses the drain's
own moves where the cluster still matches them and balances it up to its share otherwise.

Expected results are checked against the cluster descriptions (hand-built), not against the planner's figures.
"""

from __future__ import annotations

import copy

import pytest

from planner import risk
from planner.cluster import parse_cluster
from planner.errors import BadInput
from planner.optimizer import Params, from_snapshot, make_plan

RACKS = {1: "r1", 2: "r2", 3: "r3", 4: "r1", 5: "r2", 6: "r3"}


def b(i: int) -> int:
    return i % 6 + 1


def desc() -> dict:
    """Balanced and rack-aware: every broker 11 replicas, 5 preferred leaderships."""
    return {"brokers": [{"id": i, "rack": RACKS[i]} for i in range(1, 7)], "topics": [
        {"name": "orders", "partitions": [{"replicas": [b(p), b(p + 1), b(p + 2)]} for p in range(12)]},
        {"name": "events", "partitions": [{"replicas": [b(p), b(p + 1)]} for p in range(12)]},
        {"name": "legacy", "partitions": [{"replicas": [b(p)]} for p in range(6)]}]}


def state(broker: int, st: str, plan: str = "sha256:" + "d" * 64) -> dict:
    return {"broker": broker, "state": st, "plan_id": plan, "run": None, "by": {"user": "ann", "host": "h"},
            "since": "2026-11-25T10:00:00Z", "reason": "disk swap"}


def problem(d: dict, maintenance: list[dict] = ()):
    snap = risk.snapshot_from_cluster(parse_cluster(d))
    snap.manifest["maintenance"] = list(maintenance)
    return from_snapshot(snap)


def lists(res) -> dict[tuple[str, int], list[int]]:
    pb = res.problem
    return {(pb.topic_names[pb.topic_of[r]], int(pb.partition[r])): [int(pb.broker_ids[x]) for x in res.final[r]
                                                                         if x >= 0]
            for r in range(pb.num_partitions)}


def applied(d: dict, res) -> dict:
    out = copy.deepcopy(d)
    final = lists(res)
    for t in out["topics"]:
        for p, part in enumerate(t["partitions"]):
            part["replicas"] = final[(t["name"], p)]
    return out


def counts(d: dict) -> dict[int, int]:
    c = dict.fromkeys(range(1, 7), 0)
    for t in d["topics"]:
        for p in t["partitions"]:
            for x in p["replicas"]:
                c[x] += 1
    return c


def drain_moves(res) -> tuple:
    pb = res.problem
    ids = pb.broker_ids
    return tuple((pb.topic_names[pb.topic_of[r]], int(pb.partition[r]), [int(ids[x]) for x in pb.replicas[r] if x >= 0],
                  [int(ids[x]) for x in res.final[r] if x >= 0]) for r in res.changed.tolist())


@pytest.fixture(scope="module")
def drained():
    """Broker 1 drained (the plan's moves applied), the drain's moves, and the description before."""
    d0 = desc()
    res = make_plan(problem(d0), Params("drain", [1]))
    return d0, applied(d0, res), drain_moves(res)


def racks_of(reps: list[int]) -> int:
    return len({RACKS[x] for x in reps})


@pytest.mark.parametrize("st", ["draining", "drained", "restarting", "returning", "unknown"])
@pytest.mark.parametrize("scope", ["all", "touched"])
def test_a_rebalance_gives_a_broker_in_maintenance_nothing(drained, st, scope):
    _, d1, _ = drained
    # broker 1 is empty; give it back one replica and the preferred leadership of a partition, as a late topic
    # would: a rebalance must neither add to it nor make it lead anything new
    d1 = copy.deepcopy(d1)
    d1["topics"].append({"name": "late", "partitions": [{"replicas": [1, 2]}, {"replicas": [3, 1]}]})
    res = make_plan(problem(d1, [state(1, st)]), Params("rebalance", leader_scope=scope))
    before = {(t["name"], p): part["replicas"] for t in d1["topics"] for p, part in enumerate(t["partitions"])}
    for k, reps in lists(res).items():
        assert not ({1} & set(reps)) - set(before[k]), (k, before[k], reps)   # no replica added on 1
        if reps[0] == 1:
            assert before[k][0] == 1, (k, before[k], reps)                   # no new preferred leadership
    assert any("left out" in w and "broker 1 (" + st in w for w in res.warnings), res.warnings
    assert res.left_out.tolist() == [True] + [False] * 5


def test_without_the_state_the_rebalance_refills_the_drained_broker(drained):
    """The harness can fail: the same cluster, no state recorded."""
    _, d1, _ = drained
    assert counts(applied(d1, make_plan(problem(d1), Params("rebalance"))))[1] >= 9


def test_another_drain_sends_nothing_to_a_broker_in_maintenance_and_a_follow_up_drain_may_name_it(drained):
    _, d1, _ = drained
    res = make_plan(problem(d1, [state(1, "drained")]), Params("drain", [2]))
    d2 = applied(d1, res)
    assert counts(d2)[1] == 0 and counts(d2)[2] == 0
    # a replica appeared on broker 1 after its drain: the follow-up drain names it and moves it off
    late = copy.deepcopy(d1)
    late["topics"].append({"name": "late", "partitions": [{"replicas": [1, 2]}, {"replicas": [1]}]})
    again = applied(late, make_plan(problem(late, [state(1, "drained")]), Params("drain", [1])))
    assert counts(again)[1] == 0


def test_a_return_right_after_the_drain_reverses_it_exactly(drained):
    d0, d1, moves = drained
    res = make_plan(problem(d1, [state(1, "drained")]), Params("return", [1], undo=moves))
    assert res.returned.reversed == res.returned.drain_moves == 11 and res.returned.balanced == 0
    d2 = applied(d1, res)
    assert d2 == d0   # every list as before the drain, in its order: broker 1 leads where it led


def test_a_return_balances_onto_the_broker_where_the_drain_cannot_be_reversed(drained):
    _, d1, moves = drained
    for balanced_only in (True, False):
        res = make_plan(problem(d1, [state(1, "drained")]), Params("return", [1], undo=() if balanced_only
                                                                   else moves[:4]))
        d2 = applied(d1, res)
        c = counts(d2)
        assert c[1] == 11 and all(c[x] >= 11 for x in range(2, 7)), c   # its share; no source below the floor
        before = {(t["name"], p): part["replicas"] for t in d1["topics"] for p, part in enumerate(t["partitions"])}
        for t in d2["topics"]:
            for p, part in enumerate(t["partitions"]):
                old = before[(t["name"], p)]
                assert set(part["replicas"]) - set(old) <= {1}, (t["name"], p, old, part["replicas"])
                assert racks_of(part["replicas"]) >= min(len(old), 3, racks_of(old))
        assert res.returned.reversed == (0 if balanced_only else 4)
        assert res.returned.balanced == 11 - res.returned.reversed
        # broker 1 leads again: its share of preferred leaderships comes back with the moves
        assert sum(1 for t in d2["topics"] for part in t["partitions"] if part["replicas"][0] == 1) >= 3


def test_a_return_refuses_what_it_cannot_do(drained):
    _, d1, moves = drained
    for maint, brokers, message in [
        ([], [1], "broker 1 is not in maintenance"),
        ([state(1, "draining")], [1], "broker 1 is draining, not drained"),
        ([state(1, "restarting")], [1], "broker 1 is restarting, not drained"),
        ([state(1, "drained")], [9], r"unknown broker\(s\) \[9\]"),
    ]:
        with pytest.raises(BadInput, match=message):
            make_plan(problem(d1, maint), Params("return", brokers, undo=moves))
    down = copy.deepcopy(d1)
    down["brokers"] = [x for x in down["brokers"] if x["id"] != 1]   # stopped, empty: not in the snapshot at all
    with pytest.raises(BadInput, match=r"broker\(s\) \[1\] are not registered"):
        make_plan(problem(down, [state(1, "drained")]), Params("return", [1], undo=moves))
    dead = copy.deepcopy(d1)
    dead["brokers"][0]["alive"] = False
    with pytest.raises(BadInput, match=r"broker\(s\) \[1\] are not registered"):
        make_plan(problem(dead, [state(1, "drained")]), Params("return", [1], undo=moves))


def test_two_brokers_return_together_each_to_its_share():
    d0 = desc()
    res = make_plan(problem(d0), Params("drain", [1, 2]))
    d1 = applied(d0, res)
    ret = make_plan(problem(d1, [state(1, "drained"), state(2, "drained")]),
                    Params("return", [1, 2], undo=drain_moves(res)))
    d2 = applied(d1, ret)
    assert counts(d2) == dict.fromkeys(range(1, 7), 11)
    assert d2 == d0   # both brokers' replicas back where they were, leaders included
