"""A ZooKeeper-to-KRaft migration (KIP-866) on real Kafka 3.9.2: one cluster for the module (ZooKeeper, three
ZooKeeper-mode brokers), walked forward through Kafka's own procedure by the sandbox (`kplan sandbox migrate`):
pre-migration, hybrid, dual-write, finalized. In each phase:
- the snapshot reads the side planner/zk_migration.py names authoritative, and says which (manifest source);
- its partitions equal the cluster's own view: kafka-python's Metadata answer (its own decoding, not the
  planner's) and, while ZooKeeper is written at all, the partition state znodes read with plain kazoo;
- every ZooKeeper write is refused, naming the migration state, with nothing written;
- broker 3, drained in ZooKeeper mode (its state in the znode /kplan/maintenance/3, planner/maintenance_zk.py),
  stays in maintenance in every snapshot taken with `--zk`, the hybrid one read through the brokers' Admin API
  included, and a rebalance planned from that snapshot gives it nothing.

The tests run in order on the one cluster (each step forward is part of a test); the expected migration
states come from Kafka 3.9's KRaftMigrationDriver / ZkMigrationState as docs/KRAFT.md "Migration" lays them
out, not from the code under test.
"""

from __future__ import annotations

import json
import os
import signal

import pytest
from kafka import KafkaAdminClient

from planner import cli
from planner import zk as zkmod
from planner.kafka.broker import find_brokers
from planner.sandbox import Sandbox

pytestmark = pytest.mark.kafka

DESC = {"brokers": [{"id": i, "rack": f"r{i}"} for i in (1, 2, 3)], "topics": [
    {"name": "seed-rf1", "partitions": [{"replicas": [1]}]},
    {"name": "wide", "config": {"min.insync.replicas": "2"},
     "partitions": [{"replicas": [1, 2, 3]}, {"replicas": [2, 3, 1]}]},
]}
PARTS = [("seed-rf1", 0), ("wide", 0), ("wide", 1)]
DRAIN = "sha256:" + "d" * 64     # the plan that drained broker 3 before the migration (its id, as recorded)


@pytest.fixture(scope="module")
def plan_dir(tmp_path_factory):
    """A ZooKeeper plan moving seed-rf1-0 from broker 1 to 2: applied, it would change the topic's znode."""
    from apply_support import write_plan

    d = tmp_path_factory.mktemp("plan") / "plan"
    write_plan(d, [("seed-rf1", 0, [1], [2], 0)], [("data", [("seed-rf1", 0, [2])])])
    return d


@pytest.fixture(scope="module")
def mig(tmp_path_factory, kafka_jars):
    sb = Sandbox.up(tmp_path_factory.mktemp("mig") / "sb", cluster=DESC, engine="kafka", timeout=120,
                    session_timeout=6, shutdown_retries=1, shutdown_retry_interval=0.5, auto_rebalance=False,
                    data_bytes=0)
    try:
        yield sb
    finally:
        if (sb.dir / "sandbox.json").exists():
            sb.down()
        for pid in find_brokers(sb.dir / "kafka"):   # never leave a JVM behind, even on failure
            os.kill(pid, signal.SIGKILL)


def metadata_view(sb: Sandbox) -> dict[tuple[str, int], tuple[int, list[int], list[int]]]:
    """(leader, replicas, ISR) of every partition as a broker answers Metadata, decoded by kafka-python."""
    admin = KafkaAdminClient(bootstrap_servers=sb.bootstrap_servers.split(","), request_timeout_ms=10000)
    try:
        return {(t["name"], p["partition_index"]): (p["leader_id"], list(p["replica_nodes"]), list(p["isr_nodes"]))
                for t in admin.describe_topics() for p in t["partitions"] if not t["name"].startswith("__")}
    finally:
        admin.close()


