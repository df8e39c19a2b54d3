"""The Spark job's KRaft rule set (planner.spark.kraft_election) against the numpy reference (planner.replay_kraft,
itself held to Kafka 4.1.1's PartitionChangeBuilder): every column of every partition of every scenario, and
every scenario figure, on generated KRaft clusters (ELR on and off, shrunk and empty ISRs, ELRs, last known
leaders, fenced brokers, unclean overrides, min ISR above RF, plans, restart rolls)."""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from risk_support import assert_same

from planner import api, risk, risk_kraft
from planner import replay_kraft as kr
from planner import risk_model as rm
from planner.cluster import parse_cluster
from planner.codec import ReassignEntry
from planner.spark.session import session as spark_session

pytestmark = pytest.mark.spark
COLUMNS = rm.ROW_COLUMNS + kr.KRAFT_ROW_EXTRA


@pytest.fixture(scope="module")
def spark():
    s = spark_session("local[2]")
    yield s
    s.stop()


@st.composite
def clusters(draw):
    n = draw(st.integers(3, 6))
    ids = list(range(1, n + 1))
    elr_on = draw(st.booleans())
    fenced = [b for b in ids if b > 3 and draw(st.integers(0, 3)) == 0]
    brokers = [{"id": i, "rack": f"r{draw(st.integers(1, 2))}"} for i in ids]
    topics, states = [], {}
    for t in range(draw(st.integers(1, 3))):
        rf = draw(st.integers(1, 3))
        cfg = {"min.insync.replicas": str(draw(st.integers(1, 4)))}
        if draw(st.integers(0, 3)) == 0:
            cfg["unclean.leader.election.enable"] = "true"
        parts = []
        for p in range(draw(st.integers(1, 4))):
            reps = draw(st.permutations(ids))[:rf]
            live = [r for r in reps if r not in fenced]
            isr = draw(st.permutations(live))[: draw(st.integers(0 if elr_on else 1, max(len(live), 1)))] or reps[:1]
            if elr_on and draw(st.integers(0, 4)) == 0:
                isr = []
            leader = draw(st.sampled_from(isr)) if isr and draw(st.integers(0, 5)) else -1
            elr = [r for r in reps if r not in isr and draw(st.booleans())] if elr_on and len(isr) < rf else []
            lke = [draw(st.sampled_from(reps))] if elr_on and leader < 0 and not elr and draw(st.booleans()) else []
            parts.append({"replicas": reps})
            states[(f"t{t}", p)] = (leader, isr, elr, lke)
        topics.append({"name": f"t{t}", "config": cfg, "partitions": parts})
    drain = draw(st.permutations(ids))[: draw(st.integers(1, 3))]
    moves = []
    for t in topics:
        for p, part in enumerate(t["partitions"]):
            if draw(st.integers(0, 3)) == 0:
                moves.append(ReassignEntry(t["name"], p, tuple(draw(st.permutations(ids))[: len(part["replicas"])])))
    return {"brokers": brokers, "topics": topics}, states, fenced, elr_on, tuple(drain), moves


def snapshot(desc: dict, states: dict, fenced: list[int], elr_on: bool) -> risk.sio.Snapshot:
    s = risk.snapshot_from_cluster(parse_cluster(desc))
    t = s.partitions
    keys = list(zip(t.column("topic").to_pylist(), t.column("partition").to_pylist(), strict=True))
    lists = pa.list_(pa.int32())
    t = t.set_column(t.column_names.index("leader"), "leader", pa.array([states[k][0] for k in keys], pa.int32()))
    t = t.set_column(t.column_names.index("isr"), "isr", pa.array([states[k][1] for k in keys], lists))
    t = t.append_column("elr", pa.array([states[k][2] for k in keys], lists))
    t = t.append_column("last_known_elr", pa.array([states[k][3] for k in keys], lists))
    ids = s.brokers.column("broker").to_pylist()
    b = s.brokers.append_column("fenced", pa.array([i in fenced for i in ids]))
    b = b.append_column("in_controlled_shutdown", pa.array([False] * len(ids)))
    features = {"metadata.version": 27, "eligible.leader.replicas.version": 1 if elr_on else 0}
    manifest = {**s.manifest, "source": {"backend": "kraft", "metadata_version": "4.1-IV1", "features": features}}
    return risk.sio.Snapshot(None, manifest, b, s.topics, t)


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=clusters())
def test_spark_kraft_rules_agree_with_the_reference_on_every_partition_of_every_scenario(spark, case):
    desc, states, fenced, elr_on, drain, moves = case
    snap = snapshot(desc, states, fenced, elr_on)
    with tempfile.TemporaryDirectory() as tmp:
        req = api.RiskRequest(snapshot=snap, out=Path(tmp) / "risk", drains=(drain,), all_brokers=True,
                              all_racks=True)
        prepared = risk.prepare(req, plan_entries=moves or None, kraft_ok=True)
        summary = risk_kraft.run(prepared, req.out, spark=spark)
        state = kr.KraftState.from_snapshot(snap)
        ref = kr.replay(state, prepared.scenarios, state.with_plan(moves) if moves else None,
                        risk_kraft.session_timeout(prepared))
        assert_same(Path(req.out), ref, COLUMNS)
        assert summary["backend"]["engine"] == "spark"
        assert json.loads((Path(req.out) / "summary.json").read_text())["baseline"]["current"] == kr.baseline(state)


