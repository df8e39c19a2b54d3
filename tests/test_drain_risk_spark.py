"""The Spark job against the numpy reference replay (differential, over generated clusters), bad input,
and `kplan risk` end to end in-process (spark-submit from an installed wheel: tests/test_install.py)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plan_support import write_plan_folder
from risk_support import assert_same

from planner import api, cli, replay, risk
from planner import snapshot_io as sio
from planner.cluster import parse_cluster
from planner.codec import ReassignEntry
from planner.spark import job, zk_election
from planner.spark.session import session as spark_session

pytestmark = pytest.mark.spark
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for the whole test session (the job and `kplan risk` in-process reuse it)."""
    session = spark_session("local[2]")
    yield session
    session.stop()


# -------------------------------------------------------------------------------------- generators
@st.composite
def clusters(draw):
    """Small clusters with RF mixes, shrunk and reordered ISRs, moved leaders, offline and leaderless
    partitions, dead brokers, unclean overrides, min ISR above RF, racks or none."""
    n = draw(st.integers(3, 7))
    racked = draw(st.booleans())
    brokers = [{"id": i, "alive": draw(st.booleans()) if i > 3 else True,
                **({"rack": f"r{draw(st.integers(1, 3))}"} if racked else {})} for i in range(1, n + 1)]
    ids = [b["id"] for b in brokers]
    topics = []
    for t in range(draw(st.integers(1, 4))):
        rf = draw(st.integers(1, 3))
        cfg = {"min.insync.replicas": str(draw(st.integers(1, 4)))}
        unclean = draw(st.sampled_from([None, "true", "false"]))
        if unclean:
            cfg["unclean.leader.election.enable"] = unclean
        parts = []
        for _ in range(draw(st.integers(1, 5))):
            reps = draw(st.permutations(ids))[:rf]
            kind = draw(st.sampled_from(["healthy", "healthy", "shrunk", "moved", "offline", "new"]))
            if kind == "new":
                parts.append({"replicas": reps, "no_state": True})
                continue
            isr = draw(st.permutations(reps))[: draw(st.integers(1, rf))] if kind != "healthy" else list(reps)
            leader = -1 if kind == "offline" else (draw(st.sampled_from(isr)) if kind == "moved" else isr[0])
            parts.append({"replicas": reps, "isr": isr, "leader": leader})
        topics.append({"name": f"t{t}", "config": cfg, "partitions": parts})
    defaults = {"unclean.leader.election.enable": "true"} if draw(st.booleans()) else {}
    desc = {"brokers": brokers, "topics": topics, "broker_defaults": defaults}
    drain = draw(st.permutations(ids))[: draw(st.integers(1, min(3, n)))]
    moves = []
    for t in topics:
        for p, part in enumerate(t["partitions"]):
            if draw(st.integers(0, 3)) == 0:
                moves.append(ReassignEntry(t["name"], p, tuple(draw(st.permutations(ids))[: len(part["replicas"])])))
    version = draw(st.sampled_from(["3.7", "3.6"]))
    return desc, tuple(drain), moves, version


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=clusters())
def test_spark_job_agrees_with_reference_on_every_partition_of_every_scenario(spark, case):
    desc, drain, moves, version = case
    snap = risk.snapshot_from_cluster(parse_cluster(desc))
    with tempfile.TemporaryDirectory() as tmp:
        req = api.RiskRequest(snapshot=snap, out=Path(tmp) / "risk", drains=(drain,), all_brokers=True,
                              all_racks=True, kafka_version=version)
        prepared = risk.prepare(req, plan_entries=moves or None)
        job.run(spark, prepared, req.out)
        state = replay.ClusterState.from_snapshot(snap)
        ref = replay.replay(state, prepared.scenarios, version, state.with_plan(moves) if moves else None)
        assert_same(Path(req.out), ref)
        summary = json.loads((Path(req.out) / "summary.json").read_text())
        assert summary["baseline"]["current"] == replay.baseline(state, version)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=clusters())
