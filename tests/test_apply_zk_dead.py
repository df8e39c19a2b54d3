"""ZooKeeper dies in the middle of an apply (issue 19 item 5), on the emulated engine, with a ZooKeeper of the
test's own (the session's shared one must live): the apply says so within one poll, with what happens next;
Ctrl-C, or SIGTERM, is answered, and the process gone, within 2 s, naming what is left and the command that
removes it. ZooKeeper then comes back (same data, same port); read raw, the cluster holds exactly what was
said, and the named command removes it.

Every process the test starts is gone when it ends, pass or fail: the apply, the sandbox daemon (which with
ZooKeeper dead sat in a kazoo request and ignored SIGTERM) and both ZooKeeper servers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from apply_support import FAST, MB, Checker, drain_desc, drain_plan, poll
from test_apply_faults import Lines

from planner import zk as zkmod
from planner.sandbox import Sandbox
from planner.sandbox.daemon import STOP_GRACE
from planner.zkserver import ZooKeeperServer, pid_alive

pytestmark = pytest.mark.sandbox
ROOT = Path(__file__).resolve().parents[1]
POLL = 0.5


@dataclass
class Rig:
    tmp: Path
    server: ZooKeeperServer
    sb: Sandbox
    plan_dir: Path
    doc: dict[str, Any]
    proc: subprocess.Popen
    out: Lines
    back: ZooKeeperServer | None = None
    pids: list[int] = field(default_factory=list)

    @property
    def port(self) -> int:
        return self.server.port

    def kill_zookeeper_mid_batch(self) -> float:
        """Once batch 1 is in flight and the controller has acted on it (adding replicas in the topic's znode),
        SIGKILL: the point the test is about is fixed. (A kill while the controller writes is its own test:
        test_zkio_connection_loss.py.)"""
        zk = zkmod.connect(self.sb.connect_string)
        try:
            check = Checker(zk)
            poll(lambda: check.unit_states(self.doc)[1:2] == ["submitted"]
                 and check.topic("a").get("adding_replicas"), what="batch 1 in flight, acted on by the controller")
        finally:
            zk.stop()
            zk.close()
        killed = time.monotonic()
        os.kill(self.server.pid, signal.SIGKILL)
        self.server.process.wait(10)
        return killed

    def said_unreachable(self, killed: float) -> None:
        try:
            said = poll(lambda: self.out.first(f"ZooKeeper (127.0.0.1:{self.port}) unreachable"), timeout=15,
                        what="the apply saying that ZooKeeper is unreachable")
        except AssertionError:
            raise AssertionError("\n".join(x for _, x in self.out.got)) from None
        assert said - killed < POLL + 1.0, self.out.text
        text_so_far = self.out.text if self.proc.poll() is not None else "\n".join(x for _, x in self.out.got)
        assert "batch 1 keeps moving in Kafka; kplan writes nothing until ZooKeeper answers" in text_so_far

    def interrupt(self, sig: int) -> str:
        name = signal.Signals(sig).name
        sent = time.monotonic()
        self.proc.send_signal(sig)
        self.proc.wait(timeout=10)
        gone = time.monotonic()
        text = self.out.text
        assert gone - sent < 2.0, f"{gone - sent:.1f} s\n{text}"
        assert self.proc.returncode == 128 + sig, text
        assert f"kplan apply: interrupted by {name}: ZooKeeper did not answer, so nothing could be removed or " \
               "recorded" in text
        # batch 1's throttles, and broker 4's rate, set for the stretch of batches at the same rate (docs/APPLY.md)
        assert "batch 1 is still moving in Kafka (1 partition), with this run's replication throttles on topic " \
               "a, broker 1, broker 2, broker 3, broker 4. `kplan cancel" in text
        assert f"`kplan cancel --zk {self.sb.connect_string} --plan {self.plan_dir}` waits for it" in text
        assert "Traceback" not in text and "WARNING" not in text   # said once, by the progress line
        assert f"kplan apply: {name}: ZooKeeper is unreachable, so nothing can be waited for or removed" in text
        return text

    def zookeeper_back(self) -> None:
        self.back = ZooKeeperServer(self.tmp / "zk", port=self.port, heap_mb=256).start()
        self.pids.append(self.back.pid)


@pytest.fixture
def rig(tmp_path) -> Iterator[Rig]:
    """ZooKeeper, a sandbox on it and an apply of the hand-made drain at 6 MB/s (batch 1: 30 MB, ~5 s)."""
    server = ZooKeeperServer(tmp_path / "zk", heap_mb=256).start()
    sb = proc = r = None
    try:
        sb = Sandbox.up(tmp_path / "sb", cluster=drain_desc(size=30 * MB), zk=f"{server.connect_string}/c",
                        timeout=60, **FAST)
        plan_dir = tmp_path / "run" / "plan"
        doc = drain_plan(plan_dir, size=30 * MB)
        proc = subprocess.Popen([sys.executable, "-m", "planner.cli", "apply", "--zk", sb.connect_string, "--plan",
                                 str(plan_dir), "--poll", str(POLL), "--throttle", "6MB", "--connect-timeout", "2"],
                                env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        r = Rig(tmp_path, server, sb, plan_dir, doc, proc, Lines(proc),
                pids=[server.pid, proc.pid] + ([sb.daemon_pid] if sb.daemon_pid else []))
        yield r
    finally:
        # pass or fail, nothing of this test outlives it (a failed assertion used to leave the apply and the
        # sandbox daemon running: stop_pid() signals only ZooKeeper JVMs, so the daemon was never stopped)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if sb is not None:
            sb.down()   # with ZooKeeper dead: its shutdown goes unanswered, then SIGTERM (and SIGKILL if need be)
        for s in ((r.back if r else None), server):
            if s is not None and s.process is not None and s.process.poll() is None:
                s.stop()
        if r is not None:
            left = [p for p in r.pids if pid_alive(p)]
            assert not left, f"processes left behind: {left}"


def test_zookeeper_killed_mid_apply_is_said_within_one_poll_and_ctrl_c_leaves_within_two_seconds(rig):
    killed = rig.kill_zookeeper_mid_batch()
    rig.said_unreachable(killed)
    rig.interrupt(signal.SIGINT)

    # ZooKeeper back: what was said is what is there
    rig.zookeeper_back()
    zk = zkmod.connect(rig.sb.connect_string)
    try:
        check = Checker(zk)
        thr = check.throttles()
        assert set(thr) == {"topics/a", "brokers/1", "brokers/2", "brokers/3", "brokers/4"}, thr
        assert check.unit_states(rig.doc) == ["completed", "submitted", "pending"]
        assert check.run(rig.doc)["state"] == "running"   # nothing could be recorded
        rig.sb.wait_settled(60)
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        done = subprocess.run([sys.executable, "-m", "planner.cli", "cancel", "--zk", rig.sb.connect_string,
                               "--plan", str(rig.plan_dir), "--timeout", "90", "--poll", "0.2"], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert check.throttles() == {} and check.lock_holders() == []
        assert check.run(rig.doc)["state"] == "cancelled" and check.replicas("a", 0) == [2, 3]
    finally:
        zk.stop()
        zk.close()


def test_sigterm_while_zookeeper_is_dead_is_ctrl_c_and_the_sandbox_daemon_stops_too(rig):
    """SIGTERM (what Airflow and systemd send) is Ctrl-C here too; and the sandbox daemon, whose loop waits on a
    ZooKeeper request kazoo holds until ZooKeeper answers, leaves on SIGTERM within STOP_GRACE s."""
    killed = rig.kill_zookeeper_mid_batch()
    rig.said_unreachable(killed)
    rig.interrupt(signal.SIGTERM)

    daemon = rig.sb.daemon_pid
    assert daemon and pid_alive(daemon)
    os.kill(daemon, signal.SIGTERM)
    poll(lambda: not pid_alive(daemon), timeout=STOP_GRACE + 3.0, what="the sandbox daemon gone after SIGTERM")
    log = (rig.tmp / "sb" / "sandbox.log").read_text()
    assert "SIGTERM not carried out within 3 s (the loop waits on a ZooKeeper that does not answer)" in log

    # ZooKeeper back, no controller left: read raw, what the apply said it left is there, nothing else
    rig.zookeeper_back()
    zk = zkmod.connect(rig.sb.connect_string)
    try:
        check = Checker(zk)
        assert set(check.throttles()) == {"topics/a", "brokers/1", "brokers/2", "brokers/3", "brokers/4"}
        assert check.unit_states(rig.doc) == ["completed", "submitted", "pending"]
        assert check.run(rig.doc)["state"] == "running"
        assert check.json("/admin/reassign_partitions")["partitions"] == [
            {"topic": "a", "partition": 0, "replicas": [2, 3]}]   # batch 1, as submitted, and only it
        # mid-reassignment, Kafka keeps target + original replicas (ReplicaAssignment: (new ++ old).distinct)
        assert check.topic("a")["partitions"]["0"] == [2, 3, 1] and check.topic("a")["adding_replicas"] == {"0": [3]}
        # the apply's lock went with its session: ZooKeeper ends it once the session's timeout has passed
        poll(lambda: check.lock_holders() == [], timeout=60, what="the dead apply's lock znode gone")
    finally:
        zk.stop()
        zk.close()
