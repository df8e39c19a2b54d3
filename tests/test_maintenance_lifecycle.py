"""The maintenance lifecycle on the emulated engine (issue 17, parts 1 and 3), through the CLI as an operator
runs it: a drain leaves its broker `drained` (set by verify once the drain holds), the nightly rebalance then
gives it nothing, a plan made without that knowledge is refused at apply, clearing the state of a running
apply is refused, and a return brings the broker back to its share and out of maintenance.

Expectations are worked out by hand from the cluster below and read back raw from ZooKeeper with the
independent checker (tests/apply_support.py), never from the planner's own figures.
"""

from __future__ import annotations

import json
import shutil

import pytest
from apply_support import MB, Background, Checker, make_cluster, poll
from plan_support import write_plan_folder

from planner import cli
from planner import snapshot_io as sio
from planner.codec import ReassignEntry

pytestmark = pytest.mark.sandbox

RACK = {1: "r1", 2: "r2", 3: "r3", 4: "r1", 5: "r2", 6: "r3"}


def b(i: int) -> int:
    return i % 6 + 1


# 6 brokers on 3 racks, every broker with 11 replicas (6 of orders, 4 of events, 1 of legacy) and 5 preferred
# leaderships: a drained broker's share is 11.
DESC = {"brokers": [{"id": i, "rack": RACK[i]} for i in range(1, 7)], "topics": [
    {"name": "orders", "config": {"min.insync.replicas": "2"},
     "partitions": [{"replicas": [b(p), b(p + 1), b(p + 2)], "size_bytes": 4 * MB} for p in range(12)]},
    {"name": "events", "partitions": [{"replicas": [b(p), b(p + 1)], "size_bytes": 4 * MB} for p in range(12)]},
    {"name": "legacy", "partitions": [{"replicas": [b(p)], "size_bytes": 4 * MB} for p in range(6)]},
]}


@pytest.fixture
def cluster(tmp_path, zk_connect):
    yield from make_cluster(tmp_path, zk_connect)


def assignment(check: Checker) -> dict[tuple[str, int], list[int]]:
    return {(t, int(p)): r for t in check.zk.get_children("/brokers/topics")
            for p, r in check.topic(t)["partitions"].items()}


def per_broker(a: dict) -> dict[int, int]:
    out = dict.fromkeys(range(1, 7), 0)
    for reps in a.values():
        for x in reps:
            out[x] += 1
    return out


