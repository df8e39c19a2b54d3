"""`make demo` stopped by SIGTERM or Ctrl-C while apply is in flight: the real demo (python -m kplan_airflow.demo,
sandbox, Airflow on SQLite, dag.test()) in a subprocess, with --skip-risk so apply starts ~25 s in instead of
~65 s (the Spark risk tasks are not on the path that matters). The signal is sent once apply has completed a
batch (its progress.json says so) and must be honoured within a deadline: exit 130, the apply cancelled after
its batch in flight, no process of the run left, and, when the cluster is kept (--keep), no throttle, lock or
reassignment left in ZooKeeper, read with plain kazoo. dag.test() alone ignores SIGTERM (checked on Airflow 3.3.2).
About 35 s each on 2 cores."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from apply_support import Checker, poll
from kazoo.client import KazooClient

EXIT_DEADLINE = 60.0   # from the signal to the demo's exit: one batch at 200 MB/s (~2 s), kill, sandbox down


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


def _processes_mentioning(text: str) -> list[tuple[int, str]]:
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd and _alive(int(d.name)):
            out.append((int(d.name), cmd[:200]))
    return out


def _apply_in_flight(runs: Path) -> dict | None:
    for p in runs.glob("*/*/apply/progress.json"):
        try:
            doc = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if doc.get("units_done", 0) >= 1 and doc.get("units_done", 0) < doc.get("units_total", 0):
            return doc
    return None


@pytest.mark.parametrize("sig,keep", [(signal.SIGTERM, False), (signal.SIGINT, True)],
                         ids=["SIGTERM-sandbox-down", "SIGINT-keep"])
def test_demo_stops_cleanly_on_a_signal_during_apply(tmp_path, sig, keep):
    root = tmp_path / "demo"
    log = tmp_path / "demo.log"
    cmd = [sys.executable, "-m", "kplan_airflow.demo", "--dir", str(root), "--skip-risk"] + (["--keep"] if keep else [])
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    info: dict = {}
    try:
        info = poll(lambda: json.loads((root / "sandbox" / "sandbox.json").read_text())
                    if (root / "sandbox" / "sandbox.json").exists() and proc.poll() is None else None,
                    timeout=120, what="the demo's sandbox.json", every=0.2)
        info = poll(lambda: json.loads((root / "sandbox" / "sandbox.json").read_text())
                    if json.loads((root / "sandbox" / "sandbox.json").read_text()).get("daemon_pid") else None,
                    timeout=60, what="the sandbox daemon's pid", every=0.2)
        pids = {"sandbox daemon": info["daemon_pid"], "ZooKeeper": info["zookeeper_pid"]}
        assert all(_alive(p) for p in pids.values()), pids
        progress = poll(lambda: _apply_in_flight(root / "runs") or (proc.poll() is not None and {"exited": True}),
                        timeout=240, what="apply in flight (a batch done, more to go)", every=0.2)
        assert "exited" not in progress, log.read_text()[-3000:]
        sent = time.monotonic()
        proc.send_signal(sig)
        try:
            rc = proc.wait(timeout=EXIT_DEADLINE)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the demo did not exit within {EXIT_DEADLINE:.0f} s of {sig.name}:\n{log.read_text()[-3000:]}")
        took = time.monotonic() - sent
        text = log.read_text()
        print(f"{sig.name}: exit {rc} after {took:.1f} s (apply at batch {progress['units_done']}/"
              f"{progress['units_total']})")
        assert rc == 130, text[-3000:]
        last = text.strip().splitlines()[-1]  # the demo's last word: what stopping did (the DAG's task logs
        assert last.startswith(f"=== demo interrupted by {sig.name}: apply of plan "), text[-3000:]  # come before)
        assert " cancelled (" in last, last
        assert ("left running (--keep)" if keep else "the sandbox is down") in last, last

        # the apply honoured the cancel after its batch in flight: recorded, not completed
        outcome = json.loads(next((root / "runs").glob("*/*/apply/outcome.json")).read_text())
        assert outcome["state"] == "cancelled", outcome
        assert progress["units_done"] <= outcome["units_done"] < outcome["units_total"], outcome

        # nothing of the run is left but, with --keep, the sandbox (its daemon and ZooKeeper)
        left = [p for p in _processes_mentioning(str(root)) if p[0] not in (pids.values() if keep else ())]
        assert left == [], left
        for what, pid in pids.items():
            assert _alive(pid) == keep, f"{what} (pid {pid}) {'gone' if keep else 'still running'}"
        if keep:
            zk = KazooClient(hosts=info["connect"])
            zk.start(timeout=15)
            try:
                check = Checker(zk)
                assert check.throttles() == {}
                assert check.lock_holders() == []
                assert not check.exists("/admin/reassign_partitions")
                plan = json.loads(next((root / "runs").glob("*/*/plan/plan.json")).read_text())
                run = check.json(f"/kplan/runs/{plan['id'].split(':', 1)[1]}")
                assert run["state"] == "cancelled", run["state"]
            finally:
                zk.stop()
                zk.close()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if (root / "sandbox" / "sandbox.json").exists():
            subprocess.run([str(Path(sys.executable).parent / "kplan"), "sandbox", "down", "--dir",
                            str(root / "sandbox")], check=False, stdout=subprocess.DEVNULL)