def test_spark_job_agrees_with_reference_on_restart_rolls(spark, case):
    """A restart plan's roll: plain rolling steps before, restart steps (each broker demoted first) on the plan's
    state after; every partition of every step agrees, demotion and leader load included."""
    desc, order, moves, version = case
    snap = risk.snapshot_from_cluster(parse_cluster(desc))
    with tempfile.TemporaryDirectory() as tmp:
        req = api.RiskRequest(snapshot=snap, out=Path(tmp) / "risk", kafka_version=version)
        prepared = risk.prepare(req, plan_entries=moves, restart_order=order)
        assert {s.kind for s in prepared.scenarios} == {"rolling", "restart"}
        job.run(spark, prepared, req.out)
        state = replay.ClusterState.from_snapshot(snap)
        assert_same(Path(req.out), replay.replay(state, prepared.scenarios, version, state.with_plan(moves)))


def test_spark_visits_dying_brokers_in_kafkas_order(spark):
    """zk_election.visit_order (SQL expressions on the scenario rows) against planner.scala_hashmap, which
    tests/test_scala_hashmap_order.py holds to the scala-library Kafka ships: small, dense, sparse and large
    id sets, and deep tries (thousands of keys sharing low hash bits)."""
    import numpy as np
    from pyspark.sql import functions as F

    from planner import scala_hashmap

    rng = np.random.default_rng(5)
    sets = [[1, 2, 3, 4, 5, 6], [1, 5], [4, 5], [7], [], list(range(1, 301)), [2**31 - 1, 0, 1]]
    sets += [rng.choice(int(rng.choice([10, 300, 2**31 - 1])), size=int(rng.integers(1, 10)), replace=False).tolist()
             for _ in range(300)]
    sets += [rng.choice(20_000, size=1500, replace=False).tolist()]
    df = spark.createDataFrame(pa.table({"i": pa.array(range(len(sets)), pa.int32()),
                                         "keys": pa.array(sets, pa.list_(pa.int32()))}))
    got = {r["i"]: r["o"] for r in df.select("i", zk_election.visit_order(F.col("keys")).alias("o")).collect()}
    wrong = [(s, got[i]) for i, s in enumerate(sets) if got[i] != scala_hashmap.visit_order(s)]
    assert not wrong, f"{len(wrong)} of {len(sets)} differ, first: {wrong[0]}"
    assert got[0] == [5, 1, 6, 2, 3, 4]



def test_spark_job_agrees_with_reference_on_the_realistic_bench_state(spark, tmp_path):
    """The benchmark's realistic state (bench/skewed_cluster.py live_state: rack-aware placement, RF 1-4, hot
    and new brokers, shrunk ISRs, non-preferred leaders, unclean topics) at a small size, plus a dead broker:
    the all-broker and all-rack sweep in both modes agrees on every partition of every scenario."""
    import importlib.util

    from planner import synth

    spec = importlib.util.spec_from_file_location("skewed_cluster", REPO / "bench" / "skewed_cluster.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    c = mod.live_state(mod.skewed_cluster(brokers=24, racks=4, partitions=3000, new_brokers=2, hot_brokers=3,
                                          max_topic=200, seed=3), lag_fraction=0.3, shrunk_fraction=0.05,
                       moved_fraction=0.1, unclean_fraction=0.3, new_brokers=2)
    assert (c.isr < 0).sum() > (c.replicas < 0).sum() and (c.leader != c.replicas[:, 0]).any()
    c.alive[4] = False   # a dead broker still listed in some ISRs
    snap = synth.to_snapshot(c, tmp_path / "snap")
    req = api.RiskRequest(snapshot=snap, out=tmp_path / "risk", all_brokers=True, all_racks=True)
    prepared = risk.prepare(req)
    job.run(spark, prepared, req.out)
    state = replay.ClusterState.from_snapshot(sio.read_snapshot(snap))
    ref = replay.replay(state, prepared.scenarios, prepared.kafka_version)
    assert_same(req.out, ref)
    # the summary's worst partitions: the 20 worst sweep scenarios' 5 worst rows (severity >= 1) of the reference
    summary = json.loads((req.out / "summary.json").read_text())
    ranked = sorted(summary["scenarios"], key=lambda r: (-r["level_rank"], -r["score"], r["scenario_id"]))
    listed = {r["scenario_id"] for r in ranked[:20]}
    rows = [r for r in ref.rows.select(["scenario_id", "topic", "partition", "severity", "new_leader", "new_isr"])
            .to_pylist() if r["severity"] >= 1]
    for sc in summary["scenarios"]:
        want = sorted((r for r in rows if r["scenario_id"] == sc["scenario_id"]),
                      key=lambda r: (-r["severity"], r["topic"], r["partition"]))[:5] if sc["scenario_id"] in listed else []
        got = [{k: w[k] for k in ("topic", "partition", "severity", "new_leader", "new_isr")} for w in sc["worst_partitions"]]
        assert got == [{k: r[k] for k in ("topic", "partition", "severity", "new_leader", "new_isr")} for r in want], sc["name"]
    assert sum(len(sc["worst_partitions"]) for sc in summary["scenarios"]) >= 20


