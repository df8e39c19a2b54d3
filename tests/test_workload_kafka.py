"""The live workload (planner.sandbox.workload) on real Apache Kafka 3.9 brokers: the harness can fail.

One 4-broker cluster for the module. The unprotected case (the seed incident: broker 1, the only replica of
an RF=1 partition, killed with no plan applied) must be detected as a loss of availability; the protected
case (the same kill after a drain of broker 1 was applied, traffic flowing throughout) must come out clean;
an unclean election must be detected as a loss of acknowledged messages. Expectations are checked against
Kafka itself (log-end offsets read from the leaders) and the sandbox's own timings, not against what the
workload computed.
"""

from __future__ import annotations

import json
import os
import time

import pytest
from apply_support import Checker
from kafka_support import REAL, Real
from waiting import poll

from planner import api, cli
from planner.sandbox import Sandbox
from planner.sandbox.workload import Workload

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def real(kafka_jars, zk_server, tmp_path_factory):
    brokers = [{"id": i, "rack": f"r{(i - 1) % 2 + 1}"} for i in range(1, 5)]
    sb = Sandbox.up(tmp_path_factory.mktemp("kafka-workload") / "sb", cluster={"brokers": brokers, "topics": []},
                    zk=f"{zk_server.connect_string}/workload{os.getpid()}", engine="kafka", timeout=180, **REAL)
    r = Real(sb)
    try:
        yield r
    finally:
        r.close()
        sb.down()


@pytest.fixture
def cluster(real):
    yield real
    real.restore()


def seed_topics(r: Real, prefix: str) -> list[str]:
    """The seed incident's shape: an RF=1 topic with a partition on broker 1, an RF=3 min-ISR-2 topic."""
    r.topic(f"{prefix}-rf1", [1], [2])
    r.topic(f"{prefix}-orders", [1, 2, 3], [2, 3, 4], [3, 4, 1], [4, 1, 2], min_insync_replicas="2")
    return [f"{prefix}-rf1", f"{prefix}-orders"]


def written(r: Real, report: dict) -> dict[tuple[str, int], int]:
    """Records in each partition since the workload started, per Kafka (log-end offset - start offset)."""
    parts = [(x["topic"], x["partition"]) for x in report["per_partition"]]
    ends = r.sb.log_end_offsets(parts)
    return {(x["topic"], x["partition"]): ends[(x["topic"], x["partition"])] - x["start_offset"]
            for x in report["per_partition"]}


def test_unprotected_kill_of_the_rf1_leader_is_a_loss_of_availability(cluster):
    r = cluster
    topics = seed_topics(r, "bare")
    with Workload(r.sb, topics=topics, rate=100, delivery_timeout=5) as w:
        poll(lambda: w.summary()["acked"] >= 100, 60, "traffic acknowledged")
        killed_at = time.time()
        w.mark("kill broker 1")
        kill = r.sb.kill([1])
        poll(lambda: w.summary()["errors"], 60, "a failed send")
        restart_at = time.time()
        r.sb.start([1])
        r.sb.wait_settled(90)
        poll(lambda: not w.summary()["offline_now"], 30, "every partition online again")
    report = w.report()
    off = [i for i in report["intervals"] if i["kind"] == "offline" and i["topic"] == "bare-rf1"]
    assert [(i["partition"], i["cause"]) for i in off] == [(0, "leader 1 is not registered")]
    # Broker 1's session expired `controller_reacted_s` after the kill; the partition was back after the restart.
    assert killed_at < off[0]["start"] <= killed_at + kill["controller_reacted_s"] + 1
    assert restart_at < off[0]["end"] < time.time()
    assert off[0]["end_exact"] and not off[0]["open_at_stop"]
    # The sends to bare-rf1-0 that waited out the delivery timeout failed, and were counted as failures
    # (others may have too: acks=all waits for broker 1 as a follower until its session expires, and the
    # producer's epoch bump after an expired batch fails what it had in flight).
    assert report["producer"]["errors"].get("KafkaTimeoutError", 0) > 0
    failed = {(x["topic"], x["partition"]): x["failed"] for x in report["per_partition"]}
    assert failed[("bare-rf1", 0)] > 0
    assert report["verdict"]["availability"] is False
    assert any("offline intervals" in p for p in report["verdict"]["problems"])
    # Nothing acknowledged was lost (broker 1 came back with its log), and the count agrees with Kafka's log.
    assert report["verdict"]["integrity"], report["verdict"]["problems"]
    assert report["audit"]["lost"] == 0 and report["audit"]["duplicated"] == 0
    in_log = written(r, report)
    for x in report["per_partition"]:
        key = (x["topic"], x["partition"])
        assert in_log[key] >= x["acked"] > 0, key
    assert sum(in_log.values()) == report["producer"]["acked"] + report["audit"]["unacknowledged_but_written"]
    assert report["audit"]["read"] == sum(in_log.values())


