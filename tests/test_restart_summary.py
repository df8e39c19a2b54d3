"""What a reviewer reads about a restart plan (kplan_airflow.restart_summary): every step of the roll with its
risk without and with the plan, the temporary replicas beside a full drain, what cannot move. The risk summary
here is built from the reference replay's tables (the Spark job writes the same, tests/test_drain_risk_spark)."""

from __future__ import annotations

import json

from kplan_airflow import restart_summary as rsm
from kplan_airflow import summary as sm

from planner import api, replay, risk
from planner import snapshot_io as sio
from planner.cluster import parse_cluster

DESC = {"brokers": [{"id": 1, "rack": "r1"}, {"id": 2, "rack": "r2"}, {"id": 3, "rack": "r3"}],
        "topics": [{"name": "payments", "partitions": [{"replicas": [1]}]},
                   {"name": "orders", "config": {"min.insync.replicas": "2"},
                    "partitions": [{"replicas": [1, 2, 3]}, {"replicas": [2, 3, 1]}]},
                   {"name": "lonely", "partitions": [{"replicas": [3]}]}]}


def test_every_step_is_shown_without_and_with_the_plan(tmp_path):
    s = risk.snapshot_from_cluster(parse_cluster(DESC))
    snap = sio.write_snapshot(tmp_path / "snap", s.manifest, s.brokers, s.topics, s.partitions)
    out = api.plan_restart(api.RestartRequest(snapshot=snap, out=tmp_path / "plan", brokers=(1, 3),
                                              exclude_topics="lonely"))
    plan = out.plan
    req = api.RiskRequest(snapshot=snap, out=tmp_path / "risk", plan=tmp_path / "plan")
    prepared = risk.prepare(req)
    state = replay.ClusterState.from_snapshot(sio.read_snapshot(snap))
    res = replay.replay(state, prepared.scenarios, "3.7", state.with_plan(prepared.plan_entries))
    worst = res.rows.slice(0, 0).select(["scenario_id", "topic", "partition", "severity"])
    summary = json.loads(json.dumps(risk.build_summary(prepared, res.scenarios, worst, {}, 0.0), default=str))
    rows = rsm.step_rows(plan, summary)
    # the controller (broker 1: the description names none, so the first registered) goes last
    assert [(r["name"], r["before"]["level"], r["after"]["level"]) for r in rows] == [
        ("step 1/2: broker 3 [controlled]", "critical", "critical"),   # lonely-0 is excluded: left unprotected
        ("step 1/2: broker 3 [failure]", "critical", "critical"),
        ("step 2/2: broker 1 [controlled]", "critical", "medium"),
        ("step 2/2: broker 1 [failure]", "critical", "medium")]
    assert rows[0]["cannot_move"] == ["lonely-0"] and rows[2]["cannot_move"] == []
    body = rsm.approval_body(plan, summary, "http://x/plan", None)
    assert "### Rolling restart of broker(s) 3, 1" in body
    # without the plan broker 1's kill leaves payments-0 offline and what it leads (payments-0, orders-0)
    # unanswered until its session expires; with it, it was demoted: at min ISR at worst
    assert ("| step 2/2: broker 1 [failure] | 2 led, 2 reordered | **CRITICAL** (offline 1, 2 unanswered until the "
            "session expires) | **MEDIUM** |") in body
    assert "temporary replicas: **1** on 1 partitions" in body and "**1** cannot move" in body
    assert "a full drain of the same brokers would move 6 replicas" in body
    assert "lonely-0" in body   # named: unprotected (excluded) and cannot move
    assert sm.title(plan) == "Rolling restart of broker(s) 3, 1"
    text = rsm.text_report(plan, summary)
    assert "step 2/2: broker 1 [controlled]" in text and "MEDIUM" in text
    # the rate the temporary replicas copy at, as any plan's approval shows it (the DAG passes apply_schedule)
    body = rsm.approval_body(plan, summary, "http://x/plan", None, api.apply_schedule(plan, 5_000_000, False))
    assert "- copy of the temporary replicas: " in body and "(throttle given)" in body
    # brokers in maintenance, as every approval says them (none here; before the plan recorded them, the body
    # said "not recorded")
    assert "- brokers in maintenance: none (when the snapshot was taken)" in body