def zk_view(sb: Sandbox) -> dict[tuple[str, int], tuple[int, list[int], list[int]]]:
    zk = zkmod.connect(sb.connect_string)
    try:
        out = {}
        for t, p in PARTS:
            st = json.loads(zk.get(f"/brokers/topics/{t}/partitions/{p}/state")[0])
            reps = json.loads(zk.get(f"/brokers/topics/{t}")[0])["partitions"][str(p)]
            out[(t, p)] = (st["leader"], reps, st["isr"])
        return out
    finally:
        zk.stop()
        zk.close()


def snapshot_view(snap) -> dict[tuple[str, int], tuple[int, list[int], list[int]]]:
    d = snap.partitions.to_pydict()
    return {(t, p): (ld, reps, isr) for t, p, ld, reps, isr in
            zip(d["topic"], d["partition"], d["leader"], d["replicas"], d["isr"], strict=True)
            if not t.startswith("__")}   # as metadata_view: the carry's transaction made __kplan and its state topic


def snapshot(tmp_path, name, **where):
    from planner.snapshot import take_snapshot

    return take_snapshot(where.get("zk"), tmp_path / name, bootstrap=where.get("bootstrap"), sizes_from="none")


def kplan_tree(zk) -> dict[str, bytes]:
    """Every znode under /kplan and its data, read with plain kazoo."""
    out: dict[str, bytes] = {}
    todo = ["/kplan"] if zk.exists("/kplan") else []
    while todo:
        p = todo.pop()
        out[p] = zk.get(p)[0]
        todo += [f"{p}/{c}" for c in zk.get_children(p)]
    return out


def maintenance_of(snap) -> dict[int, str | None]:
    b = snap.brokers.to_pydict()
    return dict(zip(b["broker"], b["maintenance"], strict=True))


def refused_write(sb: Sandbox, tmp_path, capsys, plan_dir, *expect: str) -> None:
    """`kplan apply` of a ZooKeeper plan exits 1 naming the state; no reassignment, lock, throttle or kplan
    state written (/kplan holds only broker 3's maintenance znode, as before)."""
    zk = zkmod.connect(sb.connect_string)
    try:
        before = {t: json.loads(zk.get(f"/brokers/topics/{t}")[0])["partitions"] for t in ("seed-rf1", "wide")}
        tree = kplan_tree(zk)
        assert json.loads(tree["/kplan/maintenance/3"])["state"] == "drained"
        capsys.readouterr()
        assert cli.main(["apply", "--zk", sb.connect_string, "--plan", str(plan_dir), "--no-throttle"]) == 1
        err = capsys.readouterr().err
        for e in expect:
            assert e in err, f"{e!r} not in {err!r}"
        assert zk.exists("/admin/reassign_partitions") is None and kplan_tree(zk) == tree
        assert {t: json.loads(zk.get(f"/brokers/topics/{t}")[0])["partitions"] for t in ("seed-rf1", "wide")} == before
    finally:
        zk.stop()
        zk.close()


def test_pre_migration_is_read_through_zookeeper_and_writes_are_refused(mig, tmp_path, capsys, plan_dir):
    """PRE_MIGRATION: the KRaft controller created /migration (kraft_metadata_offset -1) and waits for the
    brokers; the ZooKeeper controller still runs the cluster, so ZooKeeper is read. Broker 3 is drained before
    the migration starts, through the ZooKeeper storage as a drain's apply and verify move it
    (planner.maintenance_zk.change)."""
    from planner import maintenance as mt
    from planner import maintenance_zk

    zk = zkmod.connect(mig.connect_string)
    try:
        maintenance_zk.change(zk, [3], mt.DRAIN_APPLY, mt.DRAINING, plan_id=DRAIN, reason="disk swap")
        maintenance_zk.change(zk, [3], mt.DRAIN_VERIFY, mt.DRAINED, plan_id=DRAIN, reason="disk swap")
    finally:
        zk.stop()
        zk.close()
    before = snapshot(tmp_path, "zk-mode", zk=mig.connect_string)
    assert maintenance_of(before) == {1: None, 2: None, 3: "drained"}
    assert "migration" not in before.manifest["source"]
    assert mig.migrate("pre-migration")["steps"].keys() == {"pre-migration"}
    snap = snapshot(tmp_path, "pre", zk=mig.connect_string)
    m = snap.manifest["source"]["migration"]
    assert (m["state"], m["authoritative"], m["kraft_metadata_offset"], m["zk_brokers"]) == \
        ("PRE_MIGRATION", "zookeeper", -1, 3)
    assert m["zk_controller"] in (1, 2, 3)          # a ZooKeeper-mode broker, not the KRaft controller (1000)
    assert snapshot_view(snap) == zk_view(mig) == metadata_view(mig)
    assert snapshot_view(snap) == snapshot_view(before)
    assert maintenance_of(snap) == {1: None, 2: None, 3: "drained"}
    refused_write(mig, tmp_path, capsys, plan_dir, "migration state PRE_MIGRATION",
                  "ZooKeeper is still authoritative", "finish the migration")


