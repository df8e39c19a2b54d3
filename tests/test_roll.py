"""The restart roll on the emulated engine: a rolling restart of every broker of a cluster with RF=1 and min-ISR=2
topics (the seed incident's shape), watched continuously by an independent watcher (tests/roll_support.py):
with the restart plan nothing is ever offline or under min ISR and everything ends as it was (lists, preferred
leaders, no temporary replica, no throttle, lock released); the same roll without the plan reproduces the
incident. Then a failed gate (a broker that does not come back) stops the roll safely and a run again
resumes it; a paused roll continues; two rolls at once and a roll during a reassignment are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from apply_support import FAST, MB, Env, make_cluster, poll
from roll_support import History, assignment, leaders, log_dir

from planner import api, cli
from planner.errors import NotConverged, SafetyRefusal
from planner.execution.lock import ApplyLock
from planner.zkgate import WriteGate

pytestmark = pytest.mark.sandbox

DESC = {"brokers": [{"id": 1, "rack": "r1"}, {"id": 2, "rack": "r2"}, {"id": 3, "rack": "r3"}, {"id": 4, "rack": "r1"}],
        "topics": [
            {"name": "payments", "partitions": [{"replicas": [b], "size_bytes": 5 * MB} for b in (1, 2, 3, 4)]},
            {"name": "orders", "config": {"min.insync.replicas": "2"},
             "partitions": [{"replicas": r, "size_bytes": MB} for r in ([1, 2, 3], [2, 3, 4], [3, 4, 1], [4, 1, 2])]},
            {"name": "pairs", "config": {"min.insync.replicas": "2"},
             "partitions": [{"replicas": [1, 3], "size_bytes": MB}, {"replicas": [2, 4], "size_bytes": MB}]}]}


@pytest.fixture
def cluster(tmp_path, zk_connect):
    yield from make_cluster(tmp_path, zk_connect)


@pytest.fixture
def history(zk_server):
    """What happened to every partition, from ZooKeeper's transaction log (tests/roll_support.py)."""
    return lambda env: History(env.zk, log_dir(zk_server), "/" + env.connect.split("/", 1)[1])


def plan_for(env: Env, tmp: Path, brokers: tuple[int, ...] = (1, 2, 3, 4)) -> Path:
    run = tmp / "run"
    api.snapshot(api.SnapshotRequest(zk=env.connect, out=run / "snapshot"))
    api.plan_restart(api.RestartRequest(snapshot=run / "snapshot", out=run / "plan", brokers=brokers))
    return run / "plan"


def restart(env: Env):
    def go(b: int) -> None:
        env.sb.stop([b])
        env.sb.start([b])
    return go


def roll(env: Env, plan: Path, **kw) -> api.RollOutcome:
    how = kw.pop("restart", None) or restart(env)
    req = api.RollRequest(zk=env.connect, plan=plan, poll=0.1, restart_timeout=kw.pop("restart_timeout", 60),
                          gate_timeout=30, throttle=kw.pop("throttle", 100 * MB), **kw)
    return api.roll(req, restart=how)


def test_rolling_restart_of_every_broker_with_the_plan_loses_nothing(cluster, history, tmp_path):
    env = cluster(DESC, **FAST)
    before, lead_before = assignment(env.zk), leaders(env.zk)
    assert all(lead_before[k] == reps[0] for k, reps in before.items())
    plan = plan_for(env, tmp_path)
    doc = json.loads((plan / "plan.json").read_text())
    assert doc["protection"]["reasons"] == {"rf1": 4, "shrunk-isr": 0, "min-isr": 2}   # payments, pairs
    h = history(env).begin()
    out = roll(env, plan)
    intervals = h.end()
    assert (out.state, out.steps_done, out.steps_total, out.cannot_move) == ("completed", 4, 4, ())
    assert intervals == [], intervals
    assert h.state_writes > 40    # it saw the roll: every broker left and rejoined ISRs, leaders moved and came back
    # each broker restarted while its maintenance state said so, one at a time, in the plan's order, and none
    # stays in maintenance
    seen = [(kind, b, what) for _z, kind, b, what in h.events]
    want = []
    for b in doc["roll"]["order"]:
        want += [("maintenance", b, "restarting"), ("registration", b, "left"), ("registration", b, "registered"),
                 ("maintenance", b, None)]
    assert seen == want, seen
    # everything as before: lists (the temporary replicas are gone), preferred leaders, every ISR full, no
    # reassignment, election or throttle left, the lock released
    env.check.assert_nothing_lost({k: len(v) for k, v in before.items()}, before)
    assert leaders(env.zk) == lead_before
    record = env.check.json(f"/kplan/rolls/{doc['id'].split(':')[1]}")
    assert (record["state"], record["phase"]) == ("completed", "done")
    assert [s["state"] for s in record["steps"]] == ["done"] * 4
    assert [s["broker"] for s in record["steps"]] == doc["roll"]["order"]
    outcome = json.loads((plan.parent / "roll" / "outcome.json").read_text())
    assert outcome["state"] == "completed" and outcome["steps_done"] == 4
    # running it again does nothing
    assert roll(env, plan).state == "already-completed"