# ------------------------------------------------------------------------------------------ bad input
def write_seed_snapshot(d: Path) -> Path:
    """The seed incident: broker 1 holds the only replica of payments-0."""
    desc = {"brokers": [{"id": i, "rack": f"r{i}"} for i in (1, 2, 3)],
            "topics": [{"name": "payments", "partitions": [{"replicas": [1]}]},
                       {"name": "orders", "config": {"min.insync.replicas": "2"},
                        "partitions": [{"replicas": [1, 2, 3]}, {"replicas": [2, 3, 1]}, {"replicas": [3, 1, 2]}]}]}
    s = risk.snapshot_from_cluster(parse_cluster(desc))
    return sio.write_snapshot(d, s.manifest, s.brokers, s.topics, s.partitions)


@pytest.fixture
def seed(tmp_path) -> Path:
    return write_seed_snapshot(tmp_path / "snap")


@pytest.mark.parametrize("args, message", [
    (["--drain", "1,9"], "unknown broker id"),
    (["--drain", " , "], "empty"),
    (["--drain", "one"], "comma-separated list of broker ids"),
    (["--drain-rack", "nowhere"], "unknown rack 'nowhere'"),
    (["--kafka-version", "4.1"], "no ZooKeeper mode"),
    (["--plan", "/nonexistent/plan"], "does not exist"),
])
def test_bad_requests_exit_2_with_a_clear_message(seed, tmp_path, capsys, args, message):
    rc = cli.main(["risk", "--snapshot", str(seed), "--out", str(tmp_path / "out"), *args])
    assert rc == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_missing_or_incompatible_snapshot_exits_2(tmp_path, capsys):
    rc = cli.main(["risk", "--snapshot", str(tmp_path / "nope"), "--out", str(tmp_path / "out")])
    assert rc == 2 and "does not exist" in capsys.readouterr().err
    d = write_seed_snapshot(tmp_path / "old")
    manifest = json.loads((d / "manifest.json").read_text())
    (d / "manifest.json").write_text(json.dumps({**manifest, "format": "kplan-snapshot/0"}))
    rc = cli.main(["risk", "--snapshot", str(d), "--out", str(tmp_path / "out")])
    assert rc == 2 and "kplan-snapshot/0" in capsys.readouterr().err
    d = write_seed_snapshot(tmp_path / "broken")
    pq.write_table(pq.read_table(d / "partitions.parquet").drop(["isr"]), d / "partitions.parquet")
    rc = cli.main(["risk", "--snapshot", str(d), "--out", str(tmp_path / "out")])
    assert rc == 2 and "partitions.parquet: checksum does not match the manifest" in capsys.readouterr().err
    # a table that matches its manifest but lacks a column (another writer) is refused by the schema check
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["files"]["partitions.parquet"] = sio.file_sha256(d / "partitions.parquet")
    (d / "manifest.json").write_text(json.dumps(manifest))
    rc = cli.main(["risk", "--snapshot", str(d), "--out", str(tmp_path / "out")])
    assert rc == 2 and "lacks columns ['isr']" in capsys.readouterr().err


