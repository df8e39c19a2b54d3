"""kplan apply / verify / cancel on the emulated sandbox (real ZooKeeper, emulated brokers and controller).

Expected states are worked out by hand from the plan and Kafka's rules (docs/KAFKA_ZK.md §1, §3) and read back
with an independent checker (tests/apply_support.py). Every test that writes ends by asserting that nothing
was lost: every partition led, RF intact, the plan completed or cleanly rolled back, throttles removed, lock
released.
"""

from __future__ import annotations

import json
import re

import pytest
from apply_support import FINAL, MB, Background, drain_desc, drain_plan, make_cluster, poll, rf_of, write_plan

pytestmark = pytest.mark.sandbox


@pytest.fixture
def cluster(tmp_path, zk_connect):
    yield from make_cluster(tmp_path, zk_connect)


def test_drain_applies_batches_in_order_with_kafka_style_throttles_then_verifies(cluster, tmp_path, capsys):
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
    # The progress line (stderr, one line per change when not a terminal): partitions, bytes, rate, ETA.
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("apply: running · batches 0/3 · partitions 0/3 · 0 B/68.7 MiB")
    assert any("batch 1 in flight" in x for x in lines)
    after_first = next(x for x in lines if "partitions 1/3" in x)  # a-0 (24 MB) done: a rate and an ETA
    assert "22.9 MiB/68.7 MiB" in after_first and re.search(r" [\d.]+ [KMG]?i?B/s · ETA \d+:\d\d:\d\d$", after_first)
    assert lines[-1].startswith("apply: completed · batches 3/3 · partitions 3/3 · 68.7 MiB/68.7 MiB")
    # ... and what another process reads (the review UI): the last progress record and the outcome.
    prog = json.loads((tmp_path / "run" / "apply" / "progress.json").read_text())
    assert (prog["state"], prog["units_done"], prog["units_total"], prog["done"], prog["total"]) == (
        "completed", 3, 3, 3, 3)
    assert prog["bytes_done"] == prog["bytes_total"] == 3 * 24 * MB
    outcome = json.loads((tmp_path / "run" / "apply" / "outcome.json").read_text())
    assert (outcome["state"], outcome["units_submitted"], outcome["resumed"]) == ("completed", 3, False)
    # Throttles while each data batch was in flight, as Kafka's tool computes them: current replicas are
    # leader-throttled, added ones follower-throttled, every source and destination broker rate-limited.
    # Broker 4 (a destination of batch 2 only) already has the run's rate during batch 1: both batches run at
    # the same rate, so rates are set for the stretch (docs/APPLY.md); the replica lists follow each batch.
    r = "12000000"
    assert seen[1] == {
        "topics/a": {"leader.replication.throttled.replicas": "0:1,0:2",
                     "follower.replication.throttled.replicas": "0:3"},
        "topics/b": {"leader.replication.throttled.replicas": "1:4"},
        "brokers/1": {"leader.replication.throttled.rate": r, "follower.replication.throttled.rate": r},
        "brokers/2": {"leader.replication.throttled.rate": r, "follower.replication.throttled.rate": r},
        "brokers/3": {"leader.replication.throttled.rate": r, "follower.replication.throttled.rate": r},
        "brokers/4": {"leader.replication.throttled.rate": r, "follower.replication.throttled.rate": r},
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
    # Every config write had its change notification. Batch 1 sets its throttles and the stretch's rates
    # (brokers 1-4); batch 2's submission swaps the replica lists for its own in the same transaction, writing
    # only what differs (topics a and b; no broker: same rate); the end removes them all.
    changes = env.check.config_changes()[before_changes:]
    expected = ["brokers/1", "brokers/2", "brokers/3", "brokers/4", "topics/a"] + ["topics/a", "topics/b"] + \
        ["brokers/1", "brokers/2", "brokers/3", "brokers/4", "topics/a", "topics/b"]
    assert changes == expected
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
    assert env.kplan("apply", "--no-throttle", "--zk", env.connect, "--plan", str(tmp_path / "run" / "plan")) == 0
    assert env.check.tree("/brokers") == tree


# ------------------------------------------------------------------------------------------- refusals
def _no_writes(env, before: dict, argv: list[str], rc: int, capsys, *expect: str) -> str:
    """Run kplan; it must exit `rc`, say each of `expect`, and leave every persistent znode as it was."""
    assert env.kplan(*argv) == rc
    out = capsys.readouterr()
    text = out.out + out.err
    for e in expect:
        assert e in text, f"{e!r} not in:\n{text}"
    assert env.check.tree() == before
    assert not env.check.exists("/kplan")
    return text


def test_bad_input_is_refused_before_connecting_and_writes_nothing(cluster, tmp_path, capsys):
    env = cluster(drain_desc())
    plan_dir = tmp_path / "run" / "plan"
    drain_plan(plan_dir)
    before = env.check.tree()
    doc = json.loads((plan_dir / "plan.json").read_text())
    doc["moves"][0]["to"] = [2, 4]  # edited after review
    (plan_dir / "plan.json").write_text(json.dumps(doc))
    _no_writes(env, before, ["apply", "--no-throttle", "--zk", env.connect, "--plan", str(plan_dir)], 2, capsys, "does not match its id")
    drain_plan(plan_dir)
    _no_writes(env, before, ["apply", "--no-throttle", "--zk", env.connect, "--plan", str(tmp_path / "nope")], 2, capsys, "nope")
    _no_writes(env, before, ["apply", "--no-throttle", "--zk", env.connect, "--plan", str(plan_dir), "--max-concurrent-per-broker",
                             "9"], 2, capsys, "lower that")
    _no_writes(env, before, ["apply", "--no-throttle", "--zk", env.connect, "--plan", str(plan_dir), "--poll", "0"], 2, capsys,
               "poll must be positive")
    _no_writes(env, before, ["verify", "--zk", "not a host", "--plan", str(plan_dir)], 2, capsys, "connect string")
    with pytest.raises(SystemExit) as exc:
        env.kplan("apply", "--zk", env.connect, "--plan", str(plan_dir), "--throttle", "fast")
    assert exc.value.code == 2
    assert env.check.tree() == before


def test_dry_run_prints_every_write_and_makes_none(cluster, tmp_path, capsys):
    env = cluster(drain_desc())
    plan_dir = tmp_path / "run" / "plan"
    drain_plan(plan_dir)
    before = env.check.tree()
    text = _no_writes(env, before, ["apply", "--zk", env.connect, "--plan", str(plan_dir), "--dry-run",
                                    "--throttle", "5MB"], 0, capsys)
    lines = text.splitlines()
    creates = [x for x in lines if "create /admin/reassign_partitions " in x]
    assert len(creates) == 3  # one per batch, each Kafka's exact schema
    assert json.loads(creates[1].split(" ", 4)[4]) == {
        "version": 1, "partitions": [{"topic": "a", "partition": 0, "replicas": [2, 3]}]}
    assert any("create /admin/preferred_replica_election " in x for x in lines)
    # A dry run prints each data batch's throttles set then removed: batch 1 sets topic a and the rates of the
    # stretch's brokers 1-4 (5 writes, 5 removals), batch 2 topics a, b and brokers 1-4 (6 and 6).
    assert sum("create_sequential /config/changes/config_change_" in x for x in lines) == 22
    assert any('"leader.replication.throttled.replicas":"0:1,0:2"' in x for x in lines)
    assert not (tmp_path / "run" / "apply").exists()


def test_stale_plan_is_refused_naming_the_partitions(cluster, tmp_path, capsys):
    env = cluster(drain_desc())
    plan_dir = tmp_path / "run" / "plan"
    from apply_support import write_plan
    write_plan(plan_dir, [("a", 0, [1, 3], [2, 3], 1000), ("a", 2, [3, 4], [4, 3], 0), ("b", 1, [4, 2], [4, 1], 1000)],
               [("leadership", [("a", 2, [4, 3])]), ("data", [("a", 0, [2, 3]), ("b", 1, [4, 1])])])
    before = env.check.tree()
    text = _no_writes(env, before, ["apply", "--no-throttle", "--zk", env.connect, "--plan", str(plan_dir)], 1, capsys,
                      "a-0 (plan expects [1, 3], cluster has [1, 2])", "no longer match")
    assert "a-2" not in text and "b-1" not in text


def test_foreign_or_malformed_reassignment_is_refused_and_left_untouched(cluster, tmp_path, capsys):
    env = cluster(drain_desc())
    plan_dir = tmp_path / "run" / "plan"
    drain_plan(plan_dir)
    # log_dirs makes Kafka's controller ignore the znode forever: it stays, blocking everything.
    malformed = b'{"version":1,"partitions":[{"topic":"b","partition":1,"replicas":[4,2],"log_dirs":["any"]}]}'
    env.zk.create("/admin/reassign_partitions", malformed)
    before = env.check.tree()
    _no_writes(env, before, ["apply", "--no-throttle", "--zk", env.connect, "--plan", str(plan_dir)], 1, capsys,
               "malformed", "untouched")
    assert env.zk.get("/admin/reassign_partitions")[0] == malformed
    env.zk.delete("/admin/reassign_partitions")  # the operator removes it
    # A well-formed foreign reassignment stuck on an unregistered broker.
    env.zk.create("/admin/reassign_partitions", b'{"version":1,"partitions":[{"topic":"a","partition":2,'
                                                b'"replicas":[3,9]}]}')
    poll(lambda: env.check.topic("a").get("adding_replicas"), what="the controller to start the foreign move")
    before = env.check.tree()
    _no_writes(env, before, ["apply", "--no-throttle", "--zk", env.connect, "--plan", str(plan_dir)], 1, capsys,
               "not this run's", "a-2->[3, 9]")


def test_partitions_being_reassigned_without_the_znode_are_refused(cluster, tmp_path, capsys):
    env = cluster(drain_desc())
    plan_dir = tmp_path / "run" / "plan"
    drain_plan(plan_dir)
    env.zk.create("/admin/reassign_partitions", b'{"version":1,"partitions":[{"topic":"b","partition":0,'
                                                b'"replicas":[1,9]}]}')
    poll(lambda: env.check.topic("b").get("adding_replicas"), what="the controller to start the move")
    env.zk.delete("/admin/reassign_partitions")  # gone, but b-0 is still adding broker 9
    before = env.check.tree()
    _no_writes(env, before, ["apply", "--no-throttle", "--zk", env.connect, "--plan", str(plan_dir)], 1, capsys,
               "being reassigned by someone else", "b-0 (adding [9], removing [3])")


def test_unregistered_target_broker_and_kraft_migration_are_refused(cluster, tmp_path, capsys):
    env = cluster(drain_desc())
    plan_dir = tmp_path / "run" / "plan"
    drain_plan(plan_dir)
    env.sb.kill([3])
    env.sb.wait_settled(30)
    before = env.check.tree()
    _no_writes(env, before, ["apply", "--no-throttle", "--zk", env.connect, "--plan", str(plan_dir)], 1, capsys,
               "not registered", "broker 3 (2 partitions: a-0, b-0)")
    env.sb.start([3])
    env.sb.wait_settled(30)
    env.zk.create("/migration", b'{"version":0}')
    before = env.check.tree()
    _no_writes(env, before, ["apply", "--no-throttle", "--zk", env.connect, "--plan", str(plan_dir)], 1, capsys, "KRaft")


def test_a_second_apply_is_refused_naming_the_holder(cluster, tmp_path, capsys):
    env = cluster(drain_desc(size=20 * MB))
    plan_dir = tmp_path / "run" / "plan"
    doc = drain_plan(plan_dir, size=20 * MB)
    other = tmp_path / "other" / "plan"
    from apply_support import write_plan
    write_plan(other, [("a", 2, [3, 4], [4, 3], 0)], [("leadership", [("a", 2, [4, 3])])])
    first = Background(lambda: env.kplan("apply", "--zk", env.connect, "--plan", str(plan_dir), "--throttle", "10MB",
                                         "--poll", "0.2"))
    poll(lambda: env.check.unit_states(doc)[1:2] == ["submitted"], what="the first apply's data batch in flight")
    capsys.readouterr()
    assert env.kplan("apply", "--no-throttle", "--zk", env.connect, "--plan", str(other)) == 1
    err = capsys.readouterr().err
    assert "another kplan holds the lock /kplan/lock: kplan apply of plan " + doc["id"] in err
    assert f"pid {__import__('os').getpid()}" in err
    assert first.result() == 0
    env.check.assert_nothing_lost(rf_of(env.desc), FINAL)


def test_verify_names_a_foreign_reassignment_in_the_way_and_leaves_it(cluster, tmp_path, capsys):
    env = cluster(drain_desc())
    plan_dir = tmp_path / "run" / "plan"
    drain_plan(plan_dir)
    # Someone else moves a-0 (a partition of the plan) onto broker 9, which does not exist: stuck for good.
    foreign = b'{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[1,9]}]}'
    env.zk.create("/admin/reassign_partitions", foreign)
    poll(lambda: env.check.topic("a").get("adding_replicas"), what="the controller to start the foreign move")
    capsys.readouterr()
    assert env.kplan("verify", "--zk", env.connect, "--plan", str(plan_dir), "--timeout", "0.5", "--poll", "0.1") == 1
    err = capsys.readouterr().err
    assert "a-0: a foreign reassignment in the way: /admin/reassign_partitions moves it to [1, 9]" in err
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["converged"] is False and report["partitions"] == {"converged": 0, "total": 3}
    stalled = {s["partition"]: " ".join(s["reasons"]) for s in report["stalled"]}
    assert set(stalled) == {"a-0", "a-1", "b-0"}
    assert "target broker 9 not registered" in stalled["a-0"]
    for k in ("a-1", "b-0"):  # nothing of this run was applied: the znode blocks its first batch
        assert "a foreign reassignment in the way: /admin/reassign_partitions holds other partitions" in stalled[k]
    assert env.zk.get("/admin/reassign_partitions")[0] == foreign  # left untouched
    assert env.check.throttles() == {} and env.check.lock_holders() == []


def test_the_planners_suggested_throttle_is_applys_default(cluster, tmp_path, capsys):
    """A plan from the real planner (issue 11) with sizes: each data batch's suggested_throttle_bytes_per_s is
    the rate apply writes for it; --throttle overrides it."""
    from planner import api

    env = cluster(drain_desc(size=24 * MB))
    run = api.RunFolder(tmp_path / "run")
    api.snapshot(api.SnapshotRequest(zk=env.connect, out=run.snapshot, sizes=env.sb.dir / "logdirs.json"))
    plan = api.plan_drain(api.DrainRequest(snapshot=run.snapshot, out=run.plan, brokers=(1,), batch_seconds=1,
                                           max_concurrent_per_broker=1)).plan
    data = [b for b in plan.batches if b.kind == "data"]
    # each data batch copies one 24 MB partition: 24 MB into its busiest broker in the plan's 1 s
    assert len(data) == 3 and {b.suggested_throttle_bytes_per_s for b in data} == {24 * MB}

    def rates_per_submission(*extra: str) -> list[set[str]]:
        capsys.readouterr()
        assert env.kplan("apply", "--zk", env.connect, "--plan", str(run.plan), "--dry-run", *extra) == 0
        out, rates = [], set()
        for line in capsys.readouterr().out.splitlines():
            if " /config/brokers/" in line:
                rates |= set(re.findall(r'"(?:leader|follower)\.replication\.throttled\.rate":"(\d+)"', line))
            elif " create /admin/reassign_partitions " in line:
                out.append(rates)
                rates = set()
        return out

    assert rates_per_submission() == [set()] + [{str(24 * MB)}] * 3  # leadership batch: nothing copied
    assert rates_per_submission("--throttle", "5MB") == [set()] + [{str(5 * MB)}] * 3
    assert not env.check.exists("/kplan") and env.check.throttles() == {}


def test_plans_kept_side_by_side_keep_their_own_records(cluster, tmp_path):
    """Issue 19 item 6: two plans in one folder. Each plan's apply/ and report.json are its own (`<plan>-run/`
    beside it), verifying one never touches the other's report, and --out is refused on or around the plan."""
    env = cluster(drain_desc())
    plans = tmp_path / "plans"
    p1 = write_plan(plans / "p1", [("a", 2, [3, 4], [3, 1], 1000)], [("data", [("a", 2, [3, 1])])])
    p2 = write_plan(plans / "p2", [("b", 1, [4, 2], [4, 3], 1000)], [("data", [("b", 1, [4, 3])])])
    for p in ("p1", "p2"):
        assert env.kplan("apply", "--zk", env.connect, "--plan", str(plans / p), "--throttle", "1GB",
                         "--poll", "0.2") == 0
    assert env.kplan("verify", "--zk", env.connect, "--plan", str(plans / "p2"), "--timeout", "30") == 0
    report2 = (plans / "p2-run" / "report.json").read_bytes()
    assert env.kplan("verify", "--zk", env.connect, "--plan", str(plans / "p1"), "--timeout", "30") == 0
    assert (plans / "p2-run" / "report.json").read_bytes() == report2   # untouched by p1's verify
    for p, doc in (("p1", p1), ("p2", p2)):
        for f in ("report.json", "apply/outcome.json", "apply/progress.json", "verify/progress.json"):
            assert json.loads((plans / f"{p}-run" / f).read_text())["plan_id"] == doc["id"], (p, f)
    assert sorted(x.name for x in plans.iterdir()) == ["p1", "p1-run", "p2", "p2-run"]
    env.check.assert_nothing_lost(rf_of(env.desc), {("a", 2): [3, 1], ("b", 1): [4, 3]})