def test_hybrid_is_read_through_the_brokers_admin_api(mig, tmp_path, capsys, plan_dir):
    """MIGRATION, hybrid: the KRaft controller copied the metadata (kraft_metadata_offset > 0), claimed /controller
    and leads brokers still in ZooKeeper mode: the snapshot reads their Admin API, and says so."""
    mig.migrate("hybrid")
    snap = snapshot(tmp_path, "hybrid", zk=mig.connect_string)
    src = snap.manifest["source"]
    assert src["backend"] == "kraft" and src["zk"] == mig.connect_string.split("/")[0]
    m = src["migration"]
    assert (m["state"], m["phase"], m["authoritative"], m["kraft_controller_id"], m["zk_brokers"]) == \
        ("MIGRATION", "hybrid", "kraft", 1000, 3) and m["kraft_metadata_offset"] > 0
    assert snap.manifest["controller"]["broker"] == 1000
    assert snapshot_view(snap) == metadata_view(mig) == zk_view(mig)   # dual-write keeps the copy alike
    # broker 3's state is still the znode's (the brokers' Admin API, read here, knows no __kplan), and the
    # snapshot says so; the operator is told to carry it before the brokers leave ZooKeeper mode
    assert maintenance_of(snap) == {1: None, 2: None, 3: "drained"}
    assert [(e["broker"], e["state"], e["plan_id"]) for e in snap.manifest["maintenance"]] == [(3, "drained", DRAIN)]
    assert any("maintenance carry" in w["problem"] and "brokers [3]" in w["problem"] for w in snap.manifest["warnings"])
    # a rebalance planned from this snapshot: broker 1 holds 3 replicas, 2 and 3 hold 2 each; broker 3 gets nothing
    capsys.readouterr()
    assert cli.main(["plan", "rebalance", "--snapshot", str(tmp_path / "hybrid"), "--out", str(tmp_path / "plan"),
                     "--quiet"]) == 0
    assert "LEFT OUT           broker 3: drained" in capsys.readouterr().out
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert plan["summary"]["left_out_brokers"] == [3]
    assert not [m for m in plan["moves"] if 3 in m["to"]]
    # the same brokers asked directly: they finalize no metadata.version, so they are ZooKeeper-mode brokers
    capsys.readouterr()
    assert cli.main(["snapshot", "--bootstrap-server", mig.bootstrap_servers, "--out", str(tmp_path / "b")]) == 2
    assert "ZooKeeper connect string" in capsys.readouterr().err
    refused_write(mig, tmp_path, capsys, plan_dir, "migration state MIGRATION, hybrid phase",
                  "KRaft controller 1000 (epoch 1) is the controller", "finish the migration")