def seed_plan(seed: Path, plan: Path, entries: list[ReassignEntry]) -> Path:
    s = sio.read_snapshot(seed)
    p = s.partitions.to_pydict()
    current = {(t, n): r for t, n, r in zip(p["topic"], p["partition"], p["replicas"], strict=True)}
    return write_plan_folder(plan, s.fingerprint, current, entries)


def test_plan_naming_unknown_partitions_or_brokers_exits_2(seed, tmp_path, capsys):
    for i, (entry, message) in enumerate([(ReassignEntry("payments", 3, (2,)), "payments-3"),
                                          (ReassignEntry("payments", 0, (7,)), "[7]")]):
        plan = seed_plan(seed, tmp_path / f"plan{i}", [entry])
        rc = cli.main(["risk", "--snapshot", str(seed), "--out", str(tmp_path / "out"), "--plan", str(plan)])
        assert rc == 2 and message in capsys.readouterr().err


# ---------------------------------------------------------------------------------------- end to end
def test_cli_names_the_seed_incident_and_scores_the_plan(spark, seed, tmp_path, capsys):
    out = tmp_path / "risk"
    assert cli.main(["risk", "--snapshot", str(seed), "--out", str(out), "--drain", "1", "--session-timeout", "6"]) == 0
    text = capsys.readouterr().out
    assert "drain 1 [controlled]" in text and "CRITICAL" in text
    assert "payments-0: replicas [1] leader 1 isr [1] -> leader -1 isr [1]" in text
    # broker 1 leads payments-0 and orders-0: a kill leaves both unanswered for the 6 s session timeout
    assert "drain 1 [failure]: 2 partitions unanswered for up to 6 s" in text
    assert "back cleanly when 1 returns" in text
    assert "\033[" not in text  # no colour when stdout is not a terminal
    for f in ("scenarios.parquet", "summary.json"):
        assert (out / f).is_file()
    assert pq.read_table(out / "partitions.parquet").num_rows == 2 * 4  # 4 partitions on broker 1, 2 modes
    # a plan that moves payments-0 to broker 2 leaves draining broker 1 at "medium" (orders at min ISR)
    plan = seed_plan(seed, tmp_path / "plan", [ReassignEntry("payments", 0, (2,))])
    out = tmp_path / "risk-after"
    assert cli.main(["risk", "--snapshot", str(seed), "--out", str(out), "--drain", "1", "--plan", str(plan),
                     "--json", "--fail-on", "critical"]) == 1
    summary = json.loads(capsys.readouterr().out)
    assert summary["level_by_state"] == {"current": "critical", "plan": "medium"}
    after = [s for s in summary["scenarios"] if s["state"] == "plan"]
    assert [s["name"] for s in after] == ["after plan: drain 1 [controlled]", "after plan: drain 1 [failure]"]
    assert all(s["offline"] == 0 and s["at_min_isr"] == 3 for s in after)