@settings(max_examples=1, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=clusters())
def test_spark_kraft_rules_agree_with_the_reference_on_restart_rolls(spark, case):
    desc, states, fenced, elr_on, order, moves = case
    snap = snapshot(desc, states, fenced, elr_on)
    with tempfile.TemporaryDirectory() as tmp:
        req = api.RiskRequest(snapshot=snap, out=Path(tmp) / "risk")
        prepared = risk.prepare(req, plan_entries=moves, restart_order=order, kraft_ok=True)
        risk_kraft.run(prepared, req.out, spark=spark)
        state = kr.KraftState.from_snapshot(snap)
        assert_same(Path(req.out), kr.replay(state, prepared.scenarios, state.with_plan(moves),
                                             risk_kraft.session_timeout(prepared)), COLUMNS)


def test_kplan_risk_on_a_kraft_snapshot_runs_the_spark_jobs_kraft_rules(spark, tmp_path):
    """`kplan risk` (api.risk) on the seed incident's KRaft snapshot: the Spark job with the KRaft rule set, its
    rows those of the numpy reference; broker 1 killed or stopped leaves payments-0 leaderless with ISR [],
    ELR [1], last known ELR [1] (Kafka 4.1.1 did exactly this, docs/RISK.md)."""
    from test_replay_kraft import SEED, ksnap

    s = ksnap(SEED)
    out = tmp_path / "risk"
    res = api.risk(api.RiskRequest(snapshot=s, out=out, drains=((1,),)), spark=spark)
    assert res.level == "critical" and res.summary["backend"]["engine"] == "spark"
    rows = pq.read_table(out / "partitions.parquet").to_pylist()
    pay = [r for r in rows if r["topic"] == "payments"]
    assert len(pay) == 2 and {(r["new_leader"], tuple(r["new_isr"]), tuple(r["new_elr"]), tuple(r["new_last_known_elr"]))
                               for r in pay} == {(-1, (), (1,), (1,))}
    prepared = risk.prepare(api.RiskRequest(snapshot=s, out=out, drains=((1,),)), kraft_ok=True)
    state = kr.KraftState.from_snapshot(s)
    ref = kr.replay(state, prepared.scenarios, None, risk_kraft.session_timeout(prepared))
    assert_same(out, ref, COLUMNS)
    # the comparison can fail: the ZooKeeper rule set on the same snapshot (what must never score a KRaft
    # cluster) leaves payments-0 with ISR [1], not [] and ELR [1]
    from planner.spark import job

    zk_out = tmp_path / "zk"
    job.run(spark, replace(risk_kraft.spark_view(prepared), kraft=None), zk_out)
    t = pq.read_table(zk_out / "partitions.parquet").to_pylist()
    assert {tuple(r["new_isr"]) for r in t if r["topic"] == "payments"} == {(1,)}
    with pytest.raises(AssertionError, match="column new_isr differs"):
        assert_same(zk_out, ref, rm.ROW_COLUMNS)


def test_spark_submit_runs_the_kraft_rules_too(tmp_path):
    """`kplan risk --spark-submit` (and Airflow's SparkSubmitOperator: api.risk_submit, the same entry) on a KRaft
    snapshot folder: the job's entry (planner.spark.submit) takes the KRaft rule set from the snapshot, and its
    rows are the numpy reference's; the seed incident's partition leaderless with ISR [] and ELR [1]."""
    from test_replay_kraft import SEED, ksnap

    from planner import snapshot_io as sio

    s = ksnap(SEED)
    folder = tmp_path / "snap"
    sio.write_snapshot(folder, s.manifest, s.brokers, s.topics, s.partitions)
    req = api.RiskRequest(snapshot=folder, out=tmp_path / "risk", drains=((1,),))
    sub = api.risk_submit(req)     # what Airflow submits: validated, no refusal
    assert sub.application.name == "drain_risk.py"
    res = api.risk(replace(req, spark_submit=True))
    assert res.summary["backend"]["backend"] == "kraft" and res.summary["backend"]["engine"] == "spark"
    prepared = risk.prepare(req, kraft_ok=True)
    state = kr.KraftState.from_snapshot(prepared.info)
    assert_same(tmp_path / "risk", kr.replay(state, prepared.scenarios, None, risk_kraft.session_timeout(prepared)),
                COLUMNS)
    pay = [r for r in pq.read_table(tmp_path / "risk" / "partitions.parquet").to_pylist() if r["topic"] == "payments"]
    assert {(r["new_leader"], tuple(r["new_isr"]), tuple(r["new_elr"])) for r in pay} == {(-1, (), (1,))}
