"""The KRaft reference replay (planner.replay_kraft) against hand-worked cases: every expected value below was
worked out by hand from Kafka 4.1.1's PartitionChangeBuilder / ReplicationControlManager (the line numbers in
the module's docstrings), step by step in the comments, never taken from the code's output."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from planner import replay_kraft as kr
from planner import risk
from planner import risk_model as rm
from planner.cluster import parse_cluster
from planner.errors import BadInput

ELR_ON = {"metadata.version": 27, "eligible.leader.replicas.version": 1}
ELR_OFF = {"metadata.version": 21}


def ksnap(topics: list[dict], brokers: int | list[dict] = 3, features: dict | None = None,
          fenced: tuple[int, ...] = (), shutting: tuple[int, ...] = ()) -> risk.sio.Snapshot:
    """An in-memory KRaft snapshot: partitions may carry "elr" / "last_known_elr"; the manifest's source is
    kraft with `features` (ELR on by default, as a fresh 4.1.1 format finalizes)."""
    if isinstance(brokers, int):
        brokers = [{"id": i, "rack": f"r{(i - 1) % 3 + 1}"} for i in range(1, brokers + 1)]
    plain = [{**t, "partitions": [{k: v for k, v in p.items() if k not in ("elr", "last_known_elr")}
                                  for p in t["partitions"]]} for t in topics]
    s = risk.snapshot_from_cluster(parse_cluster({"brokers": brokers, "topics": plain}))
    by = {(t["name"], i): p for t in topics for i, p in enumerate(t["partitions"])}
    keys = list(zip(s.partitions.column("topic").to_pylist(), s.partitions.column("partition").to_pylist(),
                    strict=True))
    parts = s.partitions
    for col in ("elr", "last_known_elr"):
        parts = parts.append_column(col, pa.array([by[k].get(col, []) for k in keys], pa.list_(pa.int32())))
    ids = s.brokers.column("broker").to_pylist()
    b = s.brokers.append_column("fenced", pa.array([i in fenced for i in ids]))
    b = b.append_column("in_controlled_shutdown", pa.array([i in shutting for i in ids]))
    manifest = {**s.manifest, "source": {"backend": "kraft", "metadata_version": "4.1-IV1",
                                         "features": ELR_ON if features is None else features}}
    return risk.sio.Snapshot(None, manifest, b, s.topics, parts)


def topic(name: str, *parts: dict, **config: str) -> dict:
    return {"name": name, "config": {k.replace("_", "."): v for k, v in config.items()}, "partitions": list(parts)}


def predict(s, brokers, mode="failure") -> dict[tuple[str, int], dict]:
    t = kr.predict(s, brokers, mode).to_pylist()
    return {(r["topic"], r["partition"]): r for r in t}


def state(r: dict) -> tuple:
    return r["leader"], r["isr"], r["elr"], r["last_known_elr"]


SEED = [topic("payments", {"replicas": [1]}),
        topic("orders", {"replicas": [1, 2, 3]}, {"replicas": [2, 3, 1]}, min_insync_replicas="2")]


# --------------------------------------------------------------------------------------- seed incident
@pytest.mark.parametrize("mode", ["failure", "controlled"])
def test_seed_incident_with_elr_on_the_rf1_partition_keeps_broker_1_as_eligible_and_last_known_leader(mode):
    got = predict(ksnap(SEED), [1], mode)
    # payments-0, ISR [1], leader 1, eff min ISR min(1, RF 1) = 1. Remove 1: target ISR [] (L2032); 0 < 1 so
    # ELR = ({} + ISR [1]) - [] = [1] (L553-558). Election: 1 is not acceptable (brokerToRemove), no replica
    # left, ELR not empty so no last-known-leader election, unclean off: -1. ELR on writes the empty ISR
    # (L446); the leader was lost for the first time, so last known ELR = [old leader 1] (L497-499).
    assert state(got[("payments", 0)]) == (-1, [], [1], [1])
    assert got[("payments", 0)]["offline"] and not got[("payments", 0)]["unclean"]
    # orders-0 [1,2,3] min ISR 2: target ISR [2,3], 2 >= 2: ELR empty; leader 1 invalid -> first valid replica 2
    assert state(got[("orders", 0)]) == (2, [2, 3], [], [])
    # orders-1 [2,3,1]: leader 2 stays, ISR [2,3]
    assert state(got[("orders", 1)]) == (2, [2, 3], [], [])


@pytest.mark.parametrize("mode", ["failure", "controlled"])
def test_seed_incident_with_elr_off_matches_zookeeper_mode_leader_minus_1_isr_1(mode):
    got = predict(ksnap(SEED, features=ELR_OFF), [1], mode)
    # ELR off: the empty target ISR is not written (L446: !targetIsr.isEmpty() || elrEnabled), so ISR stays
    # [1]; the last known ELR is only kept while ELR is on (L496). The ZooKeeper answer, {"leader":-1,"isr":[1]}.
    assert state(got[("payments", 0)]) == (-1, [1], [], [])


def test_seed_incident_risk_rows_are_critical_in_both_modes():
    s = ksnap(SEED)
    scen = risk.build_scenarios(s, [(1,)], modes=rm.MODES)
    res = kr.replay(kr.KraftState.from_snapshot(s), scen)
    rows = [r for r in res.rows.to_pylist() if r["topic"] == "payments"]
    assert len(rows) == 2
    for r in rows:
        assert (r["new_leader"], r["new_isr"], r["new_elr"], r["new_last_known_elr"]) == (-1, [], [1], [1])
        assert r["offline"] and r["rf1_hit"] and not r["would_need_unclean"] and r["severity"] == 4
        assert r["shutdown_blocked_by"] == -1 and r["clean_return"] == [1]
    for sc in res.scenarios.to_pylist():
        assert sc["level"] == "critical" and sc["offline"] == 1 and sc["failed_shutdowns"] == []
        # KRaft: broker.session.timeout.ms 9 s for a kill; a controlled shutdown has no window
        assert sc["unavailable_window_s"] == (9.0 if sc["mode"] == "failure" else 0.0)


# ------------------------------------------------------------------------------------------- ELR
def test_a_fenced_broker_that_leaves_an_isr_below_min_isr_joins_the_elr():
    # [1,2,3], ISR [1,2] (3 out of sync), leader 1, min ISR 2. Kill 1: target ISR [2] < 2 -> ELR = ({} + [1,2])
    # - [2] = [1]. Leader 1 invalid; replicas in order: 2 is in the ISR and active -> 2. Leader changed to a
    # live one and the last known ELR was empty: unchanged [].
    s = ksnap([topic("t", {"replicas": [1, 2, 3], "isr": [1, 2], "leader": 1}, min_insync_replicas="2")])
    r = predict(s, [1])[("t", 0)]
    assert state(r) == (2, [2], [1], [])
    assert r["under_min_isr"] and not r["offline"]


@pytest.mark.parametrize("order, expected, others", [
    # order 1,2,3 (leader 1): fence 1 -> ISR [2,3] (2 >= 2: ELR []), leader 2; fence 2 -> ISR [3] < 2:
    # ELR ({} + [2,3]) - [3] = [2], leader 3; fence 3 -> ISR [], ELR ({2} + [3]) = [2,3] (buckets 2, 3),
    # nobody acceptable: -1, last known ELR [3].
    ((1, 2, 3), (-1, [], [2, 3], [3]), [1]),
    # order 3,2,1: fence 3 -> ISR [1,2]; fence 2 -> ISR [1], ELR [2]; fence 1 -> ISR [], ELR {2} + [1] iterated
    # as [1, 2] (bucket 1 before bucket 2), last known ELR [1].
    ((3, 2, 1), (-1, [], [1, 2], [1]), [3]),
])
def test_killing_the_whole_isr_leaves_an_elr_that_depends_on_the_fencing_order(order, expected, others):
    s = ksnap([topic("t", {"replicas": [1, 2, 3]}, min_insync_replicas="2")])
    r = predict(s, order)[("t", 0)]
    assert state(r) == expected
    # another order puts the broker fenced first in the ELR instead: flagged, and named
    assert r["order_dependent"] and r["isr_alternatives"] == others


def test_the_elr_of_a_partition_left_below_min_isr_depends_on_the_fencing_order():
    # [1,2,3] ISR [1,2,3] leader 1, min ISR 2; kill 1 then 2: fence 1 -> ISR [2,3] (no ELR), leader 2; fence 2 ->
    # ISR [3] < 2, ELR ({} + [2,3]) - [3] = [2], leader 3. Killed 2 then 1, the ELR would be [1]: flagged,
    # naming 1. Controlled, the order is the requests' (given): not flagged.
    s = ksnap([topic("t", {"replicas": [1, 2, 3]}, min_insync_replicas="2")])
    r = predict(s, [1, 2])[("t", 0)]
    assert state(r) == (3, [3], [2], []) and r["under_min_isr"]
    assert r["order_dependent"] and r["isr_alternatives"] == [1]
    assert not predict(s, [1, 2], "controlled")[("t", 0)]["order_dependent"]
    # min ISR 3: every ISR member falls into the ELR whatever the order ([1] then [1,2]): nothing to flag
    s = ksnap([topic("t", {"replicas": [1, 2, 3]}, min_insync_replicas="3")])
    r = predict(s, [1, 2])[("t", 0)]
    assert state(r) == (3, [3], [1, 2], []) and not r["order_dependent"]


def test_a_live_elr_member_is_elected_cleanly_when_the_isr_empties():
    # [1,2,3], leader 3, ISR [3], ELR [2] with broker 2 up again (unfenced, not caught up). Kill 3: target ISR
    # [] < 2 -> ELR ({2} + [3]) = [2,3]. Leader 3 not acceptable; ISR empty, so ELR members are valid: replica
    # order 1 (not in ELR), 2 (ELR, active) -> 2, clean. From the ELR: ISR [2], ELR [3] (L334-337).
    s = ksnap([topic("t", {"replicas": [1, 2, 3], "isr": [3], "leader": 3, "elr": [2]}, min_insync_replicas="2")])
    r = predict(s, [3])[("t", 0)]
    assert state(r) == (2, [2], [3], [])
    assert not r["unclean"] and not r["offline"]


def test_the_last_known_leader_is_elected_when_isr_and_elr_are_empty():
    # Leaderless, ISR [], ELR [], last known ELR [2], broker 2 active: no valid replica, then
    # canElectLastKnownLeader (L290-320) holds: leader 2, unclean (L274), ISR [2] (L351), ELR emptied, last
    # known ELR cleared as the partition has a leader again (L500-502).
    p = kr.Parts(np.array([[1, 2]], np.int32), np.array([[-1, -1]], np.int32), np.array([[-1, -1]], np.int32),
                 np.array([[2, -1]], np.int32), np.array([-1], np.int32), np.array([1], np.int32),
                 np.array([False]))
    acceptable = np.array([False, False, True])
    ch = kr.build(p, acceptable, elr_enabled=True)
    assert (int(ch.parts.leader[0]), ch.parts.isr[0].tolist(), ch.parts.lke[0].tolist()) == (2, [2, -1], [-1, -1])
    assert ch.unclean[0] and ch.changed[0]
    # ELR off: no last-known-leader election (L291), nothing changes
    off = kr.build(p, acceptable, elr_enabled=False)
    assert int(off.parts.leader[0]) == -1 and not off.changed[0]


@pytest.mark.parametrize("unclean, expected, taken", [
    # [1,2], ISR [1], 2 out of sync and live, min ISR 1. Kill 1: target ISR [] < 1 -> ELR [1]. No valid leader,
    # ELR not empty (no last-known-leader election); with unclean election on, the first acceptable replica 2,
    # unclean: ISR [2], ELR emptied (L511-513); last known ELR untouched ([]: the leader went 1 -> 2).
    ("true", (2, [2], [], []), True),
    ("false", (-1, [], [1], [1]), False),
])
def test_unclean_election_takes_a_live_out_of_sync_replica_only_where_the_topic_allows(unclean, expected, taken):
    s = ksnap([topic("t", {"replicas": [1, 2], "isr": [1], "leader": 1}, unclean_leader_election_enable=unclean)])
    r = predict(s, [1])[("t", 0)]
    assert state(r) == expected and r["unclean"] == taken
    scen = risk.build_scenarios(s, [(1,)], modes=("failure",))
    row = kr.replay(kr.KraftState.from_snapshot(s), scen).rows.to_pylist()[0]
    assert row["would_need_unclean"] == (not taken) and row["unclean_taken"] == taken


def test_elr_off_keeps_the_last_isr_member_and_needs_unclean_for_a_live_replica():
    s = ksnap([topic("t", {"replicas": [1, 2], "isr": [1], "leader": 1})], features=ELR_OFF)
    r = predict(s, [1])[("t", 0)]
    assert state(r) == (-1, [1], [], [])


# ------------------------------------------------------------------------------- controlled shutdown
def test_a_kraft_controlled_shutdown_never_fails_where_zookeeper_mode_blocks_it():
    # [1,2], ISR [1], leader 1, min ISR 2 (eff min(2, 2) = 2). ZooKeeper mode: no candidate, the shutdown
    # fails. KRaft: the request removes 1 from the ISR and elects nobody: leader -1 at once, hasLeaderships is
    # then false and the shutdown is granted (BHM L453-466). ISR [] < 2 -> ELR [1], last known ELR [1].
    s = ksnap([topic("t", {"replicas": [1, 2], "isr": [1], "leader": 1}, min_insync_replicas="2")])
    scen = risk.build_scenarios(s, [(1,)], modes=("controlled",))
    res = kr.replay(kr.KraftState.from_snapshot(s), scen)
    r = res.rows.to_pylist()[0]
    assert (r["new_leader"], r["new_isr"], r["new_elr"], r["new_last_known_elr"]) == (-1, [], [1], [1])
    assert r["shutdown_blocked_by"] == -1 and not r["blocks_shutdown"]
    assert res.scenarios.to_pylist()[0]["failed_shutdowns"] == []


@pytest.mark.parametrize("mode", ["controlled", "failure"])
def test_a_leader_moves_onto_a_draining_broker_that_has_not_asked_yet_and_moves_again(mode):
    # [1,2,3] ISR [1,2,3] leader 1, min ISR 1. Broker 1 first: target ISR [2,3], first valid replica 2 (still
    # active). Broker 2: ISR [3], leader 3. Two changes. Then (controlled) both are fenced: no ISR holds them.
    s = ksnap([topic("t", {"replicas": [1, 2, 3]})])
    scen = [x for x in risk.build_scenarios(s, [(1, 2)], modes=(mode,)) if x.kind == "drain"]
    r = kr.replay(kr.KraftState.from_snapshot(s), scen).rows.to_pylist()[0]
    assert (r["new_leader"], r["new_isr"], r["new_elr"]) == (3, [3], [])
    assert r["leader_changes"] == 2 and r["moved_twice"]


def test_brokers_fenced_or_in_controlled_shutdown_in_the_snapshot_are_no_candidates():
    # [1,2,3] ISR [1,2,3] leader 1; broker 2 fenced (a stale ISR), so not acceptable: kill 1 -> leader 3
    # (first valid in replica order: 2 invalid, 3); ISR [2,3] (the removal of 1 only).
    s = ksnap([topic("t", {"replicas": [1, 2, 3]})], fenced=(2,))
    assert state(predict(s, [1])[("t", 0)]) == (3, [2, 3], [], [])
    s = ksnap([topic("t", {"replicas": [1, 2, 3]})], shutting=(2,))
    assert state(predict(s, [1])[("t", 0)]) == (3, [2, 3], [], [])


def test_the_elrs_min_isr_is_capped_by_the_rf_of_the_topics_partition_0():
    # min.insync.replicas 3; partition 0 has RF 2, partition 1 RF 3: RCM.getTopicEffectiveMinIsr reads
    # partition 0's RF, so the controller's min ISR is min(3, 2) = 2 for both. Kill 1 on partition 1
    # ([1,2,3]): target ISR [2,3], 2 >= 2: no ELR (with min ISR 3 it would be [1]). Producers with acks=all meet
    # the leader's own min(3, RF 3) = 3: under min ISR.
    s = ksnap([topic("t", {"replicas": [2, 3]}, {"replicas": [1, 2, 3]}, min_insync_replicas="3")])
    st = kr.KraftState.from_snapshot(s)
    assert st.eff_min.tolist() == [2, 2]
    r = predict(s, [1])[("t", 1)]
    assert state(r) == (2, [2, 3], [], []) and r["under_min_isr"]


# ------------------------------------------------------------------------------------ rolling return
@pytest.mark.parametrize("mode, returned", [
    # failure: broker 1 comes back after an unclean shutdown: it leaves the ELR (L1446-1451: ELR [1] -> []),
    # then on unfencing the partition has ISR [], ELR [], last known ELR [1], 1 acceptable: the last known
    # leader is elected (unclean, L273-275): 1.
    ("failure", 1),
    # controlled: a clean shutdown is handled as fenced (nothing left to remove); unfencing elects 1 from the
    # ELR (ISR empty, 1 in ELR and acceptable): 1.
    ("controlled", 1),
])
def test_the_rf1_partition_comes_back_with_its_broker(mode, returned):
    s = ksnap(SEED)
    scen = [x for x in risk.build_scenarios(s, [(1, 2)], modes=(mode,)) if x.kind == "rolling"]
    rows = kr.replay(kr.KraftState.from_snapshot(s), scen).rows.to_pylist()
    step1 = [r for r in rows if r["topic"] == "payments" and r["scenario_id"] == scen[0].id][0]
    assert step1["new_leader"] == -1 and step1["returned_leader"] == returned


@pytest.mark.parametrize("mode, returned", [
    # [1,2,3] ISR [1] ELR [2] leader 1, min ISR 2, brokers 2 and 3 fenced. Step 1 kills 1: target ISR [] ->
    # ELR ({2} + [1]) = [1,2], leader -1, last known ELR [1]. Back after an unclean shutdown: 1 leaves the ELR
    # (({1,2} + []) - [] - {1} = [2]); unfenced, no valid leader (ISR empty, ELR [2] fenced) and no last-known-
    # leader election while the ELR is not empty: it stays leaderless (KIP-966: a killed broker may have lost
    # acknowledged records). After a clean stop, 1 is still in the ELR and is elected: 1.
    ("failure", -1),
    ("controlled", 1),
])
def test_a_killed_broker_does_not_take_back_a_partition_whose_elr_names_another(mode, returned):
    s = ksnap([topic("t", {"replicas": [1, 2, 3], "isr": [1], "leader": 1, "elr": [2]}, min_insync_replicas="2")],
              fenced=(2, 3))
    scen = [x for x in risk.build_scenarios(s, [(1, 2)], modes=(mode,)) if x.kind == "rolling"]
    rows = kr.replay(kr.KraftState.from_snapshot(s), scen).rows.to_pylist()
    step1 = [r for r in rows if r["scenario_id"] == scen[0].id][0]
    assert (step1["new_leader"], step1["new_isr"], step1["new_elr"], step1["new_last_known_elr"]) == (-1, [], [1, 2],
                                                                                                      [1])
    assert step1["returned_leader"] == returned


def test_a_rolling_step_starts_from_where_the_previous_step_left_the_leaders():
    # orders-0 [1,2,3], ISR [1,2,3], leader 1. Step 1 (broker 1 killed): leader 2, ISR [2,3]; back: rejoins
    # the ISR it was in -> [2,3,1], leader stays 2. Step 2 (broker 2): target ISR [3,1]; leader 2 invalid;
    # replicas in order: 1 is in the ISR and active -> 1.
    s = ksnap(SEED)
    scen = [x for x in risk.build_scenarios(s, [(1, 2)], modes=("failure",)) if x.kind == "rolling"]
    rows = kr.replay(kr.KraftState.from_snapshot(s), scen).rows.to_pylist()
    step2 = [r for r in rows if (r["topic"], r["partition"]) == ("orders", 0) and r["scenario_id"] == scen[1].id][0]
    assert (step2["leader"], step2["isr"]) == (2, [2, 3, 1])
    assert (step2["new_leader"], step2["new_isr"]) == (1, [3, 1])


# ---------------------------------------------------------------------------------- java.util.HashSet
def test_elr_order_is_hash_bucket_order_then_insertion():
    # HashSet of capacity 16: 3 -> bucket 3, 1 -> bucket 1: [1, 3]; 17 and 1 share bucket 1, inserted 17 first.
    isr = np.array([[3, 1], [17, 1]], np.int32)
    got = kr.populate_elr(isr, np.full((2, 0), -1, np.int32), np.full((2, 0), -1, np.int32), np.array([2, 2]))
    assert got.tolist() == [[1, 3], [17, 1]]


JAVA = """
import java.util.*;
public class ElrOrder {
    public static void main(String[] a) {
        Scanner in = new Scanner(System.in);
        while (in.hasNextLine()) {
            String[] halves = in.nextLine().split("\\\\|", -1);
            List<Integer> elr = new ArrayList<>();
            for (String x : halves[0].trim().split(" ")) if (!x.isEmpty()) elr.add(Integer.parseInt(x));
            Set<Integer> set = new HashSet<>(elr);      // PartitionChangeBuilder L553-554
            for (String x : halves[1].trim().split(" ")) if (!x.isEmpty()) set.add(Integer.parseInt(x));
            StringBuilder out = new StringBuilder();
            for (Integer x : set) out.append(x).append(' ');
            System.out.println(out.toString().trim());
        }
    }
}
"""


def test_elr_order_matches_java_util_hashset(tmp_path: Path):
    """The HashSet order held to the JDK itself, on 400 random (ELR, ISR) pairs: ids up to 70,000 (past the
    16-bit spreading), sets up to 30 members (past the first resizes)."""
    rng = random.Random(24)
    cases = []
    for _ in range(400):
        hi = rng.choice([20, 40, 1100, 70_000])
        n = rng.choice([1, 2, 3, 5, 8, 13, 20, 30])
        ids = rng.sample(range(hi), min(n, hi))
        k = rng.randint(0, len(ids))
        cases.append((ids[:k], ids[k:]))
    src = tmp_path / "ElrOrder.java"
    src.write_text(JAVA)
    stdin = "\n".join(" ".join(map(str, e)) + "|" + " ".join(map(str, s)) for e, s in cases) + "\n"
    out = subprocess.run(["java", str(src)], input=stdin, capture_output=True, text=True, timeout=120, check=True)
    want = [[int(x) for x in line.split()] for line in out.stdout.splitlines()]
    w = 30
    for (e, s), expected in zip(cases, want, strict=True):
        elr = np.full((1, w), -1, np.int32)
        isr = np.full((1, w), -1, np.int32)
        elr[0, : len(e)] = e
        isr[0, : len(s)] = s
        got = kr.populate_elr(isr, np.full((1, 0), -1, np.int32), elr, np.array([99]))
        assert got[0][got[0] >= 0].tolist() == expected, (e, s)


# ----------------------------------------------------------------------------------------- source
def test_the_source_decides_the_rules():
    assert kr.kraft_source({}) is None
    assert kr.kraft_source({"source": {"zk": "127.0.0.1:2181", "chroot": None}}) is None
    assert kr.kraft_source({"source": {"backend": "zookeeper"}}) is None
    src = kr.kraft_source({"source": {"backend": "kraft", "metadata_version": "4.1-IV1", "features": ELR_ON}})
    assert src is not None and src.elr
    assert not kr.kraft_source({"source": {"backend": "kraft", "metadata_version": "3.9-IV0",
                                           "features": ELR_OFF}}).elr
    with pytest.raises(BadInput, match="features"):
        kr.kraft_source({"source": {"backend": "kraft", "metadata_version": None, "features": None}})


def test_the_numpy_engine_writes_the_risk_folder_and_the_zookeeper_entry_refuses_a_kraft_snapshot(tmp_path):
    """planner.risk_kraft with the numpy reference (no Spark): the folder complete, the KRaft rules named; the
    job's ZooKeeper-only entry refuses a KRaft snapshot in one line, writing nothing (`kplan risk`, in-process
    or through spark-submit, runs the Spark job's KRaft rule set: tests/test_kraft_risk_spark.py)."""
    from planner import api, risk_kraft

    s = ksnap(SEED)
    out = tmp_path / "risk"
    prepared = risk.prepare(api.RiskRequest(snapshot=s, out=out, drains=((1,),)), kraft_ok=True)
    doc = risk_kraft.run(prepared, out)
    assert doc == json.loads((out / "summary.json").read_text())
    assert doc["backend"]["backend"] == "kraft" and doc["backend"]["elr"] is True and doc["backend"]["engine"] == "numpy"
    assert doc["kafka_version"].startswith("KRaft") and doc["level"] == "critical"
    assert sorted(p.name for p in out.iterdir()) == ["partitions.parquet", "scenarios.parquet", "summary.json"]
    rows = pq.read_table(out / "partitions.parquet").to_pylist()
    pay = [r for r in rows if r["topic"] == "payments"]
    assert {(r["new_leader"], tuple(r["new_isr"]), tuple(r["new_elr"])) for r in pay} == {(-1, (), (1,))}
    worst = doc["scenarios"][0]["worst_partitions"]
    assert worst[0]["topic"] == "payments" and worst[0]["new_elr"] == [1]
    assert "KRaft" in risk.format_report(doc)
    # the ZooKeeper-only entry (planner.spark.job.assess) never scores a KRaft cluster with ZooKeeper's rules
    with pytest.raises(BadInput, match="runs ZooKeeper's controller rules only"):
        risk.prepare(api.RiskRequest(snapshot=s, out=tmp_path / "r4"))
    assert not (tmp_path / "r4").exists()
