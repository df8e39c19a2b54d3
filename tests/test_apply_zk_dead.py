"""ZooKeeper dies in the middle of an apply (issue 19 item 5), on the emulated engine, with a ZooKeeper of the
test's own (the session's shared one must live): the apply says so within one poll, with what happens next;
Ctrl-C is answered, and the process gone, within 2 s, naming what is left and the command that removes it.
ZooKeeper then comes back (same data, same port); read raw, the cluster holds exactly what was said, and the
named command removes it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from apply_support import FAST, MB, Checker, drain_desc, drain_plan, poll

from planner import zk as zkmod
from planner.sandbox import Sandbox
from planner.zkserver import ZooKeeperServer

pytestmark = pytest.mark.sandbox
ROOT = Path(__file__).resolve().parents[1]
POLL = 0.5


def test_zookeeper_killed_mid_apply_is_said_within_one_poll_and_ctrl_c_leaves_within_two_seconds(tmp_path):
    from test_apply_faults import Lines

    server = ZooKeeperServer(tmp_path / "zk", heap_mb=256).start()
    port = server.port
    sb = None
    back = None
    try:
        sb = Sandbox.up(tmp_path / "sb", cluster=drain_desc(size=30 * MB), zk=f"{server.connect_string}/c",
                        timeout=60, **FAST)
        plan_dir = tmp_path / "run" / "plan"
        doc = drain_plan(plan_dir, size=30 * MB)
        zk = zkmod.connect(sb.connect_string)
        check = Checker(zk)
        proc = subprocess.Popen([sys.executable, "-m", "planner.cli", "apply", "--zk", sb.connect_string, "--plan",
                                 str(plan_dir), "--poll", str(POLL), "--throttle", "6MB", "--connect-timeout", "2"],
                                env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        out = Lines(proc)
        poll(lambda: check.unit_states(doc)[1:2] == ["submitted"], what="batch 1 in flight")
        zk.stop()
        zk.close()
        killed = time.monotonic()
        os.kill(server.pid, signal.SIGKILL)
        server.process.wait(10)
        try:
            said = poll(lambda: out.first(f"ZooKeeper (127.0.0.1:{port}) unreachable"), timeout=15,
                        what="the apply saying that ZooKeeper is unreachable")
        except AssertionError:
            raise AssertionError("\n".join(x for _, x in out.got)) from None
        assert said - killed < POLL + 1.0, out.text
        text_so_far = out.text if proc.poll() is not None else "\n".join(x for _, x in out.got)
        assert "batch 1 keeps moving in Kafka; kplan writes nothing until ZooKeeper answers" in text_so_far
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
        gone = time.monotonic()
        text = out.text
        assert gone - sent < 2.0, f"{gone - sent:.1f} s\n{text}"
        assert proc.returncode == 130, text
        assert "kplan apply: interrupted by SIGINT: ZooKeeper did not answer, so nothing could be removed or " \
               "recorded" in text
        # batch 1's throttles, and broker 4's rate, set for the stretch of batches at the same rate (docs/APPLY.md)
        assert "batch 1 is still moving in Kafka (1 partition), with this run's replication throttles on topic " \
               "a, broker 1, broker 2, broker 3, broker 4. `kplan cancel" in text
        assert f"`kplan cancel --zk {sb.connect_string} --plan {plan_dir}` waits for it" in text
        assert "Traceback" not in text and "WARNING" not in text   # said once, by the progress line
        assert "kplan apply: SIGINT: ZooKeeper is unreachable, so nothing can be waited for or removed" in text

        # ZooKeeper back: what was said is what is there
        back = ZooKeeperServer(tmp_path / "zk", port=port, heap_mb=256).start()
        zk = zkmod.connect(sb.connect_string)
        check = Checker(zk)
        thr = check.throttles()
        assert set(thr) == {"topics/a", "brokers/1", "brokers/2", "brokers/3", "brokers/4"}, thr
        assert check.unit_states(doc) == ["completed", "submitted", "pending"]
        assert check.run(doc)["state"] == "running"   # nothing could be recorded
        sb.wait_settled(60)
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        done = subprocess.run([sys.executable, "-m", "planner.cli", "cancel", "--zk", sb.connect_string, "--plan",
                               str(plan_dir), "--timeout", "90", "--poll", "0.2"], env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert check.throttles() == {} and check.lock_holders() == []
        assert check.run(doc)["state"] == "cancelled" and check.replicas("a", 0) == [2, 3]
        zk.stop()
        zk.close()
    finally:
        if sb is not None and back is not None:
            sb.down()
        elif sb is not None:   # no ZooKeeper to talk to: stop the daemon's process only
            from planner.zkserver import stop_pid

            if sb.daemon_pid:
                stop_pid(sb.daemon_pid)
        for s in (back, server):
            if s is not None and s.process is not None and s.process.poll() is None:
                s.stop()
