"""Faults during apply on the emulated sandbox: a target broker killed mid-batch, the controller's broker
killed mid-batch, the apply process killed and run again, its ZooKeeper session expired, cancel (stop after
the batch, or revert it), a throttle too low for the bytes left. Each ends with the independent check that
nothing was lost (apply_support.Checker.assert_nothing_lost)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from apply_support import FINAL, MB, Background, drain_desc, drain_plan, make_cluster, poll, rf_of

from planner import zk as zkmod
from planner.execution.executor import Executor, Options
from planner.execution.steps import load_plan

pytestmark = pytest.mark.sandbox

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cluster(tmp_path, zk_connect):
    yield from make_cluster(tmp_path, zk_connect)


def admin_children_version(env) -> int:
    """/admin's child version: ZooKeeper bumps it on every create and delete of a child, so each reassignment or
    election znode (created by apply or verify, deleted by the controller when done) counts exactly 2."""
    return env.zk.exists("/admin").cversion


def in_flight(env, doc, unit: int):
    return lambda: (env.check.unit_states(doc)[unit:unit + 1] == ["submitted"]
                    and env.check.topic(doc["batches"][unit]["partitions"][0][0]).get("adding_replicas"))


def spawn_apply(env, plan_dir: Path, *extra: str) -> subprocess.Popen:
    envvars = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "planner.cli", "apply", "--zk", env.connect, "--plan",
                             str(plan_dir), "--poll", "0.2", *extra], env=envvars, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def test_target_broker_killed_mid_batch_is_named_by_verify_and_converges_after_start(cluster, tmp_path, capsys):
    env = cluster(drain_desc(size=30 * MB))
    plan_dir = tmp_path / "run" / "plan"
    doc = drain_plan(plan_dir, size=30 * MB)
    admin = admin_children_version(env)
    bg = Background(lambda: env.kplan("apply", "--zk", env.connect, "--plan", str(plan_dir), "--throttle", "10MB",
                                      "--poll", "0.2", "--timeout", "8"))
    poll(in_flight(env, doc, 1), what="batch 1 (a-0 -> [2,3]) copying to broker 3")
    env.sb.kill([3])
    assert bg.result() == 1
    err = capsys.readouterr().err
    assert "timed out" in err and "a-0: " in err and "target broker 3 not registered" in err
    # verify names the stall and why; the in-flight move keeps its throttle, nothing else does.
    assert env.kplan("verify", "--zk", env.connect, "--plan", str(plan_dir), "--timeout", "1") == 1
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    stalled = {s["partition"]: s["reasons"] for s in report["stalled"]}
    assert "target broker 3 not registered" in stalled["a-0"]
    assert any("not submitted yet: batch 2" in r for r in stalled["a-1"])
    assert report["converged"] is False
    assert env.check.throttles().get("topics/a") == {"leader.replication.throttled.replicas": "0:1,0:2",
                                                      "follower.replication.throttled.replicas": "0:3"}
    assert env.check.run(doc)["state"] == "failed"
    env.sb.start([3])
    assert env.kplan("apply", "--zk", env.connect, "--plan", str(plan_dir), "--throttle", "100MB", "--poll",
                     "0.2") == 0
    assert env.kplan("verify", "--zk", env.connect, "--plan", str(plan_dir), "--timeout", "30") == 0
    env.sb.wait_settled(30)
    env.check.assert_nothing_lost(rf_of(env.desc), FINAL)
    # 3 batches and 2 elections (apply's after the leadership batch, verify's for a-1), each created once
    assert admin_children_version(env) - admin == 2 * (3 + 2)


def test_controller_broker_killed_mid_batch(cluster, tmp_path):
    env = cluster(drain_desc(size=30 * MB))
    plan_dir = tmp_path / "run" / "plan"
    from apply_support import write_plan
    doc = write_plan(plan_dir, [("a", 0, [1, 2], [2, 3], 30 * MB), ("b", 0, [1, 3], [3, 2], 30 * MB)],
                     [("data", [("a", 0, [2, 3]), ("b", 0, [3, 2])])])
    controller = env.check.json("/controller")["brokerid"]
    assert controller == 4  # not a source or target of the plan
    bg = Background(lambda: env.kplan("apply", "--zk", env.connect, "--plan", str(plan_dir), "--throttle", "15MB",
                                      "--poll", "0.2"))
    poll(in_flight(env, doc, 0), what="the batch copying")
    env.sb.kill([controller])
    poll(lambda: env.check.exists("/controller") and env.check.json("/controller")["brokerid"] != controller,
         what="a new controller")
    assert bg.result() == 0
    env.sb.start([controller])
    env.sb.wait_settled(30)
    expect = {("a", 0): [2, 3], ("b", 0): [3, 2]}
    env.check.assert_nothing_lost(rf_of(env.desc), expect)


def test_apply_process_killed_mid_run_resumes_without_resubmitting(cluster, tmp_path):
    env = cluster(drain_desc(size=20 * MB))
    plan_dir = tmp_path / "run" / "plan"
    doc = drain_plan(plan_dir, size=20 * MB)
    admin = admin_children_version(env)
    proc = spawn_apply(env, plan_dir, "--throttle", "10MB", "--connect-timeout", "1")
    poll(in_flight(env, doc, 1), what="batch 1 in flight")
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    assert env.check.lock_holders(), "the killed apply's lock lives until its session expires"
    assert env.check.throttles(), "its throttles are still set"
    # Run again: waits for the dead session's lock, then resumes at batch 1 (in flight), never resubmits it.
    assert env.kplan("apply", "--zk", env.connect, "--plan", str(plan_dir), "--throttle", "50MB", "--poll", "0.2",
                     "--lock-wait", "30") == 0
    outcome = json.loads((tmp_path / "run" / "apply" / "outcome.json").read_text())
    assert outcome["resumed"] is True and outcome["units_submitted"] == 1  # only batch 2 was submitted by it
    assert admin_children_version(env) - admin == 2 * (3 + 1)  # 3 batches, 1 election: none created twice
    run = env.check.run(doc)
    assert [u[0] for u in run["units"]] == ["completed"] * 3
    assert any("resumed" in h[1] for h in run["history"])
    env.check.assert_nothing_lost(rf_of(env.desc), {k: v for k, v in FINAL.items() if k != ("a", 1)} | {
        ("a", 1): [4, 2]})


def test_session_expired_mid_apply_takes_the_lock_again_and_finishes(cluster, tmp_path):
    env = cluster(drain_desc(size=20 * MB))
    plan_dir = tmp_path / "run" / "plan"
    doc = drain_plan(plan_dir, size=20 * MB)
    admin = admin_children_version(env)
    client = zkmod.connect(env.connect, timeout=4)
    try:
        ex = Executor(client, load_plan(plan_dir), Options(throttle=10 * MB, poll=0.2))
        bg = Background(ex.apply)
        poll(in_flight(env, doc, 1), what="batch 1 in flight")
        lock_before = env.check.lock_holders()
        # Expire the apply's session the way ZooKeeper does it: another connection takes the session over
        # with its id and password and closes it.
        from kazoo.client import KazooClient
        thief = KazooClient(hosts=env.connect.split("/", 1)[0], client_id=client.client_id)
        thief.start(10)
        thief.stop()
        thief.close()
        result = bg.result(120)
    finally:
        client.stop()
        client.close()
    assert result.state == "completed" and result.resumed is True
    assert env.check.lock_holders() == []
    assert lock_before and lock_before != [], "it held the lock before"
    assert admin_children_version(env) - admin == 2 * (3 + 1)  # 3 batches, 1 election: none created twice
    env.check.assert_nothing_lost(rf_of(env.desc), FINAL)


def test_cancel_stops_after_the_batch_in_flight(cluster, tmp_path):
    env = cluster(drain_desc(size=20 * MB))
    plan_dir = tmp_path / "run" / "plan"
    doc = drain_plan(plan_dir, size=20 * MB)
    bg = Background(lambda: env.kplan("apply", "--zk", env.connect, "--plan", str(plan_dir), "--throttle", "10MB",
                                      "--poll", "0.2"))
    poll(in_flight(env, doc, 1), what="batch 1 in flight")
    assert env.kplan("cancel", "--zk", env.connect, "--plan", str(plan_dir), "--timeout", "60") == 0
    assert bg.result() == 1
    run = env.check.run(doc)
    assert run["state"] == "cancelled"
    assert [u[0] for u in run["units"]] == ["completed", "completed", "pending"]
    # batch 1 finished; batch 2's partitions stay where the leadership batch put them
    expect = {("a", 0): [2, 3], ("a", 1): [2, 1], ("b", 0): [3, 1]}
    env.check.assert_nothing_lost(rf_of(env.desc), expect)
    assert env.kplan("apply", "--no-throttle", "--zk", env.connect, "--plan", str(plan_dir)) == 1  # a cancelled run stays cancelled


def test_cancel_revert_of_a_killed_apply_moves_the_batch_back(cluster, tmp_path, capsys):
    env = cluster(drain_desc(size=20 * MB))
    plan_dir = tmp_path / "run" / "plan"
    doc = drain_plan(plan_dir, size=20 * MB)
    proc = spawn_apply(env, plan_dir, "--throttle", "10MB", "--connect-timeout", "1")
    poll(in_flight(env, doc, 2), what="batch 2 in flight", timeout=60)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    # No apply runs any more: cancel takes the lock once the dead session is gone and does the work itself.
    capsys.readouterr()
    assert env.kplan("cancel", "--zk", env.connect, "--plan", str(plan_dir), "--revert", "--timeout", "60") == 0
    # batches 0 and 1 stay applied; batch 2 completed and was moved back (issue 19: it said 3)
    assert "batch 2 was moved back to the replicas it started from; 2 of 3 batches stay applied" in \
        capsys.readouterr().out
    run = env.check.run(doc)
    assert run["state"] == "reverted" and run["revert"]["unit"] == 2
    expect = {("a", 0): [2, 3], ("a", 1): [2, 1], ("b", 0): [3, 1]}
    env.check.assert_nothing_lost(rf_of(env.desc), expect)


def test_a_cancel_that_runs_out_of_time_says_so_and_leaves_the_run_to_resume_or_cancel(cluster, tmp_path, capsys):
    """A cancel that does the work itself (the apply was killed) and whose --timeout runs out while the batch is
    in flight: one line saying so, exit 1, the run left cancelling, the lock released. (It crashed with a TypeError instead: the
    message formatted the apply's own timeout, None in a cancel; seen in issue 19's ZooKeeper-death test.)"""
    env = cluster(drain_desc(size=20 * MB))
    plan_dir = tmp_path / "run" / "plan"
    doc = drain_plan(plan_dir, size=20 * MB)
    proc = spawn_apply(env, plan_dir, "--throttle", "1MB", "--connect-timeout", "1")
    poll(in_flight(env, doc, 1), what="batch 1 in flight (20 MB at 1 MB/s)", timeout=60)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    poll(lambda: env.check.lock_holders() == [], what="the killed apply's lock gone with its session")
    capsys.readouterr()
    assert env.kplan("cancel", "--zk", env.connect, "--plan", str(plan_dir), "--timeout", "2", "--poll", "0.2") == 1
    err = capsys.readouterr().err
    assert "kplan cancel: error: cancel timed out after 2 s while batch 1 was in flight; 1 partitions not done: " \
           "a-0: throttle too low for the bytes left" in err, err
    assert env.check.unit_states(doc) == ["completed", "submitted", "pending"]
    assert env.check.run(doc)["state"] == "cancelling" and env.check.lock_holders() == []   # run cancel again
    assert set(env.check.throttles()) >= {"topics/a"}   # the batch in flight keeps its throttle


def test_verify_names_a_throttle_too_low_and_a_resumed_apply_raises_it(cluster, tmp_path):
    env = cluster(drain_desc(size=200 * MB))
    plan_dir = tmp_path / "run" / "plan"
    doc = drain_plan(plan_dir, size=200 * MB)
    assert env.kplan("apply", "--zk", env.connect, "--plan", str(plan_dir), "--throttle", "1MB", "--poll", "0.2",
                     "--timeout", "3") == 1
    assert env.kplan("verify", "--zk", env.connect, "--plan", str(plan_dir), "--timeout", "0") == 1
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    reasons = {s["partition"]: " ".join(s["reasons"]) for s in report["stalled"]}
    assert "throttle too low for the bytes left" in reasons["a-0"] and "broker 3 at 1,000,000 B/s" in reasons["a-0"]
    assert env.check.unit_states(doc) == ["completed", "submitted", "pending"]
    assert env.kplan("apply", "--zk", env.connect, "--plan", str(plan_dir), "--throttle", "1GB", "--poll",
                     "0.2") == 0
    assert env.kplan("verify", "--zk", env.connect, "--plan", str(plan_dir), "--timeout", "30") == 0
    env.check.assert_nothing_lost(rf_of(env.desc), FINAL)


class Lines:
    """A child's output, line by line, each with the time it arrived (to measure when something was said)."""

    def __init__(self, proc: subprocess.Popen):
        import threading
        import time

        self.got: list[tuple[float, str]] = []
        self._clock = time.monotonic

        def read() -> None:
            for line in proc.stdout:
                self.got.append((self._clock(), line.rstrip("\n")))

        self.thread = threading.Thread(target=read, daemon=True)
        self.thread.start()

    def first(self, text: str) -> float | None:
        return next((t for t, line in self.got if text in line), None)

    @property
    def text(self) -> str:
        self.thread.join(30)
        return "\n".join(line for _, line in self.got)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_finishes_the_batch_in_flight_then_removes_the_throttles_and_records_the_run(
        cluster, tmp_path, sig):
    """Issue 19 item 3: an interrupted apply ends as cancel does: the batch in flight finishes, the run's
    throttles go, the run is recorded as stopped (resumable), the lock is released; answered at once."""
    import time

    env = cluster(drain_desc(size=30 * MB))
    plan_dir = tmp_path / "run" / "plan"
    doc = drain_plan(plan_dir, size=30 * MB)
    proc = spawn_apply(env, plan_dir, "--throttle", "10MB")
    out = Lines(proc)
    poll(in_flight(env, doc, 1), what="batch 1 in flight")
    sent = time.monotonic()
    proc.send_signal(sig)
    proc.wait(timeout=60)
    name = signal.Signals(sig).name
    text = out.text
    assert proc.returncode == 128 + sig, text
    answered = out.first(f"kplan apply: {name}: stopping after the batch in flight")
    assert answered is not None and answered - sent < 2.0, text
    assert "stopped on request: 2 of 3 batches applied, none in flight, no throttle of this run left" in text
    assert "Traceback" not in text
    # ZooKeeper, raw: batch 1 (a-0 -> [2, 3]) finished; nothing of the run is left but its record
    assert env.check.unit_states(doc) == ["completed", "completed", "pending"]
    assert env.check.replicas("a", 0) == [2, 3] and not env.check.exists("/admin/reassign_partitions")
    assert env.check.throttles() == {} and env.check.lock_holders() == []
    run = env.check.run(doc)
    assert run["state"] == "failed" and "interrupted" in run["error"]
    outcome = json.loads((tmp_path / "run" / "apply" / "outcome.json").read_text())
    assert outcome["state"] == "interrupted"
    assert env.kplan("apply", "--zk", env.connect, "--plan", str(plan_dir), "--throttle", "100MB", "--poll",
                     "0.2") == 0
    env.check.assert_nothing_lost(rf_of(env.desc), FINAL)