def test_half_rolled_hybrid_knows_the_broker_zookeeper_no_longer_lists(mig, tmp_path):
    """Hybrid half way through the roll to KRaft mode: broker 3 restarted as a KRaft broker, 1 and 2 still in
    ZooKeeper mode. ZooKeeper no longer lists broker 3 (KRaft brokers register with the controller only), so a
    ZooKeeper read would take it for dead while it serves its replicas; the snapshot, read through the Admin API
    of brokers 1 and 2, has it alive, and its partitions as the brokers answer them."""
    assert mig.migrate("dual-write", brokers=[3])["to"] == "hybrid"
    zk = zkmod.connect(mig.connect_string)
    try:
        assert sorted(zk.get_children("/brokers/ids")) == ["1", "2"]
    finally:
        zk.stop()
        zk.close()
    snap = snapshot(tmp_path, "half", zk=mig.connect_string)
    m = snap.manifest["source"]["migration"]
    assert (m["state"], m["phase"], m["zk_brokers"], snap.manifest["source"]["backend"]) == \
        ("MIGRATION", "hybrid", 2, "kraft")
    b = snap.brokers.to_pydict()
    assert dict(zip(b["broker"], b["alive"], strict=True)) == {1: True, 2: True, 3: True}
    view = metadata_view(mig)
    assert snapshot_view(snap) == view and any(3 in isr for _, _, isr in view.values())
    # the seed incident here: the KRaft controller fences the killed ZooKeeper-mode broker 1; what the snapshot
    # predicts (KRaft rules, ELR off: the migration runs at metadata.version 3.9-IV0) is what happens. (The next
    # step starts broker 1 again, as a KRaft broker.)
    from planner import replay_kraft as kr

    predicted = {(r["topic"], r["partition"]): (r["leader"], r["isr"])
                 for r in kr.predict(snap, [1], "failure").to_pylist() if (r["topic"], r["partition"]) in PARTS}
    mig.kill([1])
    real = {k: (leader, isr) for k, (leader, _, isr) in metadata_view(mig).items()}
    assert real[("seed-rf1", 0)] == (-1, [1])       # leaderless; without ELR the ISR keeps its last member
    assert predicted == real


@pytest.mark.parametrize("phase", ["dual-write", "finalized"])
def test_brokers_in_kraft_mode_are_read_through_the_bootstrap_servers(mig, tmp_path, capsys, plan_dir, phase):
    """MIGRATION, dual-write (then POST_MIGRATION, finalized): no broker is registered in ZooKeeper any more;
    a ZooKeeper read is refused naming the state, the bootstrap servers are read as a KRaft cluster."""
    mig.migrate(phase)
    capsys.readouterr()
    assert cli.main(["snapshot", "--zk", mig.connect_string, "--out", str(tmp_path / "z")]) == 1
    err = capsys.readouterr().err
    assert "migration state MIGRATION, dual-write phase" in err and "bootstrap servers" in err
    assert not (tmp_path / "z").exists() or not (tmp_path / "z" / "manifest.json").exists()
    # broker 3's maintenance znode is named, with the command that carries it into __kplan; carried once (the
    # second carry finds it there), every read through the bootstrap servers, after finalizing too, keeps it
    assert "maintenance state (broker 3 drained)" in err
    assert f"`kplan maintenance carry --zk {mig.connect_string} --bootstrap-server HOST:PORT` copies it" in err
    if phase == "dual-write":
        carry = ["maintenance", "carry", "--zk", mig.connect_string, "--bootstrap-server", mig.bootstrap_servers]
        assert cli.main(carry) == 0
        assert capsys.readouterr().out.strip() == "carried into __kplan: broker 3 drained"
        assert cli.main(carry) == 0
        assert capsys.readouterr().out.strip() == "already in __kplan: broker 3 drained"
    snap = snapshot(tmp_path, phase, bootstrap=mig.bootstrap_servers)
    assert [(e["broker"], e["state"], e["plan_id"]) for e in snap.manifest["maintenance"]] == [(3, "drained", DRAIN)]
    assert snap.manifest["source"]["backend"] == "kraft"
    assert snap.manifest["source"]["metadata_version"] == "3.9-IV0"
    assert snap.manifest["controller"]["broker"] == 1000
    assert snapshot_view(snap) == metadata_view(mig)
    if phase == "dual-write":
        assert snapshot_view(snap) == zk_view(mig)
        refused_write(mig, tmp_path, capsys, plan_dir, "migration state MIGRATION, dual-write phase",
                      "must not be written")
