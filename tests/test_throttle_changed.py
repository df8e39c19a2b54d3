"""An operator changes a replication rate while apply runs (kafka-configs, Cruise Control, a script): the run
must not put its own rate back at the next batch, nor remove the operator's at the end (emulated sandbox;
the real-Kafka counterpart, with Kafka's own kafka-configs and traffic flowing, is the `throttle-changed`
scenario of tests/scenario_support.py)."""

from __future__ import annotations

import json
import logging

import pytest
from apply_support import MB, Background, drain_desc, drain_plan, make_cluster, poll

pytestmark = pytest.mark.sandbox


@pytest.fixture
def cluster(tmp_path, zk_connect):
    yield from make_cluster(tmp_path, zk_connect)


def test_an_operators_rate_change_mid_apply_is_left_alone(cluster, tmp_path, caplog):
    env = cluster(drain_desc(size=20 * MB))
    plan_dir = tmp_path / "run" / "plan"
    doc = drain_plan(plan_dir, size=20 * MB)
    # batch 1 moves a-0 [2,1] -> [2,3], batch 2 a-1 [2,1] -> [4,2] and b-0: broker 2 copies in both, at one rate
    bg = Background(lambda: env.kplan("apply", "--zk", env.connect, "--plan", str(plan_dir), "--throttle", "10MB",
                                      "--poll", "0.2"))
    poll(lambda: env.check.unit_states(doc)[1:2] == ["submitted"] and env.check.topic("a").get("adding_replicas"),
         what="batch 1 copying")
    assert env.check.config("brokers/2")["follower.replication.throttled.rate"] == "10000000"
    # The operator lowers broker 2's follower rate the way kafka-configs does through ZooKeeper: the whole
    # override set, then a change notification (AdminZkClient.changeEntityConfig).
    config = env.check.config("brokers/2") | {"follower.replication.throttled.rate": "5000000"}
    env.zk.set("/config/brokers/2", json.dumps({"version": 1, "config": config}).encode())
    env.zk.create("/config/changes/config_change_", json.dumps({"version": 2, "entity_path": "brokers/2"}).encode(),
                  sequence=True)
    with caplog.at_level(logging.WARNING, logger="planner.execution.throttles"):
        assert bg.result() == 0
    assert env.check.unit_states(doc) == ["completed"] * 3
    warned = [r.getMessage() for r in caplog.records if "changed by someone else" in r.getMessage()]
    assert warned and "broker 2: follower.replication.throttled.rate is 5000000" in warned[0]
    # Everything the run set is gone; the operator's rate is still there, and verify names it.
    assert env.check.throttles() == {"brokers/2": {"follower.replication.throttled.rate": "5000000"}}
    assert env.kplan("verify", "--zk", env.connect, "--plan", str(plan_dir), "--timeout", "30") == 0
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["run_throttles_remaining"] is False
    assert report["throttles_remaining"] == [{"entity": "brokers/2", "key": "follower.replication.throttled.rate",
                                              "value": "5000000"}]
    assert env.check.lock_holders() == []
