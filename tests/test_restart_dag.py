"""The `kafka_broker_restart` DAG for real: dag.test() on an emulated cluster of the seed incident's shape, the
risk of the roll on Spark (local), the approval (every step's risk without and with the plan) and the pauses
between brokers answered through Airflow's REST API, the restarts done outside the planner.

1. The restart command from an Airflow connection (`kplan sandbox stop` then `start` of the broker), no pause:
   the roll of every broker completes; the cluster ends as it began (lists, preferred leaders, no temporary
   replica, no maintenance state, no throttle); the plan page and the approval show every step.
2. No command: someone else restarts each broker once the roll says it may (a thread here, watching the
   maintenance state the roll sets), the tasks wait on a deferrable trigger; a person lets the first broker's
   roll go on and stops it after the second: the later brokers' tasks skip, the undo does not run, the report
   fails saying where the roll stopped, the cluster is safe (nothing offline or under min ISR, ZooKeeper's log
   says); `kplan roll` then continues the same roll to the end.

One AIRFLOW_HOME (SQLite, migrated in process) for the module; one sandbox per test."""

from __future__ import annotations

import json
import sys
import threading
import time

import airflow_support as af
import pytest
from apply_support import FAST, MB, Checker
from kplan_airflow import local, runs
from roll_support import History, assignment, leaders, log_dir

from planner import cli
from planner import zk as zkmod
from planner.sandbox import Sandbox

pytestmark = [pytest.mark.sandbox, pytest.mark.spark]

DAG_ID = "kafka_broker_restart"
DESC = {"brokers": [{"id": 1, "rack": "r1"}, {"id": 2, "rack": "r2"}, {"id": 3, "rack": "r3"}, {"id": 4, "rack": "r1"}],
        "topics": [
            {"name": "payments", "partitions": [{"replicas": [b], "size_bytes": 2 * MB} for b in (1, 2, 3, 4)]},
            {"name": "orders", "config": {"min.insync.replicas": "2"},
             "partitions": [{"replicas": r, "size_bytes": MB} for r in ([1, 2, 3], [2, 3, 4], [3, 4, 1], [4, 1, 2])]},
            {"name": "pairs", "config": {"min.insync.replicas": "2"},
             "partitions": [{"replicas": [1, 3], "size_bytes": MB}, {"replicas": [2, 4], "size_bytes": MB}]}]}


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    base = tmp_path_factory.mktemp("restart_dag")
    with af.airflow_env(base / "home", spark_master="local[2]") as e:
        yield {"base": base, "env": e}


