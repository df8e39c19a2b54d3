"""kplan apply / verify / cancel on the emulated sandbox (real ZooKeeper, emulated brokers and controller).

Expected states are worked out by hand from the plan and Kafka's rules (KAFKA_ZK.md §1, §3) and read back
with an independent checker (tests/apply_support.py). Every test that writes ends by asserting that nothing
was lost: every partition led, RF intact, the plan completed or cleanly rolled back, throttles removed, lock
released.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from apply_support import FAST, Background, Checker, brokers, part, poll, rf_of, topic, write_plan

from planner import cli
from planner import zk as zkmod
from planner.sandbox import Sandbox

pytestmark = pytest.mark.sandbox

MB = 1_000_000


class Env:
    def __init__(self, sb: Sandbox, desc: dict[str, Any], tmp: Path):
        self.sb = sb
        self.desc = desc
        self.tmp = tmp
        self.zk = zkmod.connect(sb.connect_string)
        self.check = Checker(self.zk)

    @property
    def connect(self) -> str:
        return self.sb.connect_string

    def kplan(self, *argv: str) -> int:
        return cli.main(list(argv))


@pytest.fixture
def cluster(tmp_path, zk_connect):
    made: list[Env] = []

    def _make(desc: dict[str, Any], **settings: Any) -> Env:
        sb = Sandbox.up(tmp_path / f"sb{len(made)}", cluster=desc, zk=zk_connect + (f"_{len(made)}" if made else ""),
                        timeout=60, **{**FAST, **settings})
        env = Env(sb, desc, tmp_path)
        made.append(env)
        return env

    yield _make
    for env in made:
        env.zk.stop()
        env.zk.close()
        env.sb.down()


# A drain of broker 1 on four brokers, written by hand:
#   a-0 [1,2] leader 1 -> leadership batch [2,1] -> data [2,3]
#   a-1 [2,1]          ->                          data [4,2] (leader 2 stays: verify elects 4)
#   b-0 [1,3] leader 1 -> leadership batch [3,1] -> data [3,4]
#   a-2 [3,4], b-1 [4,2] untouched
def drain_desc(size: int = 1000) -> dict[str, Any]:
    return {"brokers": brokers(4), "topics": [
        topic("a", part([1, 2], size), part([2, 1], size), part([3, 4], size), min_insync_replicas="1"),
        topic("b", part([1, 3], size), part([4, 2], size)),
    ]}


def drain_plan(folder: Path, size: int = 1000) -> dict[str, Any]:
    return write_plan(folder, moves=[
        ("a", 0, [1, 2], [2, 3], size), ("a", 1, [2, 1], [4, 2], size), ("b", 0, [1, 3], [3, 4], size)],
        batches=[("leadership", [("a", 0, [2, 1]), ("b", 0, [3, 1])]),
                 ("data", [("a", 0, [2, 3])]),
                 ("data", [("a", 1, [4, 2]), ("b", 0, [3, 4])])],
        kind="drain", drained=[1])


FINAL = {("a", 0): [2, 3], ("a", 1): [4, 2], ("b", 0): [3, 4], ("a", 2): [3, 4], ("b", 1): [4, 2]}


def test_drain_applies_batches_in_order_with_kafka_style_throttles_then_verifies(cluster, tmp_path):
    env = cluster(drain_desc(size=24 * MB), link_rate=1e9)
    plan = drain_plan(tmp_path / "run" / "plan", size=24 * MB)
    # An operator's throttles from before the run: they must survive it untouched.
    z = env.zk
    op = z.set if z.exists("/config/brokers/4") else z.create
    op("/config/brokers/4", b'{"version":1,"config":{"follower.replication.throttled.rate":"777"}}')
    z.set("/config/topics/b", b'{"version":1,"config":{"leader.replication.throttled.replicas":"1:4"}}')
    before_changes = len(env.check.config_changes())
    seen: dict[int, dict[str, dict[str, str]]] = {}

    def watch_throttles() -> bool:
        states = env.check.unit_states(plan)
        for i, s in enumerate(states):
            if s == "submitted" and i not in seen:
                seen[i] = env.check.throttles()
        return bool(states) and all(s == "completed" for s in states)

    bg = Background(lambda: env.kplan("apply", "--zk", env.connect, "--plan", str(tmp_path / "run" / "plan"),
                                      "--throttle", "12MB", "--poll", "0.2"))
    poll(watch_throttles, timeout=60, what="every batch completed", every=0.02)
    assert bg.result() == 0
    # Throttles while each data batch was in flight, as Kafka's tool computes them: current replicas are
    # leader-throttled, added ones follower-throttled, every source and destination broker rate-limited.
    r = "12000000"
    assert seen[1] == {
        "topics/a": {"leader.replication.throttled.replicas": "0:1,0:2",
                     "follower.replication.throttled.replicas": "0:3"},
        "topics/b": {"leader.replication.throttled.replicas": "1:4"},
        "brokers/1": {"leader.replication.throttled.rate": r, "follower.replication.throttled.rate": r},
        "brokers/2": {"leader.replication.throttled.rate": r, "follower.replication.throttled.rate": r},
        "brokers/3": {"leader.replication.throttled.rate": r, "follower.replication.throttled.rate": r},
        "brokers/4": {"follower.replication.throttled.rate": "777"},
    }
    assert seen[2] == {
        "topics/a": {"leader.replication.throttled.replicas": "1:1,1:2",
                     "follower.replication.throttled.replicas": "1:4"},
        "topics/b": {"leader.replication.throttled.replicas": "0:1,0:3,1:4",
                     "follower.replication.throttled.replicas": "0:4"},
        "brokers/1": {"leader.replication.throttled.rate": r, "follower.replication.throttled.rate": r},
        "brokers/2": {"leader.replication.throttled.rate": r, "follower.replication.throttled.rate": r},
        "brokers/3": {"leader.replication.throttled.rate": r, "follower.replication.throttled.rate": r},
        "brokers/4": {"leader.replication.throttled.rate": r, "follower.replication.throttled.rate": r},
    }
    # Every config write had its change notification: set and removal for each entity of each batch.
    changes = env.check.config_changes()[before_changes:]
    expected = 2 * ["topics/a", "brokers/1", "brokers/2", "brokers/3"] + \
        2 * ["topics/a", "topics/b", "brokers/1", "brokers/2", "brokers/3", "brokers/4"]
    assert sorted(changes) == sorted(expected)
    # ... in the same transaction as the write: the last notification of an entity has the zxid of its last write.
    names = sorted(z.get_children("/config/changes"))
    last: dict[str, int] = {}
    for n in names:
        data, stat = z.get(f"/config/changes/{n}")
        last[json.loads(data)["entity_path"]] = stat.czxid
    for entity in set(expected):
        assert z.exists(f"/config/{entity}").mzxid == last[entity], entity
    # The drained broker lost leadership in the leadership batch, before any data moved.
    run = env.check.run(plan)
    assert run["state"] == "completed" and [u[0] for u in run["units"]] == ["completed"] * 3
    assert run["units"][0][2] <= run["units"][1][1]
    assert env.check.state("b", 0)["leader"] == 3

    assert env.kplan("verify", "--zk", env.connect, "--plan", str(tmp_path / "run" / "plan"), "--timeout", "30") == 0
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["converged"] is True
    assert report["partitions"] == {"converged": 3, "total": 3}
    assert report["leaders_on_preferred"] == {"count": 3, "total": 3}
    assert report["election"]["requested"] == 1  # a-1: leader 2 stayed, its target starts with 4
    assert env.check.state("a", 1)["leader"] == 4
    assert report["offline_count"] == 0 and report["cluster"]["offline"] == 0
    # The operator's throttles are still there (and reported: verify lists every throttle it finds).
    assert sorted((t["entity"], t["key"], t["value"]) for t in report["throttles_remaining"]) == [
        ("brokers/4", "follower.replication.throttled.rate", "777"),
        ("topics/b", "leader.replication.throttled.replicas", "1:4")]
    assert report["run_throttles_remaining"] is False
    env.check.assert_nothing_lost(rf_of(env.desc), FINAL, preserved_throttles={
        "brokers/4": {"follower.replication.throttled.rate": "777"},
        "topics/b": {"leader.replication.throttled.replicas": "1:4"}})
    # Applying it again changes nothing.
    tree = env.check.tree("/brokers")
    assert env.kplan("apply", "--zk", env.connect, "--plan", str(tmp_path / "run" / "plan")) == 0
    assert env.check.tree("/brokers") == tree
