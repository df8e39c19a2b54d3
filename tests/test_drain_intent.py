"""A drain proves its intent (issue 19 item 1), on the emulated engine: a topic created after the snapshot with
replicas on the drained broker is not in the plan; the plan's partitions all converge, but apply and verify
must say that the broker still hosts partitions (one of them RF=1), exit 1, and name what to run. The
follow-up drain then empties it, read back from ZooKeeper raw. The same on real Kafka: test_apply_kafka.py.
"""

from __future__ import annotations

import json

import pytest
from apply_support import brokers, make_cluster, part, poll, topic

from planner import codec

pytestmark = pytest.mark.sandbox

# The late topic, exactly: written into ZooKeeper as a user with zkCli or a script would (Kafka's own
# tools refuse partitions of different replication factors; the controller does not).
LATE = {0: [2, 3], 1: [2], 2: [4, 2]}


@pytest.fixture
def cluster(tmp_path, zk_connect):
    yield from make_cluster(tmp_path, zk_connect)


def _create_late_topic(zk, name: str, assignment: dict[int, list[int]]) -> None:
    ta = codec.TopicAssignment(assignment, topic_id="Zm9vYmFyYmF6cXV4cXV1eA", version=3)
    zk.create(codec.topic_config_path(name), codec.encode_config({}), makepath=True)
    zk.create(codec.topic_path(name), codec.encode_topic(ta), makepath=True)


def _on_broker(check, b: int) -> dict[tuple[str, int], list[int]]:
    """Every partition whose replicas name broker b, or whose leader is b: read raw from ZooKeeper."""
    out = {}
    for t in check.zk.get_children("/brokers/topics"):
        for p, reps in check.topic(t)["partitions"].items():
            leader = check.state(t, int(p))["leader"]
            if b in reps or leader == b:
                out[(t, int(p))] = reps
    return out


def test_a_topic_created_after_the_snapshot_keeps_the_drain_from_converging(cluster, tmp_path, capsys):
    desc = {"brokers": brokers(4), "topics": [
        topic("orders", part([1, 2]), part([2, 3]), part([3, 4]), part([4, 2])),
        topic("audit", part([2]), part([3])),
    ]}
    env = cluster(desc)
    run, run2 = tmp_path / "run", tmp_path / "run2"
    assert env.kplan("snapshot", "--zk", env.connect, "--out", str(run / "snapshot")) == 0
    _create_late_topic(env.zk, "late", LATE)
    poll(lambda: all(env.zk.exists(codec.state_path("late", p)) for p in LATE), timeout=30,
         what="the controller created the late topic's partitions")
    assert env.kplan("plan", "drain", "--snapshot", str(run / "snapshot"), "--brokers", "2", "--out",
                     str(run / "plan"), "--quiet") == 0
    plan = json.loads((run / "plan" / "plan.json").read_text())
    assert {(m["topic"], m["partition"]) for m in plan["moves"]} >= {("orders", 0), ("orders", 1), ("orders", 3),
                                                                      ("audit", 0)}
    assert not any(m["topic"] == "late" for m in plan["moves"])
    capsys.readouterr()

    # apply: every batch completes, and the final state says the broker is not empty: exit 1, named
    assert env.kplan("apply", "--zk", env.connect, "--plan", str(run / "plan"), "--throttle", "1GB",
                     "--poll", "0.2") == 1
    err = capsys.readouterr().err
    assert "the drain is not complete: broker(s) 2 still host 3 partitions" in err
    for p in LATE:
        assert f"late-{p} replicas {LATE[p]}" in err
    assert "topic created since the snapshot" in err and "1 partition with a single replica" in err
    outcome = json.loads((run / "apply" / "outcome.json").read_text())
    assert outcome["state"] == "completed" and outcome["intent"]["holds"] is False
    assert [(r["topic"], r["partition"]) for r in outcome["intent"]["remaining"]] == [("late", 0), ("late", 1),
                                                                                    ("late", 2)]

    # verify: the plan's partitions converged, the drain's intent does not hold: not converged, exit 1
    assert env.kplan("verify", "--zk", env.connect, "--plan", str(run / "plan"), "--timeout", "30") == 1
    out, err = capsys.readouterr()
    assert "converged                   NO: the plan's partitions did, but the drain is not complete" in out
    assert "kplan verify: error: plan sha256:" in err and "converged, but the drain is not complete" in err
    assert f"kplan snapshot --zk {env.connect} --out S2 && kplan plan drain --snapshot S2 --brokers 2" in err
    report = json.loads((run / "report.json").read_text())
    assert (report["converged"], report["plan_converged"]) == (False, True)
    intent = report["intent"]
    assert (intent["kind"], intent["brokers"], intent["holds"]) == ("drain", [2], False)
    assert {(r["topic"], r["partition"]): r["replicas"] for r in intent["remaining"]} == {
        ("late", p): r for p, r in LATE.items()}
    # report.json says what to do in words any reader can follow (an Airflow user too); the command lines are
    # the CLI's (above)
    assert intent["next"] == "a follow-up drain of broker(s) 2 from a new snapshot" and "kplan" not in intent["text"]
    # ZooKeeper, read raw: broker 2 still holds exactly the late topic; nothing of the run is left behind
    assert _on_broker(env.check, 2) == {("late", p): r for p, r in LATE.items()}
    assert env.check.throttles() == {} and env.check.lock_holders() == []
    assert not env.check.exists("/admin/reassign_partitions")

    # the follow-up drain it names empties the broker: exit 0 from both, and ZooKeeper agrees
    assert env.kplan("snapshot", "--zk", env.connect, "--out", str(run2 / "snapshot")) == 0
    assert env.kplan("plan", "drain", "--snapshot", str(run2 / "snapshot"), "--brokers", "2", "--out",
                     str(run2 / "plan"), "--quiet") == 0
    assert env.kplan("apply", "--zk", env.connect, "--plan", str(run2 / "plan"), "--throttle", "1GB",
                     "--poll", "0.2") == 0
    assert env.kplan("verify", "--zk", env.connect, "--plan", str(run2 / "plan"), "--timeout", "30") == 0
    out = capsys.readouterr().out
    assert "broker(s) 2 empty" in out and "yes (no replica, no leadership anywhere in the cluster)" in out
    report = json.loads((run2 / "report.json").read_text())
    assert report["converged"] is True and report["intent"]["holds"] is True and report["intent"]["remaining"] == []
    assert _on_broker(env.check, 2) == {}
    assert env.check.throttles() == {} and env.check.lock_holders() == []