@pytest.fixture
def cluster(home, zk_server, tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__KPLAN__ROLL_TURN_POLL", "1")
    name = f"/restart_dag_{time.monotonic_ns()}"
    sb = Sandbox.up(tmp_path / "sb", cluster=DESC, zk=zk_server.connect_string, chroot=name, timeout=60, **FAST)
    hosts, _, chroot = sb.connect_string.partition("/")
    monkeypatch.setenv("AIRFLOW_CONN_ZOOKEEPER_DEFAULT", json.dumps({"conn_type": "zookeeper", "host": hosts,
                                                                    "schema": chroot}))
    zk = zkmod.connect(sb.connect_string)
    try:
        yield {"sb": sb, "zk": zk, "history": History(zk, log_dir(zk_server), "/" + chroot)}
    finally:
        zk.stop()
        zk.close()
        sb.down()


class Person:
    """Answers every pending human-in-the-loop request of the DAG (the approval, the pauses) through the REST
    API, in order, with `decide(detail) -> option`; remembers what it was asked."""

    def __init__(self, decide):
        self.api = local.ApiClient(af.PASSWORD)
        self.decide, self.asked, self.error = decide, [], None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(30)
        if self.error:
            raise self.error

    def _run(self):
        try:
            while not self._stop.is_set():
                for d in self.api.pending_approvals(DAG_ID):
                    ti = d["task_instance"]
                    if ti.get("state") not in local.PARKED:   # answered before it parks, it is never resumed
                        continue
                    option = self.decide(d)
                    self.asked.append((ti["task_id"], ti.get("map_index", -1), d["subject"], d.get("body"), option))
                    r = self.api.patch(f"/api/v2/dags/{DAG_ID}/dagRuns/{ti['dag_run_id']}/taskInstances/"
                                       f"{ti['task_id']}/{ti.get('map_index', -1)}/hitlDetails",
                                       json={"chosen_options": [option], "params_input": {}})
                    r.raise_for_status()
                self._stop.wait(0.2)
        except BaseException as e:  # noqa: BLE001 - reported in the main thread
            self.error = e


def run(conf: dict, decide, mark_success: str | None = None) -> tuple:
    dag = af.load_dag(DAG_ID)
    with Person(decide) as person:
        dr = af.dag_test(dag, run_conf=conf, mark_success_pattern=mark_success)
    return dr, person


def settled_as_before(zk, before, lead_before) -> None:
    Checker(zk).assert_nothing_lost({k: len(v) for k, v in before.items()}, before)
    assert leaders(zk) == lead_before
    assert not zk.exists("/kplan/maintenance") or zk.get_children("/kplan/maintenance") == []


def test_the_roll_through_airflow_with_a_restart_command_from_a_connection(cluster, monkeypatch):
    zk, sb = cluster["zk"], cluster["sb"]
    before, lead_before = assignment(zk), leaders(zk)
    kplan = f"{sys.executable} -m planner.cli"
    command = (f"sh -c '{kplan} sandbox stop --dir {sb.dir} {{broker}} && {kplan} sandbox start --dir {sb.dir} "
               "{broker}'")
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_RESTART", json.dumps({"conn_type": "generic", "extra": {"command": command}}))
    h = cluster["history"].begin()
    dr, person = run({"brokers": [1, 2, 3, 4], "restart_conn_id": "kafka_restart", "throttle": 100 * MB,
                      "gate_timeout": 60, "restart_timeout": 60}, lambda d: "Approve")
    intervals = h.end()
    st = af.states(dr)
    assert str(dr.state) in ("success", "DagRunState.SUCCESS"), st
    assert intervals == [], intervals
    settled_as_before(zk, before, lead_before)
    # the approval showed every step's risk, without and with the plan (4 steps x 2 modes)
    [(task, _, subject, body, answer)] = person.asked
    assert task == "approve" and answer == "Approve" and "Rolling restart of broker(s) 1, 2, 3, 4" in subject
    for b in (1, 2, 3, 4):
        for mode in ("controlled", "failure"):
            assert f"| step {b}/4: broker {b} [{mode}] |" in body, body
    assert "**CRITICAL** (offline 1" in body and "temporary replicas: **6**" in body
    # the plan page has the roll, step by step, and its outcome
    from kplan_airflow.review import data

    folder = runs.run_folder(DAG_ID, dr.run_id)
    page = data.plan_page(runs.runs_root(), runs.run_key(DAG_ID), runs.run_key(dr.run_id))
    assert [s["name"] for s in page["roll"]["steps"]][:2] == ["step 1/4: broker 1 [controlled]",
                                                             "step 1/4: broker 1 [failure]"]
    assert page["progress"]["roll_outcome"]["state"] == "completed"
    assert json.loads((folder.root / runs.REVIEW).read_text())["status"] == "done"


def test_a_person_restarts_the_brokers_and_stops_the_roll_half_way(cluster):
    zk, sb = cluster["zk"], cluster["sb"]
    before, lead_before = assignment(zk), leaders(zk)
    restarted: list[int] = []
    stop = threading.Event()

    def operator() -> None:
        """Restarts a broker once the roll says it may: its maintenance state is `restarting`."""
        while not stop.is_set():
            for b in (zk.get_children("/kplan/maintenance") if zk.exists("/kplan/maintenance") else []):
                if int(b) not in restarted:
                    restarted.append(int(b))
                    sb.stop([int(b)])
                    sb.start([int(b)])
            stop.wait(0.2)

    ops = threading.Thread(target=operator, daemon=True)
    ops.start()
    h = cluster["history"].begin()
    answers = iter(["Approve", "Continue with the next broker", "Stop the roll here"])
    try:
        dr, person = run({"brokers": [1, 2, 3, 4], "pause_between_brokers": True, "throttle": 100 * MB,
                          "gate_timeout": 60, "restart_timeout": 120}, lambda d: next(answers),
                         mark_success="risk_after")   # the risk on Spark is the first test's (CI time)
    finally:
        stop.set()
        ops.join(30)
    intervals = h.end()
    assert intervals == [], intervals
    st = af.states(dr)
    assert str(dr.state) in ("failed", "DagRunState.FAILED"), st
    assert st["undo"] in ("skipped", "upstream_failed") and st["report"] == "failed", st
    folder = runs.run_folder(DAG_ID, dr.run_id)
    plan = json.loads((folder.plan / "plan.json").read_text())
    order = plan["roll"]["order"]
    assert restarted == order[:2]
    asked = [(t, i, subject) for t, i, subject, _b, _o in person.asked]
    assert asked[1:] == [("restart", 0, f"Broker {order[0]} restarted (step 1/4, gates passed): continue with broker "
                                        f"{order[1]}?"),
                         ("restart", 1, f"Broker {order[1]} restarted (step 2/4, gates passed): continue with broker "
                                        f"{order[2]}?")]
    record = Checker(zk).json(f"/kplan/rolls/{plan['id'].split(':')[1]}")
    assert record["state"] == "stopped" and [s["state"] for s in record["steps"]] == ["done", "done", "pending",
                                                                                      "pending"]
    # the temporary replicas are still there (the cluster is safe); `kplan roll` continues the same roll
    assert any(assignment(zk)[(m["topic"], m["partition"])] == m["to"] for m in plan["moves"])
    kplan = f"{sys.executable} -m planner.cli"
    assert cli.main(["roll", "--zk", sb.connect_string, "--plan", str(folder.plan), "--poll", "0.1",
                     "--restart-command", f"sh -c '{kplan} sandbox stop --dir {sb.dir} {{broker}} && {kplan} sandbox "
                     f"start --dir {sb.dir} {{broker}}'"]) == 0
    settled_as_before(zk, before, lead_before)
