"""verify's convergence probe (planner.api.verify_probe): one read-only pass that a deferred wait polls, and the
waiting verify, which is that probe in a loop until its deadline. Emulated sandbox on a real ZooKeeper.

The hand-worked plan is apply_support's drain of broker 1 (a-0 -> [2,3], a-1 -> [4,2], b-0 -> [3,4]); counts are
worked out from it and the brokers' states, and "read-only" is checked on ZooKeeper's own modification zxids.
"""

from __future__ import annotations

import json
import time

import pytest
from apply_support import MB, Background, drain_desc, drain_plan, make_cluster, poll

from planner import api

pytestmark = pytest.mark.sandbox


@pytest.fixture
def cluster(tmp_path, zk_connect):
    yield from make_cluster(tmp_path, zk_connect)


def test_probe_counts_what_has_converged_writes_nothing_and_verify_waits_on_it(cluster, tmp_path):
    env = cluster(drain_desc(size=4 * MB))
    plan_dir = tmp_path / "run" / "plan"
    drain_plan(plan_dir, size=4 * MB)
    req = api.VerifyRequest(zk=env.connect, plan=plan_dir, wait=60, poll=0.1)

    # Nothing applied: none of the three at its target; no leader is its target's first replica (1, 2, 1 lead;
    # the targets start with 2, 4, 3).
    before = env.check.tree()
    first = api.verify_probe(req)
    assert first == {"status": "waiting", "converged": 0, "total": 3, "reassigning": False,
                     "leaders_on_preferred": 0, "pending": ["a-0", "a-1", "b-0"]}
    json.dumps(first)                                   # what a trigger event carries
    assert env.check.tree() == before                   # no znode created, changed or deleted
    assert not (tmp_path / "run" / "report.json").exists() and not (tmp_path / "run" / "verify").exists()

    assert env.kplan("apply", "--zk", env.connect, "--plan", str(plan_dir), "--no-throttle", "--poll", "0.1") == 0
    done = api.verify_probe(req)
    assert (done["status"], done["converged"], done["pending"], done["reassigning"]) == ("converged", 3, [], False)

    # Broker 4 dies: it leaves the ISR of a-1 [4,2] and b-0 [3,4]; a-0 [2,3] stays converged.
    env.sb.kill([4])
    down_at = time.time()
    held = api.verify_probe(req)
    assert (held["status"], held["converged"], held["total"], held["pending"]) == ("waiting", 1, 3, ["a-1", "b-0"])

    # The waiting verify is the same test in a loop: it returns only once broker 4 is back in both ISRs. A wait
    # that began elsewhere 100 s earlier (`since`, a deferred wait) is where seconds_to_converge count from.
    since = down_at - 100
    bg = Background(lambda: api.verify(api.VerifyRequest(zk=env.connect, plan=plan_dir, wait=60, poll=0.1,
                                                         since=since)))
    progress = tmp_path / "run" / "verify" / "progress.json"
    poll(lambda: progress.exists() and json.loads(progress.read_text()).get("done") == 1,
         what="verify to see 1 of 3 converged")
    assert bg.thread.is_alive(), "verify returned while broker 4 was out of two ISRs"
    restarted = time.time()
    env.sb.start([4])
    out = bg.result(60)
    assert out.converged and out.report["partitions"] == {"converged": 3, "total": 3}
    assert out.report["seconds_to_converge"] >= restarted - since   # from `since`, not from this call
    assert api.verify_probe(req)["status"] == "converged"


def test_probe_failures_and_the_airflow_trigger_run_as_the_triggerer_runs_it(cluster, tmp_path, monkeypatch):
    """Probe failures (a status for what no retry mends, ZkUnavailable raised for the rest); and the Airflow
    trigger as the triggerer runs it: re-created from its serialised form (all a restarted triggerer has), its
    connection read from the environment, the probe polled in a thread, firing timeout / converged / failed."""
    import asyncio

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    from airflow.sdk.module_loading import import_string
    from kplan_airflow.triggers import VerifyTrigger

    env = cluster(drain_desc())
    plan_dir = tmp_path / "run" / "plan"
    doc = drain_plan(plan_dir)
    # A chroot with no Kafka cluster: the planner's own message, as a status (no retry mends it).
    typo = api.verify_probe(api.VerifyRequest(zk=env.connect + "/typo", plan=plan_dir))
    assert typo["status"] == "failed" and "/typo: the chroot does not exist" in typo["message"], typo
    # Nothing listening: retryable, so raised (the trigger tries again until its deadline).
    with pytest.raises(api.ZkUnavailable):
        api.verify_probe(api.VerifyRequest(zk="127.0.0.1:9", plan=plan_dir, timeout=1))

    hosts, _, chroot = env.connect.partition("/")
    monkeypatch.setenv("AIRFLOW_CONN_ZK_PROBE", json.dumps({"conn_type": "zookeeper", "host": hosts,
                                                            "schema": chroot}))

    def fire(deadline_in: float) -> dict:
        now = time.time()
        path, kwargs = VerifyTrigger(zk_conn_id="zk_probe", plan=str(plan_dir), started=now - 5,
                                     deadline=now + deadline_in, poll=0.1).serialize()
        trigger = import_string(path)(**json.loads(json.dumps(kwargs)))

        async def first():
            async for event in trigger.run():
                return event.payload

        return asyncio.run(first())

    timeout = fire(0.5)   # nothing applied: still 0 of 3 at the deadline
    assert (timeout["status"], timeout["converged"], timeout["total"]) == ("timeout", 0, 3), timeout
    assert timeout["deadline"] - timeout["started"] == pytest.approx(5.5)
    assert env.kplan("apply", "--zk", env.connect, "--plan", str(plan_dir), "--no-throttle", "--poll", "0.1") == 0
    done = fire(30)
    assert (done["status"], done["converged"], done["pending"]) == ("converged", 3, []), done

    # The plan folder changed after review: refused, naming it, by the probe and so by the trigger.
    doc["moves"][0]["to"] = [3, 2]
    (plan_dir / "plan.json").write_text(json.dumps(doc))
    changed = api.verify_probe(api.VerifyRequest(zk=env.connect, plan=plan_dir))
    assert changed["status"] == "failed" and "plan.json" in changed["message"], changed
    failed = fire(30)
    assert (failed["status"], failed["message"]) == ("failed", changed["message"])