def test_a_second_interrupt_leaves_at_once_naming_what_is_left_and_the_command_that_removes_it(cluster, tmp_path):
    env = cluster(drain_desc(size=30 * MB))
    plan_dir = tmp_path / "run" / "plan"
    doc = drain_plan(plan_dir, size=30 * MB)
    proc = spawn_apply(env, plan_dir, "--throttle", "6MB")   # batch 1: 5 s
    out = Lines(proc)
    poll(in_flight(env, doc, 1), what="batch 1 in flight")
    proc.send_signal(signal.SIGTERM)
    poll(lambda: out.first("stopping after the batch in flight"), what="the first signal answered")
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=10)
    text = out.text
    assert proc.returncode == 143, text   # the first signal is what stopped it
    assert env.check.unit_states(doc) == ["completed", "submitted", "pending"]   # still copying
    assert "kplan apply: interrupted by SIGTERM: the run is recorded as stopped; batch 1 is still moving in Kafka " \
           "(1 partition), with this run's replication throttles on topic a, broker 1, broker 2, broker 3. `kplan" in text
    assert f"`kplan cancel --zk {env.connect} --plan {plan_dir}` waits for it, removes those throttles" in text
    # raw: exactly what it said is left; the lock is not
    thr = env.check.throttles()
    assert set(thr) == {"topics/a", "brokers/1", "brokers/2", "brokers/3"}
    assert thr["topics/a"] == {"leader.replication.throttled.replicas": "0:1,0:2",
                               "follower.replication.throttled.replicas": "0:3"}
    assert env.check.lock_holders() == []
    # ... and the command it named removes it
    assert env.kplan("cancel", "--zk", env.connect, "--plan", str(plan_dir), "--timeout", "60",
                     "--poll", "0.2") == 0
    assert env.check.throttles() == {} and env.check.lock_holders() == []
    assert env.check.run(doc)["state"] == "cancelled" and env.check.replicas("a", 0) == [2, 3]