def test_a_partition_whose_state_is_unknown_is_counted_never_scored(spark, tmp_path):
    """Issue 9 item 1: a lenient snapshot's unknown-state partition is not scored as healthy (or at all)."""
    desc = {"brokers": [{"id": i} for i in (1, 2, 3)],
            "topics": [{"name": "t", "partitions": [{"replicas": [1, 2]}, {"replicas": [2, 3]}]}]}
    s = risk.snapshot_from_cluster(parse_cluster(desc))
    errors = pa.array(["leader 'x' must be an integer", None], pa.string())
    parts = s.partitions.set_column(s.partitions.schema.get_field_index("state_error"), "state_error", errors)
    s = sio.Snapshot(None, s.manifest, s.brokers, s.topics, parts)
    req = api.RiskRequest(snapshot=s, out=tmp_path / "r", drains=((1,), (2,)), modes=("failure",))
    prepared = risk.prepare(req)
    summary = job.run(spark, prepared, req.out)
    assert summary["unknown_state"]["partitions"] == 1
    assert {x["name"]: x["unknown"] for x in summary["scenarios"]} == {"drain 1 [failure]": 1,
                                                                       "drain 2 [failure]": 1}
    scored = pq.read_table(tmp_path / "r" / "partitions.parquet").to_pylist()
    assert {(r["topic"], r["partition"]) for r in scored} == {("t", 1)}
    assert any("unknown state" in w for w in summary["warnings"])
    assert "1 with an unknown state (not scored)" in risk.format_report(summary)


@pytest.fixture
def cluster(tmp_path, zk_connect):
    from apply_support import make_cluster

    yield from make_cluster(tmp_path, zk_connect)


def test_risk_after_the_plan_on_the_cluster_read_again_sees_a_topic_made_after_the_snapshot(spark, cluster,
                                                                                           tmp_path, capsys):
    """Issue 19 item 1: the risk after a drain plan, scored on the snapshot, cannot see a topic created since
    (LOW, drain intent holds); with --zk it reads the cluster again, names the topic and scores its RF=1
    partition on the drained broker: CRITICAL after the plan."""
    from apply_support import brokers, part, poll, topic

    from planner import codec

    env = cluster({"brokers": brokers(4), "topics": [topic("orders", part([1, 2]), part([2, 3]), part([3, 4]))]})
    snap, plan = tmp_path / "snapshot", tmp_path / "plan"
    assert cli.main(["snapshot", "--zk", env.connect, "--out", str(snap)]) == 0
    ta = codec.TopicAssignment({0: [2, 3], 1: [2], 2: [4, 2]}, topic_id="UmlzS0FmdGVyVGhlUGxhbg", version=3)
    env.zk.create(codec.topic_config_path("late"), codec.encode_config({}), makepath=True)
    env.zk.create(codec.topic_path("late"), codec.encode_topic(ta), makepath=True)
    poll(lambda: all(env.zk.exists(codec.state_path("late", p)) for p in range(3)), timeout=30, what="late topic")
    assert cli.main(["plan", "drain", "--snapshot", str(snap), "--brokers", "2", "--out", str(plan), "--quiet"]) == 0
    common = ["risk", "--snapshot", str(snap), "--plan", str(plan), "--mode", "failure"]
    assert cli.main([*common, "--out", str(tmp_path / "on-snapshot")]) == 0
    blind = json.loads((tmp_path / "on-snapshot" / "summary.json").read_text())
    assert blind["level_by_state"]["plan"] == "low" and blind["intent"]["holds"] is True
    capsys.readouterr()
    assert cli.main([*common, "--zk", env.connect, "--out", str(tmp_path / "now")]) == 0
    out = capsys.readouterr().out
    assert "after the plan, broker(s) 2 host and lead nothing: NO (3 partitions stay" in out
    summary = json.loads((tmp_path / "now" / "summary.json").read_text())
    assert summary["level_by_state"] == {"current": "critical", "plan": "critical"}
    drain = next(s for s in summary["scenarios"] if s["state"] == "plan" and s["kind"] == "drain")
    assert drain["brokers"] == [2] and drain["offline"] == 1   # late-1, RF=1 on broker 2
    intent = summary["intent"]
    assert intent["holds"] is False
    assert {(r["topic"], r["partition"], r["reason"].split(" since")[0]) for r in intent["remaining"]} == {
        ("late", 0, "topic created"), ("late", 1, "topic created"), ("late", 2, "topic created")}
    assert summary["reread"]["partitions_appeared"] == 3
    assert summary["snapshot"]["path"] == str(tmp_path / "now" / "cluster")
    assert (tmp_path / "now" / "cluster" / "manifest.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []   # no temporary left