def test_the_same_roll_without_the_plan_reproduces_the_incident(cluster, history, tmp_path):
    """The harness can fail: restarting each broker as it is (no plan) takes its RF=1 partition offline and
    the RF=2 min-ISR-2 pair under min ISR while it is down, and the watcher sees it."""
    env = cluster(DESC, **FAST)
    h = history(env).begin()
    for b in (1, 2, 3, 4):
        env.sb.stop([b])
        env.sb.start([b])
        env.sb.wait_settled(30)
    intervals = h.end()
    offline = {i.partition for i in intervals if i.kind == "offline"}
    under = {i.partition for i in intervals if i.kind == "under_min_isr"}
    assert offline == {"payments-0", "payments-1", "payments-2", "payments-3"}
    assert under == {"pairs-0", "pairs-1"}


def test_a_broker_that_does_not_come_back_stops_the_roll_safely_and_a_run_again_resumes(cluster, history, tmp_path,
                                                                                         capsys):
    env = cluster(DESC, **FAST)
    before = assignment(env.zk)
    plan = plan_for(env, tmp_path, (1, 2))
    doc = json.loads((plan / "plan.json").read_text())
    first = doc["roll"]["order"][0]
    h = history(env).begin()
    with pytest.raises(NotConverged, match=f"broker {first} left at .* and has not registered again within 2 s.*"
                                           "Start it, then run the roll again"):
        roll(env, plan, restart=lambda b: env.sb.stop([b]), restart_timeout=2)
    hex_id = doc["id"].split(":")[1]
    rec = env.check.json(f"/kplan/rolls/{hex_id}")
    assert rec["state"] == "failed" and rec["steps"][0]["state"] == "restarting"
    assert not env.check.lock_holders()
    # the cluster is safe meanwhile: broker down, its RF=1 partition led by its temporary replica
    assert env.check.state("payments", first - 1)["leader"] != -1
    env.sb.start([first])
    # resumed by the CLI, with a pause after its first broker (the one that was left half way)
    assert cli.main(["roll", "--zk", env.connect, "--plan", str(plan), "--pause", "--poll", "0.1",
                     "--restart-command", _restart_command(env), "--gate-timeout", "30"]) == 0
    assert "paused after broker" in capsys.readouterr().out
    assert env.check.json(f"/kplan/rolls/{hex_id}")["state"] == "paused"
    assert cli.main(["roll", "--zk", env.connect, "--plan", str(plan), "--poll", "0.1",
                     "--restart-command", _restart_command(env), "--gate-timeout", "30"]) == 0
    intervals = h.end()
    assert intervals == [], intervals
    env.check.assert_nothing_lost({k: len(v) for k, v in before.items()}, before)


def _restart_command(env: Env) -> str:
    import sys

    kplan = f"{sys.executable} -m planner.cli"
    return f"sh -c '{kplan} sandbox stop --dir {env.sb.dir} {{broker}} && {kplan} sandbox start --dir {env.sb.dir} {{broker}}'"


