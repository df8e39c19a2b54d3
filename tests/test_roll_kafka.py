"""The restart roll on real Apache Kafka 3.9 brokers that the sandbox really stops and starts, with a producer
(acks=all, idempotent) and a consumer running the whole time (planner.sandbox.workload), on a cluster of the
seed incident's shape (RF=1 partitions on every broker, RF=3 and RF=2 topics with min ISR 2).

One 4-broker cluster for the module. First the harness is shown to fail: restarting broker 1 as it is, with
no plan, takes its RF=1 partition offline and the RF=2 pair under min ISR (the incident). Then the rolling
restart of every broker with the restart plan: 0 partitions ever offline or under min ISR (the workload's
watcher, and ZooKeeper's own transaction log: every state the controller wrote), 0 messages lost or
duplicated, every send acknowledged, preferred leaders as before, the temporary replicas gone.
"""

from __future__ import annotations

import json
import os

import pytest
from apply_support import Checker
from kafka_support import REAL, Real
from roll_support import History, assignment, leaders, log_dir
from waiting import poll

from planner import api
from planner.sandbox import Sandbox
from planner.sandbox.workload import Workload

pytestmark = pytest.mark.kafka

RF1 = "rf1"
TOPICS = [RF1, "orders", "pairs"]


@pytest.fixture(scope="module")
def real(kafka_jars, zk_server, tmp_path_factory):
    brokers = [{"id": i, "rack": f"r{(i - 1) % 2 + 1}"} for i in range(1, 5)]
    sb = Sandbox.up(tmp_path_factory.mktemp("kafka-roll") / "sb", cluster={"brokers": brokers, "topics": []},
                    zk=f"{zk_server.connect_string}/roll{os.getpid()}", engine="kafka", timeout=180, **REAL)
    r = Real(sb)
    try:
        r.topic(RF1, [1], [2], [3], [4])
        r.topic("orders", [1, 2, 3], [2, 3, 4], [3, 4, 1], [4, 1, 2], min_insync_replicas="2")
        r.topic("pairs", [1, 3], [2, 4], min_insync_replicas="2")
        yield r
    finally:
        r.close()
        sb.down()


def history(r: Real, zk_server) -> History:
    return History(r.zk, log_dir(zk_server), "/" + r.sb.connect_string.split("/", 1)[1])


def test_restarting_a_broker_without_a_plan_is_the_incident(real, zk_server):
    r = real
    h = history(r, zk_server).begin()
    with Workload(r.sb, topics=TOPICS, rate=100, delivery_timeout=5) as w:
        poll(lambda: w.summary()["acked"] >= 100, 60, "traffic acknowledged")
        w.mark("restart broker 1, no plan")
        r.sb.stop([1])
        try:
            poll(lambda: w.summary()["errors"], 60, "a failed send")
        finally:   # broker 1 back even when the wait fails: the module's next test needs every broker
            r.sb.start([1])
            r.sb.wait_settled(90)
        poll(lambda: not w.summary()["offline_now"], 30, "every partition online again")
    intervals = h.end()
    report = w.report()
    assert report["verdict"]["availability"] is False
    off = {(i["topic"], i["partition"]) for i in report["intervals"] if i["kind"] == "offline"}
    under = {(i["topic"], i["partition"]) for i in report["intervals"] if i["kind"] == "under_min_isr"}
    assert off == {(RF1, 0)} and under == {("pairs", 0)}
    # ZooKeeper's log says the same, write by write
    assert {(i.kind, i.partition) for i in intervals} == {("offline", "rf1-0"), ("under_min_isr", "pairs-0")}
    assert report["verdict"]["integrity"], report["verdict"]["problems"]   # broker 1 came back with its log


def test_rolling_restart_of_every_broker_with_the_plan_loses_nothing(real, zk_server, tmp_path):
    r = real
    before = assignment(r.zk)
    # leadership where the preferred replicas say (the previous test's restart left broker 1 leading nothing,
    # and automatic leader rebalancing is off here): as Kafka's kafka-leader-election tool asks for it
    off = [{"topic": t, "partition": p} for (t, p), lead in leaders(r.zk).items() if lead != before[(t, p)][0]]
    if off:
        r.zk.create("/admin/preferred_replica_election", json.dumps({"version": 1, "partitions": off}).encode())
        poll(lambda: not r.zk.exists("/admin/preferred_replica_election"), 60, "the preferred election")
        poll(lambda: all(lead == before[k][0] for k, lead in leaders(r.zk).items()), 60, "preferred leaders")
    lead_before = leaders(r.zk)
    run = api.RunFolder(tmp_path / "run")
    h = history(r, zk_server).begin()
    with Workload(r.sb, topics=TOPICS, rate=100, delivery_timeout=30) as w:
        poll(lambda: w.summary()["acked"] >= 100, 60, "traffic acknowledged")
        api.snapshot(api.SnapshotRequest(zk=r.sb.connect_string, out=run.snapshot))
        plan = api.plan_restart(api.RestartRequest(snapshot=run.snapshot, out=run.plan, brokers=(1, 2, 3, 4)))
        assert plan.plan.section("protection")["reasons"] == {"rf1": 4, "shrunk-isr": 0, "min-isr": 2}
        w.mark("roll")

        def restart(b: int) -> None:
            w.mark(f"restart broker {b}")
            r.sb.stop([b])
            r.sb.start([b])

        out = api.roll(api.RollRequest(zk=r.sb.connect_string, plan=run.plan, throttle=50_000_000, poll=0.2,
                                       restart_timeout=120, gate_timeout=120), restart=restart)
        assert (out.state, out.steps_done, out.cannot_move) == ("completed", 4, ())
        acked = w.summary()["acked"]
        poll(lambda: w.summary()["acked"] >= acked + 100, 60, "traffic after the roll")
    intervals = h.end()
    report = w.report()
    assert report["verdict"]["integrity"] and report["verdict"]["availability"], report["verdict"]["problems"]
    assert report["intervals"] == [] and intervals == [], (report["intervals"], intervals)
    assert report["producer"]["failed"] == 0 and report["audit"]["lost"] == report["audit"]["duplicated"] == 0
    assert [m["label"] for m in report["marks"]] == ["roll"] + [f"restart broker {b}" for b in
                                                                plan.plan.section("roll")["order"]]
    # every broker really restarted (left and registered again), one at a time, while it was `restarting`
    regs = [(b, what) for _z, kind, b, what in h.events if kind == "registration"]
    assert regs == [x for b in plan.plan.section("roll")["order"] for x in ((b, "left"), (b, "registered"))]
    # everything as before: lists (the temporary replicas gone), preferred leaders, full ISRs, nothing left
    Checker(r.zk).assert_nothing_lost({k: len(v) for k, v in before.items()}, before)
    assert leaders(r.zk) == lead_before
    assert not r.zk.exists("/kplan/maintenance") or r.zk.get_children("/kplan/maintenance") == []
