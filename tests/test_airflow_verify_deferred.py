"""Deferrable verify (issue 20 item 7) under the real Airflow stack: API server, scheduler (LocalExecutor) and
triggerer as separate processes on one SQLite AIRFLOW_HOME, the emulated sandbox on a real ZooKeeper.

While the cluster is held un-converged (broker 4 killed: it leaves the ISR of partitions whose target lists
it), the deferrable verify is counted through Airflow's REST API: its task instance is `deferred`, no task
instance is `running` because of it, and the 1-slot apply pool shows it as deferred, not occupied, so a
blocking verify (`deferrable=False`, verify as it was before) can take that one slot meanwhile. The blocking
one is the unprotected case: it is `running` and occupies the pool and a worker, the very counts asserted to
be zero for the deferred one. Then the scheduler and the triggerer are restarted mid-wait, broker 4 comes
back, and the deferred run finishes green: report.json says converged.

The two DAGs (one task each: the real VerifyOperator in the real apply pool) are written by the test into its
own DAG folder; the plan is applied beforehand as a run's apply task would have (planner.api.apply).
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

import airflow_support as af
import pytest
from apply_support import FAST, drain_desc, drain_plan
from kplan_airflow import local, runs, stack

from planner import api
from planner.sandbox import Sandbox

pytestmark = pytest.mark.sandbox

DEFERRED, BLOCKING = "kplan_verify_deferred", "kplan_verify_blocking"
BLOCKING_TIMEOUT = 6   # seconds the blocking verify waits in its worker before it fails (not converged)

DAG_FILE = f'''
from datetime import datetime

from airflow.sdk import DAG

from kplan_airflow.operators import VerifyOperator

for dag_id, deferrable, timeout in (({DEFERRED!r}, True, 300), ({BLOCKING!r}, False, {BLOCKING_TIMEOUT})):
    with DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
        VerifyOperator(task_id="verify", timeout=timeout, deferrable=deferrable, poll_interval=0.5, retries=0)
    globals()[dag_id] = dag
'''


class Rest:
    def __init__(self, base: str):
        self.base = base
        self.token = af.token(base)

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        req = urllib.request.Request(f"{self.base}{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {self.token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def get(self, path: str) -> dict:
        return self._call("GET", path)

    def ti(self, dag_id: str, run_id: str) -> dict:
        return self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/verify")

    def running(self) -> list[str]:
        """Every running task instance of every DAG (each holds a LocalExecutor worker)."""
        out = self.get("/api/v2/dags/~/dagRuns/~/taskInstances?state=running")
        return [f"{t['dag_id']}.{t['task_id']}" for t in out["task_instances"]]

    def pool(self) -> dict:
        return self.get(f"/api/v2/pools/{runs.DEFAULT_POOL}")

    def trigger(self, dag_id: str, run_id: str) -> None:
        self._call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
        self._call("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"dag_run_id": run_id, "logical_date": None})


@pytest.fixture(scope="module")
def stack_env(tmp_path_factory, zk_server):
    """Sandbox (4 emulated brokers, the hand-written drain of broker 1 applied), AIRFLOW_HOME with the two DAGs,
    the API server, the scheduler and the triggerer. Yields a dict; stops everything afterwards."""
    base = tmp_path_factory.mktemp("verify_deferred")
    sb = Sandbox.up(base / "sb", cluster=drain_desc(), zk=zk_server.connect_string, chroot="/verify_deferred",
                    timeout=60, **FAST)
    procs: list = []      # the API server
    workers: list = []    # the scheduler and the triggerer (replaced in place by a restart)
    try:
        plan = base / "plan"
        drain_plan(plan)
        api.apply(api.ApplyRequest(zk=sb.connect_string, plan=plan, out=base / "apply", no_throttle=True, poll=0.1))
        dags = base / "dags"
        dags.mkdir()
        (dags / "verify_dags.py").write_text(DAG_FILE)
        with af.airflow_env(base / "home", zk_connect=sb.connect_string, runs_root=base / "runs") as env:
            url = f"http://127.0.0.1:{af.free_port()}"
            env = {**env, "AIRFLOW__CORE__DAGS_FOLDER": str(dags), "AIRFLOW__CORE__PARALLELISM": "2",
                   "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5", "AIRFLOW__API__WORKERS": "1",
                   "AIRFLOW__API__BASE_URL": url, "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/"}
            local.activate(env)
            af.sync_dags()   # what the dag-processor would store (the scheduler schedules stored DAGs)
            logs = base / "logs"
            procs.append(stack.start_component("api-server", env, logs, int(url.rsplit(":", 1)[1])))
            stack.wait_http(f"{url}/api/v2/monitor/health", 240, procs[0])

            def start() -> list:
                return [stack.start_component(n, env, logs) for n in ("scheduler", "triggerer")]

            workers += start()
            yield {"sb": sb, "plan": plan, "rest": Rest(url), "procs": workers, "start": start, "logs": logs}
    finally:
        stack.stop(workers + procs, timeout=5)   # all at once; what has not exited by then is killed
        sb.down()


def _run(dag_id: str, run_id: str, plan: Path) -> Path:
    """The run folder of (dag_id, run_id), holding the reviewed plan, as the DAG's earlier tasks leave it."""
    folder = runs.run_folder(dag_id, run_id).root
    shutil.copytree(plan, folder / "plan")
    return folder