def test_two_rolls_at_once_and_a_roll_during_a_reassignment_are_refused_writing_nothing(cluster, tmp_path):
    env = cluster(DESC, **FAST)
    plan = plan_for(env, tmp_path, (1,))
    other = ApplyLock(WriteGate(env.zk), "roll", "sha256:other")
    other.acquire()
    try:
        tree = env.check.tree()
        with pytest.raises(SafetyRefusal, match="another kplan holds the lock /kplan/lock: kplan roll of plan "
                                                "sha256:other"):
            roll(env, plan)
        assert env.check.tree() == tree
    finally:
        other.release()
    # a reassignment in flight (to a broker that is down, so it stays in flight)
    env.sb.stop([4])
    env.zk.create("/admin/reassign_partitions",
                  b'{"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[4,2,3]}]}')
    poll(lambda: env.check.topic("orders").get("adding_replicas"), what="the reassignment in flight")
    tree = {k: v for k, v in env.check.tree().items() if not k.startswith("/brokers/topics/orders")}
    with pytest.raises(SafetyRefusal, match="a roll starts only when no reassignment is in flight"):
        roll(env, plan)
    assert not env.check.lock_holders()
    assert {k: v for k, v in env.check.tree().items() if not k.startswith("/brokers/topics/orders")} == tree


def test_sigterm_stops_the_roll_once_the_broker_in_flight_is_done_and_a_run_again_finishes(cluster, tmp_path):
    """SIGTERM arrives while the first broker restarts (sent by its restart command, to the kplan that runs it):
    the roll answers at once, takes that broker to the end of its step (back, in its ISRs, leading again, out of
    maintenance), records itself as stopped, releases the lock and exits 143 without touching the next broker.
    (Before, the signal ended the roll mid-step: broker left in state `restarting`, still in maintenance.)"""
    import os
    import signal
    import subprocess
    import sys

    env = cluster(DESC, **FAST)
    before, lead_before = assignment(env.zk), leaders(env.zk)
    plan = plan_for(env, tmp_path, (1, 2))
    doc = json.loads((plan / "plan.json").read_text())
    first, second = doc["roll"]["order"]
    kplan = f"{sys.executable} -m planner.cli"
    command = (f"sh -c '[ {{broker}} = {first} ] && kill -TERM $PPID; {kplan} sandbox stop --dir {env.sb.dir} "
               f"{{broker}} && {kplan} sandbox start --dir {env.sb.dir} {{broker}}'")
    args = ["roll", "--zk", env.connect, "--plan", str(plan), "--poll", "0.1", "--gate-timeout", "30",
            "--throttle", "100MB", "--restart-command", command]
    proc = subprocess.run([sys.executable, "-m", "planner.cli", *args], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1])))
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr[-3000:]
    assert "kplan roll: SIGTERM: stopping once the broker in flight is back" in proc.stderr
    assert f"stopped on request: 1 of 2 brokers restarted, none in flight; run the roll again to continue with " \
           f"broker {second}" in proc.stdout, proc.stdout
    rec = env.check.json(f"/kplan/rolls/{doc['id'].split(':')[1]}")
    assert rec["state"] == "failed" and rec["error"].startswith("interrupted")
    assert [s["state"] for s in rec["steps"]] == ["done", "pending"]
    maint = "/kplan/maintenance"
    assert not env.check.lock_holders() and not (env.zk.exists(maint) and env.zk.get_children(maint))
    assert leaders(env.zk) == lead_before      # the first broker leads again what it led; nothing else moved
    args[-1] = _restart_command(env)           # run again: it continues with the second broker and finishes
    assert cli.main(args) == 0
    assert [s["state"] for s in env.check.json(f"/kplan/rolls/{doc['id'].split(':')[1]}")["steps"]] == ["done"] * 2
    assert leaders(env.zk) == lead_before
    env.check.assert_nothing_lost({k: len(v) for k, v in before.items()}, before)


def test_the_demotion_does_not_hand_leadership_to_a_broker_in_maintenance(cluster, tmp_path):
    """orders-0 [1,2,3] is led by broker 1; its next in-sync replica is broker 2, but broker 2 is in maintenance
    (draining: it gets no preferred leadership from any other plan), so while broker 1 restarts broker 3 leads."""
    from planner import maintenance as mt
    from planner.maintenance_zk import ROOT

    env = cluster(DESC, **FAST)
    env.zk.create(f"{ROOT}/2", mt.encode(mt.Entry(2, mt.DRAINING, reason="test: a drain in progress")),
                  makepath=True)
    plan = plan_for(env, tmp_path, (1,))
    seen: dict = {}

    def go(b: int) -> None:
        seen.update(leaders(env.zk))
        restart(env)(b)

    assert roll(env, plan, restart=go).state == "completed"
    assert seen[("orders", 0)] == 3, seen
    assert leaders(env.zk)[("orders", 0)] == 1    # and back to its preferred leader after the roll