def test_protected_drain_then_kill_comes_out_clean(cluster, tmp_path):
    r = cluster
    topics = seed_topics(r, "safe")
    run = api.RunFolder(tmp_path / "run")
    with Workload(r.sb, topics=topics, rate=100, delivery_timeout=10) as w:
        poll(lambda: w.summary()["acked"] >= 100, 60, "traffic acknowledged")
        run.root.mkdir(parents=True)
        (run.root / "logdirs.json").write_text(json.dumps(r.sb.log_dirs()))
        api.snapshot(api.SnapshotRequest(zk=r.sb.connect_string, out=run.snapshot, sizes=run.root / "logdirs.json"))
        api.plan_drain(api.DrainRequest(snapshot=run.snapshot, out=run.plan, brokers=(1,)))
        w.mark("apply")
        applied = api.apply(api.ApplyRequest(zk=r.sb.connect_string, plan=run.plan, throttle=50_000_000,
                                             poll=0.2, wait=120))
        assert applied.state == "completed"
        assert api.verify(api.VerifyRequest(zk=r.sb.connect_string, plan=run.plan, wait=60, poll=0.2)).converged
        w.mark("kill broker 1")
        r.sb.kill([1])
        acked = w.summary()["acked"]
        poll(lambda: w.summary()["acked"] >= acked + 300, 60, "traffic after the kill")
    report = w.report()
    assert report["verdict"]["integrity"] and report["verdict"]["availability"], report["verdict"]["problems"]
    assert report["intervals"] == [] and report["producer"]["failed"] == 0
    assert [m["label"] for m in report["marks"]] == ["apply", "kill broker 1"]
    in_log = written(r, report)
    assert sum(in_log.values()) == report["producer"]["acked"] == report["audit"]["read"]
    check = Checker(r.zk)
    assert all(1 not in check.replicas(t, p) for t, p in in_log)
    assert check.throttles() == {} and check.lock_holders() == []


def test_an_unclean_election_is_detected_as_lost_messages(cluster):
    """The integrity side can fail too: acknowledged messages truncated away by an unclean election."""
    r = cluster
    t = r.topic("unclean", [1, 2], unclean_leader_election_enable="true")
    with Workload(r.sb, topics=[t], rate=50, delivery_timeout=10) as w:
        poll(lambda: w.summary()["acked"] >= 20, 60, "traffic acknowledged")
        r.sb.stop([2])   # ISR shrinks to [1]: what follows is acknowledged by broker 1 alone
        acked = w.summary()["acked"]
        poll(lambda: w.summary()["acked"] >= acked + 50, 60, "traffic acknowledged by broker 1 alone")
        r.sb.kill([1])
        r.sb.start([2])   # the only live replica, out of the ISR: elected uncleanly, without those messages
        poll(lambda: r.lead_isr(t, 0)[0] == 2, 60, "the unclean election")
        r.sb.start([1])   # broker 1 truncates its log to the new leader's
        r.sb.wait_settled(90)
        acked = w.summary()["acked"]
        poll(lambda: w.summary()["acked"] >= acked + 20, 60, "traffic after the election")
    report = w.report()
    assert report["audit"]["lost"] >= 50 and report["verdict"]["integrity"] is False
    assert report["audit"]["lost_examples"][0].startswith("unclean-0 seq ")
    assert any("acknowledged messages lost" in p for p in report["verdict"]["problems"])


def test_workload_bad_input_on_a_real_sandbox(real, tmp_path, capsys):
    before = sorted(p.name for p in real.sb.dir.iterdir())
    capsys.readouterr()
    rc = cli.main(["sandbox", "workload", "--dir", str(real.sb.dir), "--topics", "no-such-topic", "--duration", "1"])
    out, err = capsys.readouterr()
    assert rc == 2 and "topic no-such-topic does not exist in the sandbox" in err, err
    assert len([x for x in err.splitlines() if "error:" in x]) == 1 and "Traceback" not in err + out
    assert sorted(p.name for p in real.sb.dir.iterdir()) == before


def test_workload_cli_writes_its_report_and_exits_by_its_verdict(real, tmp_path, capsys):
    t = real.topic("cli-wl", [2, 3], [3, 4])
    report = tmp_path / "r.json"
    rc = cli.main(["sandbox", "workload", "--dir", str(real.sb.dir), "--topics", t, "--rate", "50", "--duration",
                   "3", "--every", "1", "--report", str(report)])
    out = capsys.readouterr().out
    assert rc == 0, out
    doc = json.loads(report.read_text())
    assert doc["topics"] == [t] and doc["partitions"] == 2 and doc["verdict"]["integrity"]
    # 3 s at 50 msg/s: about 150 sends, each of them in the log
    assert 100 <= doc["producer"]["sent"] <= 160 and doc["producer"]["acked"] == doc["producer"]["sent"]
    assert sum(written(real, doc).values()) == doc["producer"]["acked"]
    assert out.count(" sent ") >= 2 and f"ok: report {report}" in out
    assert cli.main(["sandbox", "workload", "--dir", str(real.sb.dir), "--topics", t, "--duration", "1",
                     "--report", str(report)]) == 2   # never replaced


def test_a_leader_missing_from_the_broker_list_does_not_stop_the_producer(real):
    """kafka-python 3.0.12's sender raises UnknownBrokerIdError out of its loop when a partition names a leader
    that the broker list no longer has (a broker leaving): every later send then stays unresolved. Here the
    sender's connect is asked for broker 99, as that loop asks for the departed leader: the workload's producer
    must treat it as not ready and keep sending (without the work-around the call raises)."""
    t = real.topic("unknown-leader", [2, 3])
    with Workload(real.sb, topics=[t], rate=50, delivery_timeout=10) as w:
        poll(lambda: w.summary()["acked"] >= 10, 60, "traffic acknowledged")
        w._producer._sender._client.maybe_connect(99, wakeup=False)
        acked = w.summary()["acked"]
        poll(lambda: w.summary()["acked"] >= acked + 20, 60, "traffic after the unknown leader")
    report = w.report()
    assert report["producer"]["unknown_leader_skips"] == 1 and report["verdict"]["integrity"], report["verdict"]
