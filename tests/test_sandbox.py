"""Fidelity of the sandbox cluster against Kafka's ZooKeeper-mode rules (docs/KAFKA_ZK.md §2, §3).

Every expected state below is worked out by hand from Kafka's controller rules, never taken from the code
under test. The sandboxes run on the session's real ZooKeeper, each in its own chroot (one test starts and
stops its own ZooKeeper to check that nothing is left running). Waiting is always on a condition: the
sandbox's settled barrier, or a poll of ZooKeeper with a deadline.
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any

import pytest
from waiting import poll

from planner import cli, codec
from planner import zk as zkmod
from planner.sandbox import Sandbox
from planner.zkserver import pid_alive

pytestmark = pytest.mark.sandbox

FAST = dict(catch_up_delay=0.3, shutdown_retries=3, shutdown_retry_interval=0.3, auto_rebalance=False, tick=0.05)


# ------------------------------------------------------------------------------------------- helpers
def brokers(n: int, racks: int = 0) -> list[dict[str, Any]]:
    return [{"id": i, "rack": f"r{(i - 1) % racks + 1}"} if racks else {"id": i} for i in range(1, n + 1)]


def topic(name: str, *partitions: dict[str, Any], **config: str) -> dict[str, Any]:
    return {"name": name, "config": {k.replace("_", "."): v for k, v in config.items()}, "partitions": list(partitions)}


def part(replicas: list[int], leader: int | None = None, isr: list[int] | None = None, size: int = 1000) -> dict:
    p: dict[str, Any] = {"replicas": replicas, "size_bytes": size}
    if leader is not None:
        p["leader"] = leader
    if isr is not None:
        p["isr"] = isr
    return p


class Cluster:
    """A sandbox plus a ZooKeeper client inside its chroot."""

    def __init__(self, sb: Sandbox):
        self.sb = sb
        self.zk = zkmod.connect(sb.connect_string)

    def state(self, t: str, p: int) -> dict[str, Any]:
        data, stat = self.zk.get(codec.state_path(t, p))
        out = json.loads(data)
        out["_mzxid"] = stat.mzxid
        return out

    def lead_isr(self, t: str, p: int) -> tuple[int, list[int], int]:
        s = self.state(t, p)
        return s["leader"], s["isr"], s["leader_epoch"]

    def assignment(self, t: str) -> codec.TopicAssignment:
        return codec.decode_topic(t, self.zk.get(codec.topic_path(t))[0])

    def controller(self) -> tuple[int, int]:
        ctrl = codec.decode_controller(self.zk.get(codec.CONTROLLER)[0])
        return ctrl.broker_id, codec.decode_controller_epoch(self.zk.get(codec.CONTROLLER_EPOCH)[0])

    def ids_pzxid(self) -> int:
        return self.zk.exists(codec.BROKER_IDS).pzxid

    def reassign(self, entries: list[tuple[str, int, list[int]]]) -> None:
        self.zk.create(codec.REASSIGN, codec.encode_reassignment(
            [codec.ReassignEntry(t, p, tuple(r)) for t, p, r in entries]))

    def set_config(self, entity: str, config: dict[str, str]) -> None:
        """Write a config override and its change notification, as kafka-configs.sh does."""
        path = f"{codec.CONFIG}/{entity}"
        if self.zk.exists(path):
            self.zk.set(path, codec.encode_config(config))
        else:
            self.zk.create(path, codec.encode_config(config), makepath=True)
        self.zk.create(codec.CONFIG_CHANGE_PREFIX, codec.encode_config_change(entity), sequence=True)


@pytest.fixture
def make(tmp_path, zk_connect):
    made: list[Cluster] = []

    def _make(desc: dict[str, Any], **settings: Any) -> Cluster:
        opts = {**FAST, **settings}
        sb = Sandbox.up(tmp_path / f"sb{len(made)}", cluster=desc, zk=zk_connect + (f"_{len(made)}" if made else ""),
                        timeout=60, **opts)
        c = Cluster(sb)
        made.append(c)
        return c

    yield _make
    for c in made:
        c.zk.stop()
        c.zk.close()
        c.sb.down()


# ------------------------------------------------------------------------------------- hard failures
def test_seed_incident_rf1_partition_goes_offline_with_its_broker_kept_in_isr(make):
    c = make({"brokers": brokers(3), "topics": [topic("solo", part([1])), topic("wide", part([2, 1, 3]))]})
    assert c.lead_isr("solo", 0) == (1, [1], 0)
    c.sb.kill([1])
    s = c.state("solo", 0)
    _, controller_epoch = c.controller()
    assert (s["leader"], s["isr"], s["leader_epoch"]) == (-1, [1], 1)
    assert s["controller_epoch"] == controller_epoch
    assert "leader_recovery_state" not in s
    assert s["_mzxid"] > c.ids_pzxid(), "written after broker 1's registration vanished"
    # the follower replica on broker 1 left the ISR of the other partition
    assert c.lead_isr("wide", 0) == (2, [2, 3], 1)


def test_first_live_in_sync_replica_in_assignment_order_wins(make):
    c = make({"brokers": brokers(4), "topics": [
        # not the lowest id (1), not the first in ISR order (1): the first in assignment order, 2
        topic("a", part([3, 2, 1], leader=3, isr=[1, 2, 3])),
        # 1 comes before 2 in the assignment but is out of sync
        topic("b", part([3, 1, 2], leader=3, isr=[2, 3])),
        topic("c", part([4, 3, 2, 1], leader=3, isr=[3, 1, 4])),
    ]})
    c.sb.kill([3])
    assert c.lead_isr("a", 0) == (2, [1, 2], 1)
    assert c.lead_isr("b", 0) == (2, [2], 1)
    assert c.lead_isr("c", 0) == (4, [1, 4], 1)


def test_unclean_election_follows_topic_override_then_cluster_default(make):
    lagging = dict(leader=1, isr=[1])
    c = make({"brokers": brokers(3),
              "broker_defaults": {"unclean.leader.election.enable": "true"},
              "topics": [topic("clean", part([1, 2, 3], **lagging), unclean_leader_election_enable="false"),
                         topic("dirty", part([1, 3, 2], **lagging), unclean_leader_election_enable="true"),
                         topic("inherits", part([1, 2, 3], **lagging))]})
    c.sb.kill([1])
    clean = c.state("clean", 0)
    assert (clean["leader"], clean["isr"], clean["leader_epoch"]) == (-1, [1], 1)
    dirty = c.state("dirty", 0)
    assert (dirty["leader"], dirty["isr"], dirty["leader_epoch"], dirty["leader_recovery_state"]) == (3, [3], 1, 1)
    inherits = c.state("inherits", 0)
    assert (inherits["leader"], inherits["isr"], inherits["leader_recovery_state"]) == (2, [2], 1)


def test_unclean_election_is_off_by_default(make):
    c = make({"brokers": brokers(3), "topics": [topic("t", part([1, 2, 3], leader=1, isr=[1]))]})
    c.sb.kill([1])
    assert c.lead_isr("t", 0) == (-1, [1], 1)
    # an ISR member coming back is elected again
    c.sb.start([1])
    assert c.lead_isr("t", 0) == (1, [1], 2)


# -------------------------------------------------------------------------------- controlled shutdown
def test_controlled_shutdown_moves_leaders_before_the_broker_leaves(make):
    c = make({"brokers": brokers(4), "topics": [
        topic("led", part([1, 2, 3]), part([1, 2, 3], leader=1, isr=[1, 3])),
        topic("followed", part([2, 1, 3])),
        topic("solo", part([1])),
    ]})
    result = c.sb.stop([1])
    left_at = c.ids_pzxid()  # zxid at which /brokers/ids/1 was deleted
    report = result["brokers"]["1"]
    # an RF=1 partition is not "remaining" (Kafka's partitionLeadersOnBroker keeps RF > 1 only, as real
    # Kafka 3.9 brokers show in test_kafka_sandbox.py): the first request succeeds
    assert report == {"attempts": 1, "succeeded": True, "still_leading": [], "unclean_shutdown": False}
    led0, led1, followed, solo = c.state("led", 0), c.state("led", 1), c.state("followed", 0), c.state("solo", 0)
    assert (led0["leader"], led0["isr"], led0["leader_epoch"]) == (2, [2, 3], 1)
    assert (led1["leader"], led1["isr"], led1["leader_epoch"]) == (3, [3], 1)
    assert (followed["leader"], followed["isr"], followed["leader_epoch"]) == (2, [2, 3], 1)
    assert max(led0["_mzxid"], led1["_mzxid"], followed["_mzxid"]) < left_at, "moved while broker 1 was registered"
    # the RF=1 partition kept its leader until the broker stopped, then failed hard
    assert (solo["leader"], solo["isr"], solo["leader_epoch"]) == (-1, [1], 1)
    assert solo["_mzxid"] > left_at


def test_controlled_shutdown_of_a_follower_only_shrinks_isr(make):
    c = make({"brokers": brokers(3), "topics": [topic("t", part([2, 1, 3]), part([3, 2, 1]))]})
    result = c.sb.stop([1])
    assert result["brokers"]["1"] == {"attempts": 1, "succeeded": True, "still_leading": [], "unclean_shutdown": False}
    assert c.lead_isr("t", 0) == (2, [2, 3], 1)
    assert c.lead_isr("t", 1) == (3, [3, 2], 1)


def test_controlled_shutdown_of_two_brokers_is_one_request_at_a_time_in_the_order_given(make):
    c = make({"brokers": brokers(4), "topics": [
        topic("a", part([1, 2, 3])),   # 1 asks: to 2 (stopping, but has not asked yet); 2 asks: to 3
        topic("b", part([1, 2])),      # 1 asks: to 2; 2 asks: no candidate left, 2 keeps it and fails
        topic("c", part([2, 4, 1])),   # 1 asks: follower 1 leaves the ISR; 2 asks: to 4
        topic("d", part([3, 1, 2])),   # only followed: both leave the ISR
    ]})
    result = c.sb.stop([1, 2])
    assert result["brokers"]["1"] == {"attempts": 1, "succeeded": True, "still_leading": [], "unclean_shutdown": False}
    assert result["brokers"]["2"] == {"attempts": 3, "succeeded": False, "still_leading": ["b-0"],
                                      "unclean_shutdown": True}
    # a: two leader changes (1 -> 2 -> 3), each bumping the leader epoch
    assert c.lead_isr("a", 0) == (3, [3], 2)
    # b: moved to 2, then 2 stopped uncleanly: offline with 2 (not 1) as the ISR's last member
    assert c.lead_isr("b", 0) == (-1, [2], 2)
    assert c.lead_isr("c", 0)[:2] == (4, [4])
    assert c.lead_isr("d", 0)[:2] == (3, [3])


def test_controlled_shutdown_order_decides_who_is_left_holding_the_partition(make):
    c = make({"brokers": brokers(3), "topics": [topic("b", part([1, 2]))]})
    result = c.sb.stop([2, 1])
    # 2 asks first: it only follows, leaves the ISR; 1 asks: no candidate, fails, stops uncleanly
    assert result["brokers"]["2"]["succeeded"] is True and result["brokers"]["1"]["still_leading"] == ["b-0"]
    assert c.lead_isr("b", 0)[:2] == (-1, [1])


# ------------------------------------------------------------------------------------- broker return
def test_broker_return_reelects_offline_partitions_and_rejoins_isr_after_catch_up(make):
    c = make({"brokers": brokers(3), "topics": [topic("solo", part([1])), topic("t", part([1, 2, 3]), part([2, 1, 3]))]},
             catch_up_delay=1.5)
    c.sb.kill([1])
    assert c.lead_isr("solo", 0) == (-1, [1], 1)
    assert c.lead_isr("t", 0) == (2, [2, 3], 1)
    c.sb.start([1])
    # the offline partition is elected at once; the replicas still have to catch up
    assert c.lead_isr("solo", 0) == (1, [1], 2)
    assert c.lead_isr("t", 0) == (2, [2, 3], 1)
    c.sb.wait_settled(30)
    # the leader adds the follower back: appended to the ISR, leader epoch unchanged
    assert c.lead_isr("t", 0) == (2, [2, 3, 1], 1)
    assert c.lead_isr("t", 1) == (2, [2, 3, 1], 1)
    assert c.sb.status()["under_replicated_count"] == 0


def test_replicas_lagging_at_start_stay_out_until_their_broker_restarts(make):
    c = make({"brokers": brokers(3), "topics": [topic("t", part([1, 2, 3], isr=[1, 2]))]})
    c.sb.wait_settled(30)
    assert c.lead_isr("t", 0) == (1, [1, 2], 0)
    c.sb.stop([3])
    c.sb.start([3])
    c.sb.wait_settled(30)
    assert c.lead_isr("t", 0) == (1, [1, 2, 3], 0)


# ----------------------------------------------------------------------------------------- reassignment
THROTTLED = {"follower.replication.throttled.rate": "1"}  # 1 byte/s: the copy cannot finish meanwhile
UNTHROTTLED = {"follower.replication.throttled.rate": "1000000000000"}


def test_reassignment_keeps_the_leader_in_target(make):
    c = make({"brokers": brokers(4), "broker_defaults": THROTTLED,
              "topics": [topic("t", part([1, 2, 3], size=50_000_000),
                               follower_replication_throttled_replicas="0:4")]})
    c.reassign([("t", 0, [1, 2, 4])])
    # phase A: union written to the topic znode, leader epoch bumped, copy throttled
    ta = poll(lambda: (a := c.assignment("t")).adding_replicas and a, what="union in topic znode")
    assert ta.partitions == {0: [1, 2, 4, 3]} and ta.adding_replicas == {0: [4]} and ta.removing_replicas == {0: [3]}
    assert c.lead_isr("t", 0) == (1, [1, 2, 3], 1)
    assert c.zk.exists(codec.REASSIGN) is not None
    # the copy to 4 runs at the 1 byte/s throttle, far below the link rate
    ticks = c.sb.status()["replication"]["ticks"]
    status = poll(lambda: (s := c.sb.status())["replication"]["ticks"] >= ticks + 5 and s, what="five ticks")
    assert [(r["partition"], r["adding"]) for r in status["reassigning"]] == [(0, [4])]
    assert 50_000_000 - 100 < status["reassigning"][0]["bytes_left"]["4"] < 50_000_000
    c.set_config(f"brokers/{codec.DEFAULT_BROKER_ENTITY}", UNTHROTTLED)
    c.sb.wait_settled(30)
    ta = c.assignment("t")
    assert ta.partitions == {0: [1, 2, 4]} and not ta.adding_replicas and not ta.removing_replicas
    # 4 joined the ISR (no epoch change); completion bumped it (leader kept), 3 leaving bumped it again
    assert c.lead_isr("t", 0) == (1, [1, 2, 4], 3)
    assert c.zk.exists(codec.REASSIGN) is None


def test_reassignment_moves_the_leader_when_it_leaves(make):
    c = make({"brokers": brokers(6), "topics": [topic("t", part([1, 2, 3]), part([2, 3, 1]))]})
    c.reassign([("t", 0, [4, 5, 6]), ("t", 1, [5, 2, 6])])
    c.sb.wait_settled(30)
    assert c.assignment("t").partitions == {0: [4, 5, 6], 1: [5, 2, 6]}
    # t-0: the leader 1 is not in the target: first target replica live and in sync; then 1, 2, 3 leave
    assert c.lead_isr("t", 0) == (4, [4, 5, 6], 1 + 1 + 3)
    # t-1: the leader 2 is in the target: kept (a preferred election would be needed to move it to 5)
    assert c.lead_isr("t", 1) == (2, [2, 5, 6], 1 + 1 + 2)
    assert c.zk.exists(codec.REASSIGN) is None


def test_reassignment_stuck_on_a_dead_target_resumes_when_it_starts(make):
    c = make({"brokers": brokers(4), "topics": [topic("t", part([1, 2, 3]), part([2, 3, 1]))]})
    c.sb.kill([4])
    c.reassign([("t", 0, [1, 2, 4]), ("t", 1, [2, 3, 1])])
    status = c.sb.wait_settled(30)
    # t-1 needed no copy and completed; t-0 waits for broker 4
    ta = c.assignment("t")
    assert ta.partitions == {0: [1, 2, 4, 3], 1: [2, 3, 1]}
    assert ta.adding_replicas == {0: [4]} and ta.removing_replicas == {0: [3]}
    assert [(r["partition"], r["stuck_on_dead_brokers"]) for r in status["reassigning"]] == [(0, [4])]
    remaining = codec.decode_reassignment(c.zk.get(codec.REASSIGN)[0])
    assert remaining == [codec.ReassignEntry("t", 0, (1, 2, 4))]
    c.sb.start([4])
    c.sb.wait_settled(30)
    assert c.assignment("t").partitions == {0: [1, 2, 4], 1: [2, 3, 1]}
    # A1, resumed A1 when 4 registered, completion, 3 leaving
    assert c.lead_isr("t", 0) == (1, [1, 2, 4], 4)
    assert c.zk.exists(codec.REASSIGN) is None


def test_controller_failover_mid_reassignment_resumes_and_bumps_the_epoch(make):
    # partition i lives away from broker i+1, so whichever broker is controller, one partition avoids it
    n = 5
    reps = {i: [b for b in range(1, n + 1) if b != i + 1][:3] for i in range(n)}
    c = make({"brokers": brokers(n), "broker_defaults": THROTTLED,
              "topics": [topic("t", *[part(reps[i], size=10_000_000) for i in range(n)],
                               follower_replication_throttled_replicas="*")]})
    ctrl, epoch = c.controller()
    pid = ctrl - 1
    target = [b for b in range(1, n + 1) if b != ctrl and b not in reps[pid]] + reps[pid][:2]
    c.reassign([("t", pid, target)])
    poll(lambda: c.assignment("t").adding_replicas, what="reassignment started")
    c.sb.kill([ctrl])
    new_ctrl, new_epoch = c.controller()
    assert new_ctrl != ctrl and new_epoch == epoch + 1
    c.set_config(f"brokers/{codec.DEFAULT_BROKER_ENTITY}", UNTHROTTLED)
    c.sb.wait_settled(30)
    assert c.assignment("t").partitions[pid] == target
    s = c.state("t", pid)
    # A1 by the old controller, A1 again on resumption, completion (leader kept), the removed replica leaving
    assert (s["leader"], sorted(s["isr"]), s["leader_epoch"], s["controller_epoch"]) == \
        (reps[pid][0], sorted(target), 4, epoch + 1)
    assert c.zk.exists(codec.REASSIGN) is None


def test_reassignment_znode_with_log_dirs_is_ignored_and_left_in_place(make):
    c = make({"brokers": brokers(4), "topics": [topic("t", part([1, 2, 3]))]})
    bad = json.dumps({"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "replicas": [1, 2, 4], "log_dirs": ["any", "any", "any"]}]}).encode()
    c.zk.create(codec.REASSIGN, bad)
    poll(lambda: c.sb.status()["stats"].get("reassign_znodes_ignored"), what="the controller to read the znode")
    c.sb.wait_settled(30)
    assert c.zk.get(codec.REASSIGN)[0] == bad
    assert c.assignment("t").partitions == {0: [1, 2, 3]}
    assert c.lead_isr("t", 0) == (1, [1, 2, 3], 0)
    # the operator removes it and submits the same plan without log_dirs: now it runs
    c.zk.delete(codec.REASSIGN)
    c.reassign([("t", 0, [1, 2, 4])])
    poll(lambda: c.zk.exists(codec.REASSIGN) is None, what="the reassignment to complete")
    c.sb.wait_settled(30)
    assert c.assignment("t").partitions == {0: [1, 2, 4]}


# ---------------------------------------------------------------------------------- preferred leaders
def test_preferred_election_only_when_preferred_replica_is_live_and_in_sync(make):
    c = make({"brokers": brokers(4), "topics": [
        topic("ok", part([1, 2, 3], leader=2, isr=[2, 3, 1])),
        topic("lagging", part([1, 2, 3], leader=2, isr=[2, 3])),
        topic("dead", part([4, 2, 3], leader=2, isr=[2, 3, 4])),
        topic("already", part([2, 1, 3])),
    ]})
    c.sb.kill([4])
    assert c.lead_isr("dead", 0) == (2, [2, 3], 1)
    c.zk.create(codec.PREFERRED_ELECTION, codec.encode_preferred_election(
        [("ok", 0), ("lagging", 0), ("dead", 0), ("already", 0)]))
    poll(lambda: c.zk.exists(codec.PREFERRED_ELECTION) is None, what="the election znode to be deleted")
    c.sb.wait_settled(30)
    assert c.lead_isr("ok", 0) == (1, [2, 3, 1], 1)
    assert c.lead_isr("lagging", 0) == (2, [2, 3], 0)
    assert c.lead_isr("dead", 0) == (2, [2, 3], 1)
    assert c.lead_isr("already", 0) == (2, [2, 1, 3], 0)


def test_auto_leader_rebalance_applies_the_ten_percent_rule(make):
    # broker 1 prefers 1 partition, led by 2: 100 % imbalance -> moved back.
    # broker 3 prefers 11 partitions, one led by 2: 9 % <= 10 % -> left alone.
    c = make({"brokers": brokers(3), "topics": [
        topic("one", part([1, 2, 3], leader=2)),
        topic("three", *[part([3, 1, 2]) for _ in range(10)], part([3, 2, 1], leader=2)),
    ]}, auto_rebalance=True, rebalance_interval=0.3, rebalance_initial_delay=0.3)
    poll(lambda: c.sb.status()["stats"].get("rebalance_checks", 0) >= 2, what="two rebalance checks")
    assert c.lead_isr("one", 0) == (1, [1, 2, 3], 1)
    assert c.lead_isr("three", 10) == (2, [3, 2, 1], 0)


# ------------------------------------------------------------------------------------------ controller
def test_controller_epoch_bumps_on_each_failover(make):
    c = make({"brokers": brokers(3), "controller": {"epoch": 7}, "topics": [topic("t", part([1, 2, 3]))]})
    first, epoch = c.controller()
    assert epoch == 8  # the loaded cluster's epoch 7, bumped by the first controller
    c.sb.kill([first])
    second, epoch2 = c.controller()
    assert second != first and epoch2 == 9
    c.sb.kill([second])
    third, epoch3 = c.controller()
    assert third not in (first, second) and epoch3 == 10
    # a state written by the last controller carries its epoch
    s = c.state("t", 0)
    assert s["controller_epoch"] == 10 and s["leader"] == third and s["isr"] == [third]


# ---------------------------------------------------------------------------------- process lifecycle
def test_up_and_down_leave_no_process_even_after_the_daemon_was_killed(tmp_path):
    sb = Sandbox.up(tmp_path / "own", brokers=3, racks=3, partitions=30, **FAST)
    zk_pid, daemon_pid = sb.zookeeper_pid, sb.daemon_pid
    assert zk_pid and daemon_pid and pid_alive(zk_pid) and pid_alive(daemon_pid)
    info = json.loads((tmp_path / "own" / "sandbox.json").read_text())
    assert info["connect"] == sb.connect_string and info["zookeeper_pid"] == zk_pid
    assert json.loads((tmp_path / "own" / "logdirs.json").read_text())["brokers"][0]["logDirs"]
    sb.down()
    assert not pid_alive(zk_pid) and not pid_alive(daemon_pid)
    assert not (tmp_path / "own" / "sandbox.json").exists()

    sb = Sandbox.up(tmp_path / "own", brokers=3, racks=3, partitions=30, **FAST)
    zk_pid, daemon_pid = sb.zookeeper_pid, sb.daemon_pid
    os.kill(daemon_pid, signal.SIGKILL)
    poll(lambda: not pid_alive(daemon_pid), what="the daemon to die")
    Sandbox(tmp_path / "own").down()
    assert not pid_alive(zk_pid)


# ------------------------------------------------------------------------------------------------ CLI
def test_cli_exit_codes(tmp_path, zk_connect, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(["sandbox", "status", "--dir", str(empty)]) == 2
    assert cli.main(["sandbox", "down", "--dir", str(empty)]) == 0   # nothing to stop: not an error
    assert cli.main(["sandbox", "down", "--dir", str(tmp_path / "no-such-dir")]) == 2
    bad = tmp_path / "bad.json"
    bad.write_text('{"brokers": [{"id": 1}], "topics": [{"name": "t", "partitions": [{"replicas": [1, 1]}]}]}')
    assert cli.main(["sandbox", "up", "--dir", str(tmp_path / "x"), "--cluster", str(bad)]) == 2
    assert cli.main(["sandbox", "up", "--dir", str(tmp_path / "x"), "--cluster", str(tmp_path / "nope.json")]) == 2
    assert not (tmp_path / "x" / "sandbox.json").exists()
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"brokers": brokers(3), "topics": [topic("t", part([1, 2, 3]))]}))
    d = str(tmp_path / "sb")
    assert cli.main(["sandbox", "up", "--dir", d, "--cluster", str(good), "--zk", zk_connect,
                     "--catch-up-delay", "0.2", "--no-auto-rebalance"]) == 0
    try:
        assert cli.main(["sandbox", "up", "--dir", d, "--cluster", str(good)]) == 2
        assert cli.main(["sandbox", "kill", "--dir", d, "9"]) == 2
        assert cli.main(["sandbox", "kill", "--dir", d, "x"]) == 2
        assert cli.main(["sandbox", "start", "--dir", d, "1"]) == 2  # already running
        capsys.readouterr()
        assert cli.main(["sandbox", "kill", "--dir", d, "1"]) == 0
        assert cli.main(["sandbox", "status", "--dir", d]) == 0
        out = capsys.readouterr().out
        assert "under-replicated: 1" in out and "controller: broker" in out
        assert cli.main(["sandbox", "start", "--dir", d, "1"]) == 0
        assert cli.main(["sandbox", "wait", "--dir", d, "--timeout", "30"]) == 0
    finally:
        assert cli.main(["sandbox", "down", "--dir", d]) == 0


# ------------------------------------------------------------------------------------ property: kills
def expected_after_hard_failure(replicas: list[int], leader: int, isr: list[int], dead: set[int],
                                unclean: bool) -> tuple[int, list[int]]:
    """docs/KAFKA_ZK.md §2 'Hard failure of a set D', written independently for this check: re-elect partitions led
    by D (first live in-sync replica in assignment order, else the first live replica if unclean, else -1),
    then remove D from the ISRs except where a broker of D is the only member left, one broker at a time in
    the order Kafka's controller visits them (a Scala HashMap's: planner.scala_hashmap, checked against Kafka's
    scala-library; the emulator has its own implementation; every broker here holds replicas)."""
    from planner.scala_hashmap import visit_order

    alive = [r for r in replicas if r not in dead]
    if leader in dead:
        in_sync = [r for r in replicas if r in isr and r not in dead]
        if in_sync:
            return in_sync[0], [x for x in isr if x not in dead]
        if unclean and alive:
            return alive[0], [alive[0]]
        leader = -1
    new_isr = list(isr)
    for d in visit_order(dead):
        if d in new_isr and len(new_isr) > 1:
            new_isr.remove(d)
    return leader, new_isr


@pytest.fixture(scope="module")
def prop_cluster(zk_server, tmp_path_factory):
    rng = __import__("random").Random(7)
    topics = []
    for t, rf in enumerate([1, 2, 3, 3, 3]):
        parts = []
        for _ in range(12):
            reps = rng.sample(range(1, 7), rf)
            isr = [r for r in reps if r == reps[0] or rng.random() > 0.25]  # some replicas lag
            parts.append(part(reps, leader=reps[0], isr=isr))
        topics.append(topic(f"t{t}", *parts, **({"unclean_leader_election_enable": "true"} if t == 4 else {})))
    sb = Sandbox.up(tmp_path_factory.mktemp("prop") / "sb", cluster={"brokers": brokers(6, racks=3), "topics": topics},
                    zk=f"{zk_server.connect_string}/prop{os.getpid()}", timeout=60, **FAST)
    c = Cluster(sb)
    yield c
    c.zk.stop()
    c.zk.close()
    sb.down()


def test_random_hard_failures_follow_the_election_rules(prop_cluster):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    c = prop_cluster

    @settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.sets(st.integers(1, 6), min_size=1, max_size=4))
    def check(dead: set[int]) -> None:
        before = {(f"t{t}", p): c.state(f"t{t}", p) for t in range(5) for p in range(12)}
        assignment = {t: c.assignment(t).partitions for t in {k[0] for k in before}}
        c.sb.kill(sorted(dead))
        for (t, p), s in before.items():
            want = expected_after_hard_failure(assignment[t][p], s["leader"], s["isr"], dead, unclean=t == "t4")
            assert c.lead_isr(t, p)[:2] == want, (t, p, s, dead)
        c.sb.start(sorted(dead))
        c.sb.wait_settled(30)

    check()


def test_sandbox_does_not_import_the_planners_predictions():
    import ast
    from pathlib import Path

    import planner.sandbox

    forbidden = ("planner.replay", "planner.risk", "planner.optimizer", "planner.snapshot", "planner.scala_hashmap")
    for path in Path(planner.sandbox.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                assert not name.startswith(forbidden), f"{path.name} imports {name}"


def test_a_copy_that_ends_mid_tick_spends_the_rest_of_the_tick_catching_up():
    """The emulator's clock: a replica joins the ISR once its copy (bytes / rate) and its catch-up delay are
    over, in the tick where that happens, not one tick later (the tick is the clock's resolution)."""
    from planner.sandbox.model import Part
    from planner.sandbox.replication import ConfigCache, Replication
    from planner.sandbox.settings import Timing

    class Ctrl:  # the controller's side the data plane calls: lookups and AlterPartition
        initialized = True

        def __init__(self, p: Part):
            self.p, self.joins = p, []

        def lookup(self, topic, pid):
            return self.p if (topic, pid) == (self.p.topic, self.p.pid) else None

        def alter_partition(self, joins):
            self.joins.append([(p.key, b) for p, b in joins])
            return [p for p, _ in joins]

    class Host:
        controller = None

        def fetching(self, broker):
            return True

        def running(self, broker):
            return True

    def moving(delay: float):
        p = Part("t", 0, [1, 2, 3], [3], [])
        p.has_state, p.leader, p.isr = True, 1, [1, 2]
        host, ctrl = Host(), Ctrl(p)
        host.controller = ctrl
        rep = Replication(host, {"t": [1000]}, Timing(catch_up_delay=delay, link_rate=10_000),
                          ConfigCache(None, lambda *a: None))
        rep.start_new(p, 3)
        return rep, ctrl

    # 1000 B at 10,000 B/s: 0.1 s of copy, then the catch-up delay.
    rep, ctrl = moving(delay=0.02)
    rep.tick(0.05)                      # 500 B copied
    assert ctrl.joins == []
    rep.tick(0.1)                       # 0.05 s to finish the copy, 0.05 s left >= 0.02 s of catch-up
    assert ctrl.joins == [[(("t", 0), 3)]]

    rep, ctrl = moving(delay=0.08)
    rep.tick(0.05)
    rep.tick(0.1)                       # copy done after 0.05 s; 0.03 s of catch-up still to go
    assert ctrl.joins == []
    rep.tick(0.02)                      # 0.01 s to go
    assert ctrl.joins == []
    rep.tick(0.02)
    assert ctrl.joins == [[(("t", 0), 3)]]
