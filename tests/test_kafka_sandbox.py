"""The `kafka` sandbox engine: real Apache Kafka 3.9 broker JVMs on the session's real ZooKeeper.

One 4-broker cluster for the whole module (fresh topics per test, every broker restarted between tests);
the lifecycle tests that need their own processes start small clusters of their own. Expected states are
worked out by hand from Kafka's controller (KafkaController.doControlledShutdown, onBrokerFailure,
PartitionStateMachine), never taken from the code under test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from planner import api, cli
from planner.errors import BadInput
from planner.kafka.broker import find_brokers
from planner.kafka.tools import reassign, verify_status
from planner.sandbox import Sandbox
from planner.snapshot import take_snapshot
from planner.spark.session import session as spark_session
from planner.zkserver import pid_alive
from tests.kafka_support import REAL, Real, poll, racks

pytestmark = pytest.mark.kafka
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cluster(kafka_jars, zk_server, tmp_path_factory):
    sb = Sandbox.up(tmp_path_factory.mktemp("kafka") / "sb", cluster={"brokers": racks(4), "topics": []},
                    zk=f"{zk_server.connect_string}/kafka{os.getpid()}", engine="kafka", timeout=120, **REAL)
    real = Real(sb)
    yield real
    real.close()
    sb.down()


@pytest.fixture
def real(cluster):
    yield cluster
    cluster.restore()


# ---------------------------------------------------------------------------------------------- up
def test_up_runs_one_jvm_per_broker_with_racks_and_loopback_listeners(real):
    st = real.sb.status()
    pids = real.sb.broker_pids
    assert sorted(pids) == [1, 2, 3, 4] and all(pid_alive(p) for p in pids.values())
    assert st["engine"] == "kafka" and st["controller"]["broker"] in pids
    for b in st["brokers"]:
        cfg = (real.sb.dir / "kafka" / f"broker-{b['id']}" / "server.properties").read_text()
        assert f"broker.id={b['id']}\n" in cfg and f"broker.rack=r{(b['id'] - 1) % 3 + 1}\n" in cfg
        assert f"listeners=PLAINTEXT://127.0.0.1:{b['port']}\n" in cfg
        assert "zookeeper.session.timeout.ms=6000\n" in cfg
        reg = json.loads(real.zk.get(f"/brokers/ids/{b['id']}")[0])
        assert reg["rack"] == f"r{(b['id'] - 1) % 3 + 1}" and reg["endpoints"] == [f"PLAINTEXT://127.0.0.1:{b['port']}"]
    assert real.sb.bootstrap_servers.count("127.0.0.1:") == 4


def test_topics_get_the_exact_assignment_and_the_controller_creates_the_partitions(real):
    real.topic("exact", [3, 1, 2], [2, 4, 1], [4, 3, 2], min_insync_replicas="2")
    assert real.assignment("exact") == {0: [3, 1, 2], 1: [2, 4, 1], 2: [4, 3, 2]}
    # NewPartition -> OnlinePartition: leader = first live replica, ISR = the live replicas, epoch 0
    for p, reps in real.assignment("exact").items():
        s = real.state("exact", p)
        assert (s["leader"], s["isr"], s["leader_epoch"]) == (reps[0], reps, 0)
    cfg = json.loads(real.zk.get("/config/topics/exact")[0])
    assert cfg == {"version": 1, "config": {"min.insync.replicas": "2"}}


def test_produce_reaches_every_replica_and_log_end_offsets_count_the_records(real):
    real.topic("filled", [1, 2], [2, 3])
    written = real.sb.produce({("filled", 0): 100_000, ("filled", 1): 1})
    assert real.sb.log_end_offsets([("filled", 0), ("filled", 1)]) == {("filled", 0): written[("filled", 0)],
                                                                      ("filled", 1): 1}
    real.sb.wait_settled(30)
    sizes = {(b["broker"], p["partition"]): p["size"] for b in real.sb.log_dirs()["brokers"]
             for p in b["logDirs"][0]["partitions"]}
    # both replicas of filled-0 hold the 100,000 payload bytes plus record headers
    assert 100_000 < sizes[(1, "filled-0")] == sizes[(2, "filled-0")] < 110_000


# ------------------------------------------------------------------------------------ seed incident
def test_seed_incident_kill_of_broker_1_as_kplan_risk_predicted(real, tmp_path):
    real.topic("seed-rf1", [1])
    real.topic("seed-wide", [2, 1, 3])
    take_snapshot(real.sb.connect_string, tmp_path / "snap")
    req = api.RiskRequest(snapshot=tmp_path / "snap", out=tmp_path / "risk", drains=((1,),), modes=("failure",))
    outcome = api.risk(req, spark=spark_session("local[2]"), progress=lambda m: None)
    assert outcome.level == "critical"
    rows = {(r["topic"], r["partition"]): r for r in
            pq.read_table(tmp_path / "risk" / "partitions.parquet").to_pylist() if r["scenario_id"] == 0}
    predicted = rows[("seed-rf1", 0)]
    assert (predicted["offline"], predicted["new_leader"], predicted["new_isr"]) == (True, -1, [1])
    assert (rows[("seed-wide", 0)]["new_leader"], rows[("seed-wide", 0)]["new_isr"]) == (2, [2, 3])

    before = real.state("seed-rf1", 0)
    result = real.sb.kill([1])
    s = real.state("seed-rf1", 0)
    assert (s["leader"], s["isr"], s["leader_epoch"]) == (-1, [1], before["leader_epoch"] + 1)
    assert "leader_recovery_state" not in s
    assert s["_mzxid"] > real.ids_pzxid(), "written after broker 1's registration vanished"
    assert real.lead_isr("seed-wide", 0) == (2, [2, 3])
    # the controller can only react once broker 1's ZooKeeper session expired: 6 s after the broker's last
    # heartbeat (sent every 2 s), so at least 4 s after the kill
    assert result["controller_reacted_s"] >= 3.5


# ------------------------------------------------------------------------------- controlled shutdown
def test_controlled_shutdown_moves_leaders_and_rf1_partitions_do_not_hold_it_up(real):
    real.topic("cs-led", [1, 2, 3])
    real.topic("cs-followed", [2, 1, 3])
    real.topic("cs-solo", [1])
    result = real.sb.stop([1])
    left_at = real.ids_pzxid()
    # Kafka 3.9 leaves RF=1 partitions out of the "partitions remaining" (partitionLeadersOnBroker keeps
    # RF > 1 only): the request succeeds at once, and the RF=1 partition goes offline when the broker stops
    assert result["brokers"]["1"] == {"attempts": 1, "succeeded": True, "still_leading": [],
                                      "unclean_shutdown": False}
    led, followed, solo = real.state("cs-led", 0), real.state("cs-followed", 0), real.state("cs-solo", 0)
    assert (led["leader"], led["isr"]) == (2, [2, 3]) and led["_mzxid"] < left_at
    assert (followed["leader"], followed["isr"]) == (2, [2, 3]) and followed["_mzxid"] < left_at
    assert (solo["leader"], solo["isr"]) == (-1, [1]) and solo["_mzxid"] > left_at


def test_failed_controlled_shutdown_retries_then_stops_uncleanly(real):
    real.topic("cs-pair", [1, 4])
    real.sb.kill([4])
    assert real.lead_isr("cs-pair", 0) == (1, [1])
    # every partition (of this module's topics too) that broker 1 leads with no other live replica
    stuck = sorted(f"{t}-{p}" for t in real.zk.get_children("/brokers/topics") for p, reps in real.assignment(t).items()
                   if len(reps) > 1 and set(reps) <= {1, 4} and real.lead_isr(t, p)[0] == 1)
    assert "cs-pair-0" in stuck
    started = time.monotonic()
    result = real.sb.stop([1])
    report = result["brokers"]["1"]
    # no live in-sync replica to take over: each of the 2 attempts answers "partitions remaining"
    assert report == {"attempts": 2, "succeeded": False, "still_leading": stuck, "unclean_shutdown": True}
    assert time.monotonic() - started >= 0.5  # one backoff between the two attempts
    assert real.lead_isr("cs-pair", 0) == (-1, [1])


def test_start_brings_back_the_offline_partition_and_the_isr_fills_again(real):
    real.topic("back-solo", [1])
    real.topic("back-wide", [2, 1, 3])
    real.sb.kill([1])
    assert real.lead_isr("back-solo", 0) == (-1, [1]) and real.lead_isr("back-wide", 0) == (2, [2, 3])
    epochs = real.sb.start([1])["epochs"]
    assert epochs["1"] and real.lead_isr("back-solo", 0) == (1, [1])
    real.sb.wait_settled(60)
    assert real.lead_isr("back-wide", 0) == (2, [2, 3, 1])


# --------------------------------------------------------------------------------- Kafka's own tool
def test_kafka_reassign_tool_executes_our_plan_and_rollback_restores_it(real, tmp_path, kafka_jars):
    real.topic("moves", [1, 2, 3], [2, 1, 4], [3, 4, 1])
    real.sb.produce({("moves", p): 50_000 for p in range(3)})
    real.sb.wait_settled(60)
    take_snapshot(real.sb.connect_string, tmp_path / "snap")
    before = {t: real.assignment(t) for t in real.zk.get_children("/brokers/topics")}
    assert cli.main(["plan", "drain", "--snapshot", str(tmp_path / "snap"), "--brokers", "1",
                     "--out", str(tmp_path / "plan"), "--quiet"]) == 0
    bootstrap = real.sb.bootstrap_servers

    def run(file: Path) -> dict[int, list[int]]:
        entries = json.loads(file.read_text())["partitions"]
        reassign(kafka_jars, bootstrap, file, "execute")
        poll(lambda: set(verify_status(reassign(kafka_jars, bootstrap, file, "verify").stdout).values()) == {"completed"},
             timeout=120, what=f"kafka-reassign-partitions --verify of {file.name}")
        return {(e["topic"], e["partition"]): e["replicas"] for e in entries}

    moved = run(tmp_path / "plan" / "reassignment.json")
    assert moved and all(1 not in reps for reps in moved.values())
    for (t, p), reps in moved.items():
        assert real.assignment(t)[p] == reps
    assert not any(1 in reps for t in before for reps in real.assignment(t).values())
    restored = run(tmp_path / "plan" / "rollback.json")
    assert {t: real.assignment(t) for t in before} == before
    assert restored.keys() == moved.keys()
    assert real.sb.log_end_offsets([("moves", p) for p in range(3)]) == {("moves", p): 2 for p in range(3)}


# --------------------------------------------------------------------------------------------- CLI
def test_cli_on_the_real_engine(real, capsys):
    d = str(real.sb.dir)
    real.topic("cli-solo", [3])
    capsys.readouterr()
    assert cli.main(["sandbox", "status", "--dir", d]) == 0
    out = capsys.readouterr().out
    assert "settled: yes" in out and "pid" in out
    assert cli.main(["sandbox", "kill", "--dir", d, "9"]) == 2
    assert cli.main(["sandbox", "start", "--dir", d, "3"]) == 2  # already running
    assert cli.main(["sandbox", "stop", "--dir", d, "3"]) == 0
    assert "broker 3 stopped after moving its leaders" in capsys.readouterr().out
    assert cli.main(["sandbox", "status", "--dir", d]) == 0
    assert "offline: 1" in capsys.readouterr().out
    assert cli.main(["sandbox", "start", "--dir", d, "3"]) == 0
    assert cli.main(["sandbox", "wait", "--dir", d, "--timeout", "60"]) == 0
    assert "settled: 0 offline" in capsys.readouterr().out


# ---------------------------------------------------------------------------------- bad input, down
def test_states_real_brokers_cannot_be_told_are_refused_and_nothing_is_written(tmp_path, kafka_jars):
    shrunk = {"brokers": racks(3), "topics": [{"name": "t", "partitions": [{"replicas": [1, 2, 3], "isr": [1, 2]}]}]}
    with pytest.raises(BadInput, match="cannot reproduce"):
        Sandbox.up(tmp_path / "a", cluster=shrunk, engine="kafka")
    with pytest.raises(BadInput, match="Kafka version"):
        Sandbox.up(tmp_path / "b", brokers=3, engine="kafka", kafka_version="3.9")
    with pytest.raises(BadInput, match="engine"):
        Sandbox.up(tmp_path / "c", brokers=3, engine="real")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists() and not (tmp_path / "c").exists()
    assert cli.main(["sandbox", "up", "--dir", str(tmp_path / "d"), "--brokers", "3", "--data-bytes", "5"]) == 2


def test_down_leaves_no_jvm_after_the_process_that_ran_up_was_killed(tmp_path, kafka_jars):
    d = tmp_path / "orphan"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "planner.cli", "sandbox", "up", "--dir", str(d), "--engine", "kafka",
                             "--brokers", "3", "--partitions", "6", "--data-bytes", "0", "--session-timeout", "6"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        # killed while it starts the brokers: once the first broker JVM is recorded in sandbox.json
        poll(lambda: (d / "sandbox.json").exists() and any(
            b.get("pid") for b in json.loads((d / "sandbox.json").read_text()).get("kafka", {}).get("brokers", {}).values()),
            timeout=120, what="a broker JVM recorded in sandbox.json")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        poll(lambda: find_brokers(d / "kafka"), timeout=30, what="the broker JVMs to run")
        zk_pid = json.loads((d / "sandbox.json").read_text())["zookeeper_pid"]
        assert zk_pid and pid_alive(zk_pid)
        report = Sandbox(d).down()
        assert report["brokers_killed"] and report["zookeeper_stopped"]
        assert find_brokers(d / "kafka") == {} and not pid_alive(zk_pid)
        assert not (d / "sandbox.json").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in find_brokers(d / "kafka"):  # never leave a JVM behind, even on failure
            os.kill(pid, signal.SIGKILL)