def kplan(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_drain_stays_drained_through_the_nightly_rebalance_and_a_return_brings_it_back(cluster, tmp_path, capsys):
    env = cluster(DESC, link_rate=1e9)
    zk, check = env.connect, env.check
    start = assignment(check)
    assert per_broker(start) == dict.fromkeys(range(1, 7), 11)

    # -- drain broker 1: `draining` as soon as the apply starts, held by it (a clear is refused meanwhile)
    drain = tmp_path / "drain"
    assert kplan(capsys, "snapshot", "--zk", zk, "--out", str(drain / "snapshot"))[0] == 0
    assert kplan(capsys, "plan", "drain", "--snapshot", str(drain / "snapshot"), "--brokers", "1", "--out",
                 str(drain / "plan"), "--quiet")[0] == 0
    drain_id = json.loads((drain / "plan" / "plan.json").read_text())["id"]
    bg = Background(lambda: cli.main(["apply", "--zk", zk, "--plan", str(drain / "plan"), "--throttle", "4MB",
                                      "--poll", "0.2", "--reason", "disk swap, ticket 42"]))
    state = poll(lambda: check.exists("/kplan/maintenance/1") and check.json("/kplan/maintenance/1"),
                 what="broker 1's maintenance state")
    assert (state["state"], state["plan_id"], state["reason"]) == ("draining", drain_id, "disk swap, ticket 42")
    assert state["run"] == str(drain) and state["by"]["command"] == "kplan apply" and state["by"]["user"]
    before = check.tree("/kplan/maintenance")
    rc, _, err = kplan(capsys, "maintenance", "clear", "--zk", zk, "--brokers", "1")
    assert rc == 1 and "broker 1 is draining for kplan apply of plan " + drain_id in err and "running" in err
    assert check.tree("/kplan/maintenance") == before
    assert bg.result() == 0
    assert check.json("/kplan/maintenance/1")["state"] == "draining"   # applied, not yet verified
    rc, out, _ = kplan(capsys, "verify", "--zk", zk, "--plan", str(drain / "plan"), "--timeout", "60")
    assert rc == 0 and "maintenance: broker 1 is now drained" in out
    assert check.json("/kplan/maintenance/1")["state"] == "drained"
    drained = assignment(check)
    assert per_broker(drained)[1] == 0
    rc, out, _ = kplan(capsys, "brokers", "--zk", zk)
    row = next(line for line in out.splitlines() if line.startswith("1 "))
    assert "drained" in row and "disk swap, ticket 42" in row and drain_id[:19] in row

    # -- the nightly rebalance: its snapshot records the state, its plan gives broker 1 nothing
    nightly = tmp_path / "nightly"
    rc, out, _ = kplan(capsys, "snapshot", "--zk", zk, "--out", str(nightly / "snapshot"))
    assert rc == 0 and "maintenance     broker 1 drained since" in out and "(disk swap, ticket 42)" in out
    snap = sio.read_snapshot(nightly / "snapshot")
    assert [(e["broker"], e["state"], e["plan_id"]) for e in snap.manifest["maintenance"]] == [(1, "drained",
                                                                                                 drain_id)]
    assert dict(zip(snap.brokers.column("broker").to_pylist(), snap.brokers.column("maintenance").to_pylist(),
                    strict=True))[1] == "drained"
    rc, out, _ = kplan(capsys, "plan", "rebalance", "--snapshot", str(nightly / "snapshot"), "--out",
                       str(nightly / "plan"), "--quiet")
    assert rc == 0 and "LEFT OUT           broker 1: drained" in out
    plan = json.loads((nightly / "plan" / "plan.json").read_text())
    assert not [m for m in plan["moves"] if 1 in m["to"]]
    assert plan["summary"]["left_out_brokers"] == [1] and plan["maintenance"]["left_out"][0]["state"] == "drained"
    assert plan["after"]["replicas"][0] == 0 and plan["after"]["preferred_leaders"][0] == 0
    # The same snapshot without the state (as before issue 17): the rebalance refills broker 1. Its plan, applied
    # now, is refused: broker 1 entered maintenance after that snapshot; nothing is written.
    blind = tmp_path / "blind"
    shutil.copytree(nightly / "snapshot", blind / "snapshot")
    manifest = {k: v for k, v in snap.manifest.items() if k not in ("maintenance", "files")}
    sio.write_snapshot(blind / "snapshot", manifest, snap.brokers.drop_columns(["maintenance"]), snap.topics,
                       snap.partitions)
    assert kplan(capsys, "plan", "rebalance", "--snapshot", str(blind / "snapshot"), "--out",
                 str(blind / "plan"), "--quiet")[0] == 0
    refill = [m for m in json.loads((blind / "plan" / "plan.json").read_text())["moves"] if 1 in m["to"]]
    assert len(refill) >= 9, "without the state the rebalance refills the drained broker"
    tree = check.tree()
    rc, _, err = kplan(capsys, "apply", "--zk", zk, "--plan", str(blind / "plan"))
    assert rc == 1 and "would give replicas or preferred leadership to brokers in maintenance (broker 1 drained" in err
    assert check.tree() == tree and check.lock_holders() == []

    # -- the operator's bad input: nothing written
    rc, _, err = kplan(capsys, "maintenance", "clear", "--zk", zk, "--brokers", "2")
    assert rc == 2 and "broker 2 is not in maintenance: nothing to clear (brokers in maintenance: 1 drained)" in err
    rc, _, err = kplan(capsys, "maintenance", "clear", "--zk", zk, "--brokers", "99")
    assert rc == 2 and "broker 99 is not a registered broker and has no maintenance state" in err
    rc, _, err = kplan(capsys, "maintenance", "clear", "--zk", zk, "--brokers", "1", "--state", "restarting")
    assert rc == 2 and "broker 1 is drained, not restarting: nothing was cleared" in err
    rc, _, err = kplan(capsys, "plan", "return", "--snapshot", str(nightly / "snapshot"), "--brokers", "2",
                       "--out", str(tmp_path / "r2"))
    assert rc == 2 and "broker 2 is not in maintenance" in err
    rc, _, err = kplan(capsys, "plan", "return", "--snapshot", str(nightly / "snapshot"), "--brokers", "9",
                       "--out", str(tmp_path / "r9"))
    assert rc == 2 and "unknown broker(s) [9]" in err
    env.sb.kill([1])   # maintenance: broker 1 is down; a return needs it registered again
    tree = check.tree()
    down = tmp_path / "down"
    assert kplan(capsys, "snapshot", "--zk", zk, "--out", str(down / "snapshot"))[0] == 0
    rc, _, err = kplan(capsys, "plan", "return", "--snapshot", str(down / "snapshot"), "--brokers", "1", "--out",
                       str(down / "plan"))
    assert rc == 2 and "broker(s) [1] are not registered" in err and not (down / "plan").exists()
    assert check.tree() == tree
    env.sb.start([1])
    env.sb.wait_settled(60)

    # -- something changed since the drain: events-0 (the drain replaced 1 by some x) moves on, x -> another
    a = assignment(check)
    moved = ("events", 0)
    (x,) = set(a[moved]) - {2}
    assert start[moved] == [1, 2] and sorted(a[moved]) == sorted([2, x]) and x != 1
    other = next(y for y in range(3, 7) if y != x)
    shift = tmp_path / "shift"
    write_plan_folder(shift / "plan", snap.fingerprint, {moved: a[moved]},
                      [ReassignEntry("events", 0, tuple(other if y == x else y for y in a[moved]))])
    assert kplan(capsys, "apply", "--zk", zk, "--plan", str(shift / "plan"), "--throttle", "1GB",
                 "--poll", "0.2")[0] == 0
    assert kplan(capsys, "verify", "--zk", zk, "--plan", str(shift / "plan"), "--timeout", "60")[0] == 0

    # -- the return: the drain's plan found through the state; only broker 1 receives; `returning` while it runs
    back = tmp_path / "back"
    assert kplan(capsys, "snapshot", "--zk", zk, "--out", str(back / "snapshot"))[0] == 0
    rc, out, _ = kplan(capsys, "plan", "return", "--snapshot", str(back / "snapshot"), "--brokers", "1", "--out",
                       str(back / "plan"), "--quiet")
    assert rc == 0, out
    ret = json.loads((back / "plan" / "plan.json").read_text())
    undo = ret["maintenance"]["undo"]
    assert ret["kind"] == "return" and ret["parameters"]["drain_plans"] == [drain_id]
    assert (undo["drain_moves"], undo["no_longer_matching"], undo["reversed"]) == (11, 1, 10)
    assert all(1 in m["to"] and not set(m["to"]) - set(m["from"]) - {1} for m in ret["moves"] if m["kind"] == "data")
    assert "10 of the drain's 11 moves reversed" in out
    assert kplan(capsys, "apply", "--zk", zk, "--plan", str(back / "plan"), "--throttle", "1GB", "--poll",
                 "0.2")[0] == 0
    assert check.json("/kplan/maintenance/1")["state"] == "returning"
    rc, out, _ = kplan(capsys, "verify", "--zk", zk, "--plan", str(back / "plan"), "--timeout", "60")
    assert rc == 0 and "maintenance: broker 1 is now in service" in out
    assert not check.exists("/kplan/maintenance/1")
    end = assignment(check)
    assert per_broker(end)[1] == 11   # its share again
    # every partition the drain moved and nothing moved since is exactly as before the drain, leader included
    for k, reps in start.items():
        if 1 in reps and k != moved:
            assert end[k] == reps, (k, end[k], reps)
            assert check.state(*k)["leader"] == reps[0], (k, check.state(*k))
    assert check.lock_holders() == [] and check.throttles() == {}
