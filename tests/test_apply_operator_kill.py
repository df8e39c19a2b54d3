"""SIGTERM to the Airflow apply task (issue 19 item 3: "SIGTERM is what Airflow and systemd send, so treat it like
Ctrl-C"): Airflow's task runner answers SIGTERM by calling the operator's on_kill. ApplyOperator.on_kill must
end the apply as cancel does: the batch in flight finishes, this run's throttles go, the run is recorded as
stopped, the lock is released, and the task fails saying so; the review record says "apply stopped".

The operator runs in a thread of the test, on the emulated engine, with the ZooKeeper connection from the
environment (no Airflow database, scheduler or API server: only the operator and its hook). ZooKeeper is
read raw afterwards."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from apply_support import FAST, MB, Checker, drain_desc, drain_plan, poll

from planner import zk as zkmod
from planner.sandbox import Sandbox

pytestmark = pytest.mark.sandbox
DAG, RUN = "kafka_broker_drain", "manual__killed"


def test_sigterm_to_the_apply_task_stops_after_the_batch_in_flight_and_leaves_no_throttle(tmp_path: Path, zk_connect,
                                                                                         monkeypatch):
    from kplan_airflow import local, runs

    sb = Sandbox.up(tmp_path / "sb", cluster=drain_desc(size=30 * MB), zk=zk_connect, timeout=60, **FAST)
    zk = zkmod.connect(sb.connect_string)
    try:
        for k, v in local.environment(tmp_path / "home", zk_connect=sb.connect_string, password="x").items():
            monkeypatch.setenv(k, v)
        from airflow.exceptions import AirflowFailException
        from kplan_airflow.operators import ApplyOperator

        folder = runs.run_folder(DAG, RUN)
        doc = drain_plan(folder.plan, size=30 * MB)
        op = ApplyOperator(task_id="apply", throttle=6 * 10**6)   # batch 1: 30 MB at 6 MB/s, ~5 s
        context = {"dag": SimpleNamespace(dag_id=DAG), "run_id": RUN,
                   "ti": SimpleNamespace(xcom_pull=lambda task_ids: {"plan_id": doc["id"]})}
        ended: dict = {}

        def task() -> None:
            try:
                ended["result"] = op.execute(context)
            except BaseException as e:   # noqa: BLE001 - what the task ended with is the test's subject
                ended["error"] = e

        runner = threading.Thread(target=task, daemon=True)
        runner.start()
        check = Checker(zk)
        poll(lambda: check.unit_states(doc)[1:2] == ["submitted"] and check.topic("a").get("adding_replicas"),
             what="batch 1 in flight")
        op.on_kill()
        runner.join(60)
        assert not runner.is_alive(), "the apply did not stop"
        err = ended.get("error")
        assert isinstance(err, AirflowFailException), ended
        assert "stopped on request: 2 of 3 batches applied, none in flight, no throttle of this run left" in str(err)
        # what to do next in a DAG's words, never a command line (issue 23 item 6)
        assert str(err).endswith("the run recorded as stopped. the apply task, cleared, resumes it; a cancel "
                                 "(planner.api.cancel, or `kplan cancel` in a shell) ends it"), str(err)
        assert "--zk" not in str(err)
        # raw: batch 1 finished, batch 2 never submitted, nothing of the run left but its record
        assert check.unit_states(doc) == ["completed", "completed", "pending"]
        assert check.replicas("a", 0) == [2, 3] and not check.exists("/admin/reassign_partitions")
        assert check.throttles() == {} and check.lock_holders() == []
        run = check.run(doc)
        assert run["state"] == "failed" and "interrupted" in run["error"]
        review = runs.read_json(folder.root / runs.REVIEW)
        assert (review["status"], review["apply_state"]) == ("apply stopped", "interrupted")
    finally:
        zk.stop()
        zk.close()
        sb.down()


def test_a_planner_refusal_gets_a_dags_words_for_what_gets_past_it():
    """Issue 23 item 6: the planner's message states the fact; the operator adds the remedy in a DAG's terms
    (params, tasks), where the CLI says flags and command lines (tests/test_api.py, tests/test_apply_faults.py)."""
    from airflow.sdk.exceptions import AirflowFailException
    from kplan_airflow.operators import planner_errors

    from planner.errors import NextStep, NotConverged, NoThrottle

    fact = "2 data batches of plan sha256:abc... would copy with no replication throttle (no rate was given)"
    with pytest.raises(AirflowFailException) as e, planner_errors("apply"):
        raise NoThrottle(fact)
    assert str(e.value) == fact + ": give a throttle (the throttle param, e.g. 50MB), or set the no_throttle " \
                                  "param to copy at full speed on purpose"
    with pytest.raises(AirflowFailException) as e, planner_errors("apply"):
        raise NotConverged("apply timed out after 5 s while batch 1 was in flight. The run is recorded",
                           next_steps=(NextStep("apply", "resumes it"), NextStep("verify", "reports")))
    assert str(e.value) == "apply timed out after 5 s while batch 1 was in flight. The run is recorded. the apply " \
                           "task, cleared, resumes it; the verify task reports"