def _healthy(rest: Rest) -> bool:
    h = rest.get("/api/v2/monitor/health")
    return all((h.get(c) or {}).get("status") == "healthy" for c in ("scheduler", "triggerer"))


def test_a_waiting_verify_holds_no_worker_or_pool_slot_and_survives_a_scheduler_restart(stack_env):
    sb, rest = stack_env["sb"], stack_env["rest"]
    af.wait_for(lambda: _healthy(rest), 120, "scheduler and triggerer healthy")
    sb.kill([4])   # a-1 -> [4,2] and b-0 -> [3,4] lose broker 4 from their ISR: not converged until it returns

    deferred = _run(DEFERRED, "d1", stack_env["plan"])
    rest.trigger(DEFERRED, "d1")
    af.wait_for(lambda: rest.ti(DEFERRED, "d1")["state"] == "deferred", 90, "the deferrable verify deferred",
                every=0.5)

    # The unprotected case beside it: the blocking verify takes the apply pool's only slot and a worker.
    _run(BLOCKING, "b1", stack_env["plan"])
    rest.trigger(BLOCKING, "b1")
    af.wait_for(lambda: rest.ti(BLOCKING, "b1")["state"] == "running", 60, "the blocking verify running", every=0.3)
    pool, running = rest.pool(), rest.running()
    assert rest.ti(DEFERRED, "d1")["state"] == "deferred"
    assert running == [f"{BLOCKING}.verify"], running            # the deferred one holds no worker ...
    assert (pool["slots"], pool["occupied_slots"], pool["running_slots"], pool["deferred_slots"]) == (1, 1, 1, 1), pool
    #                                                              ... and not the pool's one slot: the blocking one has it

    ti = af.wait_for(lambda: (t := rest.ti(BLOCKING, "b1"))["state"] in ("failed", "success") and t, 60,
                     "the blocking verify to give up")
    assert ti["state"] == "failed"   # broker 4 is still out: not converged within BLOCKING_TIMEOUT s
    blocked = runs.run_folder(BLOCKING, "b1").root
    assert "did not converge to plan sha256:" in json.loads((blocked / runs.REVIEW).read_text())["error"]
    assert json.loads((blocked / "report.json").read_text())["converged"] is False   # written on timeout, as before
    pool = rest.pool()
    assert rest.running() == [] and rest.ti(DEFERRED, "d1")["state"] == "deferred"
    assert (pool["occupied_slots"], pool["running_slots"], pool["deferred_slots"], pool["open_slots"]) == (0, 0, 1, 1)
    assert not (deferred / "report.json").exists()   # written by the finishing task only

    # Restart the scheduler and the triggerer mid-wait.
    old = list(stack_env["procs"])
    stack.stop(old)
    assert all(p.poll() is not None for p in old)
    stack_env["procs"][:] = stack_env["start"]()
    af.wait_for(lambda: _healthy(rest), 120, "the new scheduler and triggerer healthy")
    assert rest.ti(DEFERRED, "d1")["state"] == "deferred"

    sb.start([4])   # back in every ISR: the re-created trigger sees convergence, the finishing task runs
    ti = af.wait_for(lambda: (t := rest.ti(DEFERRED, "d1"))["state"] in ("failed", "success") and t, 90,
                     "the deferred verify to finish")
    assert ti["state"] == "success", ti
    run = af.wait_for(lambda: (r := rest.get(f"/api/v2/dags/{DEFERRED}/dagRuns/d1"))["state"] != "running" and r,
                      30, "the scheduler to end the run")   # its next loop, after the task's success
    assert run["state"] == "success", run
    report = json.loads((deferred / "report.json").read_text())
    assert report["converged"] is True and report["partitions"] == {"converged": 3, "total": 3}
    assert report["leaders_on_preferred"] == {"count": 3, "total": 3}   # the finishing task elected a-1's 4
    review = json.loads((deferred / runs.REVIEW).read_text())
    assert review["status"] == "verified", review
