"""apply / verify on real Apache Kafka 3.9 brokers (the `kafka` sandbox engine).

One 4-broker cluster for the module; each test creates its own topics and drains broker 1 (the first test
leaves it empty, so the second one's plan holds only its own topics). Expected outcomes are stated by hand
and read back with the independent checker; data is checked through Kafka itself (log-end offsets read
from the partitions' leaders before and after).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from apply_support import Checker, poll

from planner import api
from planner import zk as zkmod
from planner.sandbox import Sandbox
from planner.sandbox.kafka_engine import create_topic

pytestmark = pytest.mark.kafka
ROOT = Path(__file__).resolve().parents[1]
REAL = dict(session_timeout=6, shutdown_retries=2, shutdown_retry_interval=0.5, auto_rebalance=False)


@pytest.fixture(scope="module")
def real(kafka_jars, zk_server, tmp_path_factory):
    brokers = [{"id": i, "rack": f"r{(i - 1) % 2 + 1}"} for i in range(1, 5)]
    sb = Sandbox.up(tmp_path_factory.mktemp("kafka-apply") / "sb", cluster={"brokers": brokers, "topics": []},
                    zk=f"{zk_server.connect_string}/apply{os.getpid()}", engine="kafka", timeout=180, **REAL)
    zk = zkmod.connect(sb.connect_string)
    try:
        yield sb, zk, Checker(zk)
    finally:
        zk.stop()
        zk.close()
        sb.down()


def topics(zk, sb, spec: dict[str, list[list[int]]], config: dict[str, dict[str, str]] | None = None) -> None:
    for name, assignment in spec.items():
        create_topic(zk, name, assignment, (config or {}).get(name, {}))
    sb.wait_settled(90)


def plan_drain(run: api.RunFolder, sb: Sandbox, **kw) -> api.PlanOutcome:
    sizes = run.root / "logdirs.json"
    run.root.mkdir(parents=True, exist_ok=True)
    sizes.write_text(json.dumps(sb.log_dirs()))
    api.snapshot(api.SnapshotRequest(zk=sb.connect_string, out=run.snapshot, sizes=sizes))
    return api.plan_drain(api.DrainRequest(snapshot=run.snapshot, out=run.plan, brokers=(1,), **kw))


def test_seed_scenario_drain_broker_1_then_kill_it_and_nothing_goes_offline(real, tmp_path):
    sb, zk, check = real
    topics(zk, sb, {"seed-rf1": [[1], [2]], "seed-orders": [[1, 2, 3], [2, 3, 1], [3, 1, 2]], "seed-pairs": [[1, 4],
                                                                                                        [4, 2]]},
           {"seed-orders": {"min.insync.replicas": "2"}})
    parts = [("seed-rf1", 0), ("seed-rf1", 1), ("seed-orders", 0), ("seed-orders", 1), ("seed-orders", 2),
             ("seed-pairs", 0), ("seed-pairs", 1)]
    sb.produce({p: 300_000 for p in parts})
    offsets = sb.log_end_offsets(parts)
    assert all(o > 0 for o in offsets.values())
    run = api.RunFolder(tmp_path / "run")
    plan = plan_drain(run, sb)
    assert {(m.topic, m.partition) for m in plan.plan.moves if m.kind == "data"} == {
        ("seed-rf1", 0), ("seed-orders", 0), ("seed-orders", 1), ("seed-orders", 2), ("seed-pairs", 0)}
    applied = api.apply(api.ApplyRequest(zk=sb.connect_string, plan=run.plan, throttle=50_000_000, poll=0.5,
                                         wait=120))
    assert applied.state == "completed" and applied.batches_done == applied.batches_total
    verified = api.verify(api.VerifyRequest(zk=sb.connect_string, plan=run.plan, wait=60, poll=0.5))
    assert verified.converged and verified.report["leaders_on_preferred"]["count"] == len(plan.plan.moves)
    for m in plan.plan.moves:
        assert check.replicas(m.topic, m.partition) == list(m.to_replicas)
        assert 1 not in check.replicas(m.topic, m.partition)
    assert check.throttles() == {} and check.lock_holders() == []
    # The incident: broker 1 goes away. Its RF=1 partition had moved; nothing is offline.
    sb.kill([1])
    for t, p in parts:
        st = check.state(t, p)
        assert st["leader"] != -1 and st["leader"] != 1, (t, p, st)
    assert sb.log_end_offsets(parts) == offsets, "every record is still there"
    sb.start([1])
    sb.wait_settled(90)


def test_throttled_multi_batch_drain_with_real_data_killed_and_resumed(real, tmp_path):
    sb, zk, check = real
    topics(zk, sb, {"bulk": [[1, 2], [2, 1], [1, 3], [3, 1]]})
    parts = [("bulk", p) for p in range(4)]
    sb.produce({p: 2_000_000 for p in parts})
    offsets = sb.log_end_offsets(parts)
    run = api.RunFolder(tmp_path / "run")
    plan = plan_drain(run, sb, max_concurrent_per_broker=1)
    doc = json.loads((run.plan / "plan.json").read_text())
    data_batches = [b for b in plan.plan.batches if b.kind == "data"]
    assert len(data_batches) == 4 and plan.plan.batches[0].kind == "leadership"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    admin = zk.exists("/admin").cversion  # +1 per create and per delete of a child: 2 per reassignment or election
    proc = subprocess.Popen([sys.executable, "-m", "planner.cli", "apply", "--zk", sb.connect_string, "--plan",
                             str(run.plan), "--throttle", "1000000", "--poll", "0.2", "--connect-timeout", "1"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        poll(lambda: check.unit_states(doc)[2:3] == ["submitted"], timeout=120, what="the second data batch in flight")
        # Kafka's tool's throttles, on the real brokers' config znodes, while a batch copies.
        thr = check.throttles()
        moving = plan.plan.batches[2].partitions[0][1]
        assert f"{moving}:1" in thr["topics/bulk"]["leader.replication.throttled.replicas"].split(",")
        assert thr["brokers/1"] == {"leader.replication.throttled.rate": "1000000",
                                    "follower.replication.throttled.rate": "1000000"}
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert check.unit_states(doc)[:3] == ["completed", "completed", "submitted"]
    applied = api.apply(api.ApplyRequest(zk=sb.connect_string, plan=run.plan, throttle=20_000_000, poll=0.2,
                                         lock_wait=30, wait=180))
    assert applied.state == "completed" and applied.resumed
    assert applied.batches_submitted == 2  # batches 3 and 4; batch 2 was already submitted and is not again
    assert zk.exists("/admin").cversion - admin == 2 * (5 + 1)  # 5 batches and 1 election, each created once
    verified = api.verify(api.VerifyRequest(zk=sb.connect_string, plan=run.plan, wait=60, poll=0.5))
    assert verified.converged
    for m in plan.plan.moves:
        assert check.replicas(m.topic, m.partition) == list(m.to_replicas)
    assert check.throttles() == {} and check.lock_holders() == []
    assert not check.exists("/admin/reassign_partitions")
    assert sb.log_end_offsets(parts) == offsets
    for t, p in parts:
        st = check.state(t, p)
        assert sorted(st["isr"]) == sorted(check.replicas(t, p)) and st["leader"] in check.replicas(t, p)


def test_a_drained_broker_stays_drained_until_its_return_brings_it_back(real, tmp_path):
    """Issue 17 on real brokers: the drain's apply marks broker 1 draining, its verify drained; a rebalance made
    then gives it nothing; the return reverses the drain's moves (lists and leaders as before, data intact) and
    ends its maintenance. Broker 1 may already be drained by the tests above: then this drain follows up."""
    sb, zk, check = real
    topics(zk, sb, {"maint-a": [[1, 2], [2, 3], [4, 1], [1, 4]], "maint-rf1": [[1], [3]]},   # racks r1: 1, 3; r2: 2, 4
           {"maint-a": {"min.insync.replicas": "2"}})
    parts = [("maint-a", p) for p in range(4)] + [("maint-rf1", 0), ("maint-rf1", 1)]
    sb.produce({p: 200_000 for p in parts})
    offsets = sb.log_end_offsets(parts)
    before = {p: check.replicas(*p) for p in parts}
    run = api.RunFolder(tmp_path / "drain")
    drain = plan_drain(run, sb)
    api.apply(api.ApplyRequest(zk=sb.connect_string, plan=run.plan, throttle=50_000_000, poll=0.2, wait=120,
                               reason="rehearsal"))
    state = check.json("/kplan/maintenance/1")
    assert (state["state"], state["plan_id"], state["reason"]) == ("draining", drain.plan_id, "rehearsal")
    api.verify(api.VerifyRequest(zk=sb.connect_string, plan=run.plan, wait=60, poll=0.2))
    assert check.json("/kplan/maintenance/1")["state"] == "drained"
    assert not [p for p in parts if 1 in check.replicas(*p)]

    nightly = api.RunFolder(tmp_path / "nightly")
    api.snapshot(api.SnapshotRequest(zk=sb.connect_string, out=nightly.snapshot))
    rebalance = api.plan_rebalance(api.RebalanceRequest(snapshot=nightly.snapshot, out=nightly.plan)).plan
    assert list(rebalance.summary["left_out_brokers"]) == [1]
    assert not [m for m in rebalance.moves if 1 in set(m.to_replicas) - set(m.from_replicas)]

    back = api.RunFolder(tmp_path / "back")
    back.root.mkdir(parents=True)
    (back.root / "logdirs.json").write_text(json.dumps(sb.log_dirs()))
    api.snapshot(api.SnapshotRequest(zk=sb.connect_string, out=back.snapshot, sizes=back.root / "logdirs.json"))
    ret = api.plan_return(api.ReturnRequest(snapshot=back.snapshot, out=back.plan, brokers=(1,))).plan
    assert list(ret.parameters["drain_plans"]) == [drain.plan_id]
    assert all(set(m.to_replicas) - set(m.from_replicas) <= {1} for m in ret.moves)
    applied = api.apply(api.ApplyRequest(zk=sb.connect_string, plan=back.plan, throttle=50_000_000, poll=0.2,
                                         wait=180))
    assert applied.state == "completed" and check.json("/kplan/maintenance/1")["state"] == "returning"
    verified = api.verify(api.VerifyRequest(zk=sb.connect_string, plan=back.plan, wait=90, poll=0.2))
    assert verified.converged and verified.report["maintenance"]["set"] == {"1": None}
    assert not check.exists("/kplan/maintenance/1")
    for p in parts:   # the drain undone: lists as before it, leaders on their first replica, data intact
        assert check.replicas(*p) == before[p], (p, check.replicas(*p), before[p])
        st = check.state(*p)
        assert st["leader"] == before[p][0] and sorted(st["isr"]) == sorted(before[p]), (p, st)
    assert sb.log_end_offsets(parts) == offsets
    assert check.throttles() == {} and check.lock_holders() == []


def _hosted_by(zk, b: int) -> dict[tuple[str, int], list[int]]:
    """Every partition whose replicas name broker b or whose leader is b, read raw from ZooKeeper."""
    out = {}
    for t in zk.get_children("/brokers/topics"):
        for p, reps in json.loads(zk.get(f"/brokers/topics/{t}")[0])["partitions"].items():
            leader = json.loads(zk.get(f"/brokers/topics/{t}/partitions/{p}/state")[0])["leader"]
            if b in reps or leader == b:
                out[(t, int(p))] = reps
    return out


def test_a_topic_created_after_the_snapshot_by_kafkas_own_tool_keeps_the_drain_open(real, kafka_jars, tmp_path,
                                                                                     capsys):
    """Issue 19 item 1 on real brokers: kafka-topics.sh creates topics on broker 4 after the snapshot; apply and
    verify of the drain of 4 exit 1 naming them; the follow-up drain empties 4 with every record kept."""
    from planner import cli
    from planner.kafka import tools

    sb, zk, check = real
    if zk.exists("/kplan/maintenance/1"):   # drained by the tests above: back in service, to take replicas
        api.clear_maintenance(api.ClearRequest(zk=sb.connect_string, brokers=(1,), reason="test: back in service"))
    topics(zk, sb, {"early": [[4, 1], [2, 4], [3, 2]]})
    run, run2 = api.RunFolder(tmp_path / "run"), api.RunFolder(tmp_path / "run2")
    run.root.mkdir()
    (run.root / "logdirs.json").write_text(json.dumps(sb.log_dirs()))
    assert cli.main(["snapshot", "--zk", sb.connect_string, "--out", str(run.snapshot), "--sizes",
                     str(run.root / "logdirs.json")]) == 0
    tools.create_topic(kafka_jars, sb.bootstrap_servers, "late", [[4, 3], [2, 4]])
    tools.create_topic(kafka_jars, sb.bootstrap_servers, "late-rf1", [[4]], {"min.insync.replicas": "1"})
    sb.wait_settled(90)
    late = {("late", 0): [4, 3], ("late", 1): [2, 4], ("late-rf1", 0): [4]}
    assert {k: check.replicas(*k) for k in late} == late   # Kafka kept the assignment it was given
    parts = [*late, ("early", 0), ("early", 1)]
    sb.produce({p: 200_000 for p in parts})
    offsets = sb.log_end_offsets(parts)
    assert cli.main(["plan", "drain", "--snapshot", str(run.snapshot), "--brokers", "4", "--out", str(run.plan),
                     "--quiet"]) == 0
    capsys.readouterr()
    assert cli.main(["apply", "--zk", sb.connect_string, "--plan", str(run.plan), "--throttle", "50MB",
                     "--poll", "0.5"]) == 1
    err = capsys.readouterr().err
    assert "the drain is not complete: broker(s) 4 still host 3 partitions" in err
    assert "late-rf1-0 replicas [4] leader 4 (topic created since the snapshot" in err
    assert cli.main(["verify", "--zk", sb.connect_string, "--plan", str(run.plan), "--timeout", "60"]) == 1
    err = capsys.readouterr().err
    assert "converged, but the drain is not complete" in err and "kplan plan drain --snapshot S2 --brokers 4" in err
    report = json.loads(run.report.read_text())
    assert (report["converged"], report["plan_converged"], report["intent"]["holds"]) == (False, True, False)
    assert {(r["topic"], r["partition"]) for r in report["intent"]["remaining"]} == set(late)
    assert _hosted_by(zk, 4) == late                      # raw: exactly the late partitions are still on 4
    assert check.throttles() == {} and check.lock_holders() == []

    assert cli.main(["snapshot", "--zk", sb.connect_string, "--out", str(run2.snapshot)]) == 0
    assert cli.main(["plan", "drain", "--snapshot", str(run2.snapshot), "--brokers", "4", "--out", str(run2.plan),
                     "--quiet"]) == 0
    assert cli.main(["apply", "--zk", sb.connect_string, "--plan", str(run2.plan), "--throttle", "50MB",
                     "--poll", "0.5"]) == 0
    assert cli.main(["verify", "--zk", sb.connect_string, "--plan", str(run2.plan), "--timeout", "60"]) == 0
    assert json.loads(run2.report.read_text())["intent"]["holds"] is True
    assert _hosted_by(zk, 4) == {}
    assert check.throttles() == {} and check.lock_holders() == []
    assert sb.log_end_offsets(parts) == offsets, "every record is still there"
