"""The reference replay against hand-worked cases from docs/KAFKA_ZK.md §2 (expected values worked out by
hand from the rules, not from the code), plus the outcome/level definitions of planner.risk_model."""

from __future__ import annotations

import numpy as np
import pytest

from planner import replay, risk
from planner import risk_model as rm
from planner.cluster import parse_cluster
from planner.codec import ReassignEntry
from planner.errors import BadInput


def snap(topics: list[dict], brokers: int | list[dict] = 3, **extra) -> risk.sio.Snapshot:
    if isinstance(brokers, int):
        brokers = [{"id": i, "rack": f"r{(i - 1) % 3 + 1}"} for i in range(1, brokers + 1)]
    return risk.snapshot_from_cluster(parse_cluster({"brokers": brokers, "topics": topics, **extra}))


def topic(name: str, *parts: dict, **config: str) -> dict:
    cfg = {k.replace("_", "."): v for k, v in config.items()}
    return {"name": name, "config": cfg, "partitions": list(parts)}


def run(s: risk.sio.Snapshot, drain: tuple[int, ...], mode: str = "failure", version: str = "3.7",
        rolling: bool = False) -> tuple[list[dict], list[dict]]:
    """Replay one drain (and its rolling steps when asked); rows and scenario rows as dicts."""
    info = s
    scenarios = [x for x in risk.build_scenarios(info, [drain], modes=(mode,))
                 if (x.kind == "rolling") == rolling]
    res = replay.replay(replay.ClusterState.from_snapshot(s), scenarios, version)
    return res.rows.to_pylist(), res.scenarios.to_pylist()


def row(rows: list[dict], name: str, partition: int = 0, scenario: int | None = None) -> dict:
    found = [r for r in rows if r["topic"] == name and r["partition"] == partition
             and (scenario is None or r["scenario_id"] == scenario)]
    assert len(found) == 1, found
    return found[0]


# --------------------------------------------------------------------------------------- seed incident
@pytest.mark.parametrize("mode", ["failure", "controlled"])
def test_seed_incident_rf1_on_broker_1_goes_offline_and_is_critical(mode):
    s = snap([topic("payments", {"replicas": [1]}),
              topic("orders", {"replicas": [1, 2, 3]}, {"replicas": [2, 3, 1]}, min_insync_replicas="2")])
    rows, scen = run(s, (1,), mode)
    p = row(rows, "payments")
    # docs/KAFKA_ZK.md: the RF=1 topic shows exactly {"leader":-1,"isr":[1]} after broker 1 is gone
    assert (p["new_leader"], p["new_isr"]) == (-1, [1])
    assert p["offline"] and p["rf1_hit"] and not p["would_need_unclean"] and p["severity"] == 4
    assert scen[0]["level"] == "critical" and scen[0]["offline"] == 1 and scen[0]["rf1_hit"] == 1
    # the RF=3 partitions survive: orders-0 led by 1 moves to 2, orders-1 loses its follower 1
    assert (row(rows, "orders", 0)["new_leader"], row(rows, "orders", 0)["new_isr"]) == (2, [2, 3])
    assert (row(rows, "orders", 1)["new_leader"], row(rows, "orders", 1)["new_isr"]) == (2, [2, 3])


# ------------------------------------------------------------------------------------ offline election
@pytest.mark.parametrize("mode", ["failure", "controlled"])
def test_new_leader_is_first_live_isr_member_in_assignment_order(mode):
    # lowest live ISR id would be 2, ISR order would give 3; assignment order gives 4
    s = snap([topic("t", {"replicas": [5, 4, 2, 3], "leader": 5, "isr": [3, 2, 4, 5]})], brokers=5)
    rows, _ = run(s, (5,), mode)
    r = row(rows, "t")
    assert r["new_leader"] == 4
    assert r["new_isr"] == [3, 2, 4]  # ISR order kept
    assert r["leadership_moved"] and not r["offline"]


def test_unclean_election_only_where_the_topic_allows_it():
    parts = {"replicas": [1, 2, 3], "leader": 1, "isr": [1]}
    s = snap([topic("safe", parts), topic("lossy", parts, unclean_leader_election_enable="true")])
    rows, scen = run(s, (1,))
    safe, lossy = row(rows, "safe"), row(rows, "lossy")
    assert (safe["new_leader"], safe["new_isr"]) == (-1, [1])
    assert safe["offline"] and safe["would_need_unclean"] and not safe["unclean_taken"]
    assert (lossy["new_leader"], lossy["new_isr"]) == (2, [2])  # first live replica, ISR = [leader]
    assert lossy["unclean_taken"] and not lossy["offline"]
    assert scen[0]["unclean_taken"] == 1 and scen[0]["would_need_unclean"] == 1 and scen[0]["level"] == "critical"


def test_topic_override_beats_broker_default_for_unclean():
    parts = {"replicas": [1, 2], "leader": 1, "isr": [1]}
    s = snap([topic("a", parts), topic("b", parts, unclean_leader_election_enable="false")],
             broker_defaults={"unclean.leader.election.enable": "true"})
    rows, _ = run(s, (1,))
    assert row(rows, "a")["new_leader"] == 2 and row(rows, "a")["unclean_taken"]
    assert row(rows, "b")["new_leader"] == -1 and row(rows, "b")["would_need_unclean"]


def test_isr_never_empties_the_member_kafka_visits_last_stays():
    s = snap([topic("t", {"replicas": [1, 2, 3], "leader": 1, "isr": [2, 1]})])
    rows, _ = run(s, (1, 2))
    r = row(rows, "t")
    # brokers 1 and 2 die in one event; Kafka visits them 1, 2 (Scala HashMap order): 1 leaves, 2 stays
    assert (r["new_leader"], r["new_isr"]) == (-1, [2])
    assert r["would_need_unclean"]  # broker 3 is a live replica, out of sync
    # the deaths could also be noticed one at a time, 2 before 1: then 1 stays
    assert r["isr_order_dependent"] and r["isr_alternatives"] == [1] and r["clean_return"] == [2, 1]
    gone = np.zeros(10, dtype=bool)
    gone[[1, 2]] = True
    isr = np.array([[2, 1, -1], [3, 1, 2], [1, -1, -1], [-1, -1, -1]], dtype=np.int32)
    assert replay.remove_from_isr(isr, gone).tolist() == [[2, -1, -1], [3, -1, -1], [1, -1, -1], [-1, -1, -1]]


def test_deaths_in_one_event_leave_the_isr_in_scala_hashmap_order_not_by_id():
    # issue 22's examples, from Kafka's own scala-library: brokers 1..6 are visited 5, 1, 6, 2, 3, 4;
    # {1, 5} are visited 5 then 1 (the ISR keeps 1), {4, 5} are visited 5 then 4 (it keeps 4): the highest id
    # is kept in neither
    s = snap([topic("a", {"replicas": [1, 5, 2], "leader": 5, "isr": [5, 1]}),
              topic("b", {"replicas": [4, 5, 3], "leader": 4, "isr": [4, 5]}),
              topic("c", {"replicas": [6, 3, 2], "leader": 6, "isr": [3, 6, 2]})], brokers=6)
    state = replay.ClusterState.from_snapshot(s)
    table = {r["topic"]: r for r in replay.predict(state, [1, 4, 5], "failure").to_pylist()}
    # the event is {1, 4, 5} (each holds a replica): visited 5, 1, 4
    assert (table["a"]["leader"], table["a"]["isr"], table["a"]["isr_alternatives"]) == (-1, [1], [5])
    assert (table["b"]["leader"], table["b"]["isr"], table["b"]["isr_alternatives"]) == (-1, [4], [5])
    # all six die: visited 5, 1, 6, 2, 3, 4; c's ISR [3, 6, 2] loses 6, then 2, and keeps 3
    table = {r["topic"]: r for r in replay.predict(state, [1, 2, 3, 4, 5, 6], "failure").to_pylist()}
    assert (table["c"]["isr"], sorted(table["c"]["isr_alternatives"])) == ([3], [2, 6])
    assert table["a"]["isr"] == [1] and table["b"]["isr"] == [4]
    # a broker that holds no replica is no key of the controller's map, so it does not change the order:
    # {1, 5, 7} with 7 empty is visited as {1, 5}
    s7 = snap([topic("a", {"replicas": [1, 5, 2], "leader": 5, "isr": [5, 1]})], brokers=7)
    table = replay.predict(replay.ClusterState.from_snapshot(s7), [7, 1, 5], "failure").to_pylist()
    assert table[0]["isr"] == [1]


# ---------------------------------------------------------------------------------- controlled shutdown
def test_controlled_shutdown_of_leader_follower_and_two_brokers():
    s = snap([topic("t", {"replicas": [1, 2, 3]}, min_insync_replicas="2")])
    led = row(run(s, (1,), "controlled")[0], "t")
    assert (led["new_leader"], led["new_isr"]) == (2, [2, 3]) and led["at_min_isr"] and led["leadership_moved"]
    followed = row(run(s, (2,), "controlled")[0], "t")
    assert (followed["new_leader"], followed["new_isr"]) == (1, [1, 3]) and not followed["leadership_moved"]
    both = row(run(s, (1, 2), "controlled")[0], "t")
    assert (both["new_leader"], both["new_isr"]) == (3, [3]) and both["under_min_isr"]


def test_controlled_shutdown_without_candidate_ends_as_hard_failure():
    s = snap([topic("t", {"replicas": [1, 2, 3], "leader": 1, "isr": [1, 2]}),
              topic("u", {"replicas": [1, 2, 3], "leader": 1, "isr": [1]}, unclean_leader_election_enable="true")])
    rows, scenarios = run(s, (1, 2), "controlled")
    t = row(rows, "t")
    # requests one at a time, 1 first: t moves to 2 (stopping, but it has not asked yet), ISR [2]; then 2
    # asks and t has nowhere to go: 2's shutdown fails, 2 stops uncleanly, t is left with ISR [2]
    assert (t["new_leader"], t["new_isr"]) == (-1, [2]) and t["offline"] and t["would_need_unclean"]
    assert (t["leader_changes"], t["shutdown_blocked_by"], t["blocks_shutdown"]) == (1, 2, True)
    assert t["clean_return"] == [2] and not t["isr_order_dependent"]
    # the other order: 2 only follows and leaves the ISR first; then 1 is left holding t
    t21 = row(run(s, (2, 1), "controlled")[0], "t")
    assert (t21["new_leader"], t21["new_isr"], t21["shutdown_blocked_by"], t21["clean_return"]) == (-1, [1], 1, [1])
    # a kill of both in one event: which of 1 and 2 the ISR keeps is Kafka's hash-map order
    killed = row(run(s, (1, 2), "failure")[0], "t")
    assert killed["isr_order_dependent"] and killed["clean_return"] == [2, 1] and killed["isr_alternatives"] == [1]
    assert killed["new_isr"] == [2] and killed["unavailable_until_expiry"]  # visited 1, 2: 2 stays
    u = row(rows, "u")  # 1 stops anyway after its retries; the controller then takes the unclean election
    assert (u["new_leader"], u["new_isr"]) == (3, [3]) and u["unclean_taken"] and u["shutdown_blocked_by"] == 1
    drain = scenarios[0]
    assert drain["failed_shutdowns"] == [1, 2] and drain["blocks_shutdown"] == 2 and drain["unavailable_window_s"] == 0


def test_controlled_shutdown_requests_in_order_move_leaders_onto_drained_brokers_and_again():
    s = snap([topic("a", {"replicas": [1, 2, 3]}), topic("b", {"replicas": [2, 1, 3]}),
              topic("c", {"replicas": [1, 4, 2]}), topic("solo", {"replicas": [1]})], brokers=4)
    rows, scenarios = run(s, (1, 2), "controlled")
    a, b, c, solo = row(rows, "a"), row(rows, "b"), row(rows, "c"), row(rows, "solo")
    # a: 1 asks -> 2 (not asked yet); 2 asks -> 3: two moves
    assert (a["new_leader"], a["new_isr"], a["leader_changes"], a["moved_twice"]) == (3, [3], 2, True)
    # b: 1 only follows (leaves the ISR); 2 asks -> 3: one move
    assert (b["new_leader"], b["new_isr"], b["leader_changes"], b["moved_twice"]) == (3, [3], 1, False)
    # c: 1 asks -> 4, which is not stopping: one move
    assert (c["new_leader"], c["new_isr"], c["leader_changes"]) == (4, [4], 1)
    # solo (RF=1) blocks nothing: Kafka 3.9 does not count it as remaining; it goes offline at the stop
    assert (solo["new_leader"], solo["new_isr"], solo["shutdown_blocked_by"], solo["clean_return"]) == (-1, [1], -1, [1])
    assert not solo["blocks_shutdown"]
    drain = scenarios[0]
    assert (drain["moved_twice"], drain["failed_shutdowns"], drain["unavailable_window_s"]) == (1, [], 0.0)
    # the other order: 2 asks first (a: 2 follows, leaves), then 1 (a -> 3): a moves once
    a21 = row(run(s, (2, 1), "controlled")[0], "a")
    assert (a21["new_leader"], a21["leader_changes"]) == (3, 1)


def test_a_dead_broker_in_a_controlled_drain_sends_no_request_and_takes_no_leadership():
    # found by the Spark-vs-replay differential: broker 4 is dead but still the ISR's other member
    brokers = [{"id": 1}, {"id": 2}, {"id": 3}, {"id": 4, "alive": False}]
    s = snap([topic("t", {"replicas": [1, 4], "leader": 1, "isr": [1, 4]})], brokers=brokers)
    t = row(run(s, (4, 1), "controlled")[0], "t")
    # 1 asks: 4 is not registered, so no candidate: 1's shutdown fails; 1 stops: the event holds only 1 (4 died
    # before), so 1 leaves the ISR [1, 4] and the ISR keeps 4, whatever the order
    assert (t["new_leader"], t["shutdown_blocked_by"], t["leader_changes"]) == (-1, 1, 0)
    assert t["new_isr"] == [4] and not t["isr_order_dependent"] and t["clean_return"] == [4]


def test_failure_mode_states_the_unavailability_window():
    s = snap([topic("t", {"replicas": [1, 2, 3]}), topic("u", {"replicas": [2, 1, 3]})])
    info = risk.open_snapshot(s)
    scenarios = [x for x in risk.build_scenarios(info, [(1,)], modes=("failure", "controlled")) if x.kind == "drain"]
    res = replay.replay(replay.ClusterState.from_snapshot(s), scenarios, "3.7", session_timeout_s=6.0)
    by_mode = {r["mode"]: r for r in res.scenarios.to_pylist()}
    assert by_mode["failure"]["unavailable_window_s"] == 6.0 and by_mode["controlled"]["unavailable_window_s"] == 0
    assert by_mode["failure"]["unavailable_until_expiry"] == 1  # t, led by 1; u only followed by 1
    assert by_mode["controlled"]["unavailable_until_expiry"] == 0


def test_controlled_keeps_dead_isr_members_failure_restricts_to_live():
    brokers = [{"id": 1}, {"id": 2}, {"id": 3}, {"id": 4, "alive": False}]
    s = snap([topic("t", {"replicas": [1, 2, 4], "leader": 1, "isr": [1, 2, 4]})], brokers=brokers)
    c = row(run(s, (1,), "controlled")[0], "t")
    f = row(run(s, (1,), "failure")[0], "t")
    assert (c["new_leader"], c["new_isr"]) == (2, [2, 4])  # ISR minus the stopping set only
    assert (f["new_leader"], f["new_isr"]) == (2, [2])  # offline rule: ISR restricted to live brokers


# ---------------------------------------------------------------------------------------- min ISR rule
def test_effective_min_isr_before_and_since_kafka_3_7():
    s = snap([topic("t", {"replicas": [1, 2]}, min_insync_replicas="3")])
    state = replay.ClusterState.from_snapshot(s)
    # healthy RF=2 with min.insync.replicas=3: since 3.7 the effective min is 2 -> at min ISR;
    # before, 3 -> every acks=all write is already rejected (under min ISR)
    assert replay.baseline(state, "3.7") | {} == {"partitions": 1, "offline": 0, "under_min_isr": 0,
                                                  "at_min_isr": 1, "under_replicated": 0, "rf1": 0}
    assert replay.baseline(state, "3.6")["under_min_isr"] == 1 and replay.baseline(state, "3.6")["at_min_isr"] == 0
    assert row(run(s, (2,), version="3.7")[0], "t")["eff_min_isr"] == 2
    assert row(run(s, (2,), version="3.6.2")[0], "t")["eff_min_isr"] == 3
    assert row(run(s, (2,), version="2.8")[0], "t")["under_min_isr"]


@pytest.mark.parametrize("bad", ["4.0", "three", "1.1", ""])
def test_kafka_version_must_be_a_zookeeper_era_version(bad):
    with pytest.raises(BadInput):
        rm.parse_kafka_version(bad)


# ------------------------------------------------------------------------------ new / offline partitions
def test_leaderless_new_partition_gets_first_live_replica_or_stays_leaderless():
    s = snap([topic("fresh", {"replicas": [1, 2], "no_state": True})])
    r = row(run(s, (1,))[0], "fresh")
    assert (r["leader"], r["new_leader"], r["new_isr"]) == (-1, 2, [2]) and not r["offline"]
    r = row(run(s, (1, 2))[0], "fresh")
    assert (r["new_leader"], r["new_isr"]) == (-1, []) and r["offline"] and not r["would_need_unclean"]
    table = replay.predict(s, [1], "failure").to_pylist()
    assert table == [{"topic": "fresh", "partition": 0, "leader": 2, "isr": [2], "offline": False, "has_state": True,
                      "isr_alternatives": []}]


def test_already_offline_partition_stays_offline():
    brokers = [{"id": 1}, {"id": 2}, {"id": 3, "alive": False}]
    s = snap([topic("t", {"replicas": [3, 1], "leader": -1, "isr": [3]})], brokers=brokers)
    r = row(run(s, (1,))[0], "t")
    assert (r["new_leader"], r["new_isr"]) == (-1, [3]) and r["was_offline"] and r["offline"]
    assert not r["would_need_unclean"]  # broker 1, the only other replica, is the one going away


# -------------------------------------------------------------------------------------------- rolling
def test_rolling_restart_steps_start_from_the_previous_step_after_its_brokers_returned():
    s = snap([topic("t", {"replicas": [1, 2, 3]}), topic("solo", {"replicas": [1]})])
    rows, scen = run(s, (1, 2), "controlled", rolling=True)
    step1, step2 = (x["scenario_id"] for x in scen)
    t1 = row(rows, "t", scenario=step1)
    assert (t1["leader"], t1["new_leader"], t1["new_isr"], t1["returned_leader"]) == (1, 2, [2, 3], 2)
    solo = row(rows, "solo", scenario=step1)
    assert (solo["new_leader"], solo["returned_leader"]) == (-1, 1)  # re-elected when broker 1 is back
    # step 2 starts from leader 2 (no preferred election between steps) and ISR [2,3,1] (1 rejoined)
    t2 = row(rows, "t", scenario=step2)
    assert (t2["leader"], t2["isr"]) == (2, [2, 3, 1])
    assert (t2["new_leader"], t2["new_isr"]) == (1, [3, 1])  # first live ISR replica in assignment order
    assert not [r for r in rows if r["topic"] == "solo" and r["scenario_id"] == step2]
    # leader load over the survivors: step 1 leaves {2: 1, 3: 0}; step 2 leaves {1: 2, 3: 0}
    assert [(x["survivors"], x["leaders_total"], x["leader_max"]) for x in scen] == [(2, 1, 1), (2, 2, 2)]


# ------------------------------------------------------------------------------------ levels and plan
def test_levels_low_medium_high_critical():
    healthy = snap([topic("t", {"replicas": [1, 2, 3]}, {"replicas": [2, 3, 1]}, {"replicas": [3, 1, 2]},
                          min_insync_replicas="1")], brokers=4)
    _, scen = run(healthy, (4,))
    assert scen[0]["level"] == "low" and scen[0]["evaluated"] == 0
    _, scen = run(healthy, (1,))  # leaders {2: 2, 3: 1}: max 2 vs ideal 3/3 = 1 -> skewed (> 1.5x)
    assert (scen[0]["leader_max"], scen[0]["leaders_total"], scen[0]["survivors"]) == (2, 3, 3)
    assert scen[0]["level"] == "medium" and scen[0]["at_min_isr"] == 0
    min2 = snap([topic("t", {"replicas": [1, 2, 3]}, min_insync_replicas="2")])
    assert run(min2, (3,))[1][0]["level"] == "medium"  # at min ISR
    assert run(min2, (2, 3))[1][0]["level"] == "high"  # under min ISR
    assert run(min2, (1, 2, 3))[1][0]["level"] == "critical"


def test_score_and_level_come_from_the_counts():
    env = {"offline": np.array([0, 0, 0, 1]), "unclean_taken": np.array([0, 0, 0, 0]),
           "under_min_isr": np.array([0, 0, 3, 0]), "at_min_isr": np.array([0, 5, 0, 0]),
           "under_replicated": np.array([0, 5, 3, 1]), "leader_max": np.array([1, 1, 1, 1]),
           "survivors": np.array([2, 2, 2, 2]), "leaders_total": np.array([2, 2, 2, 2])}
    assert rm.eval_numpy(rm.LEVEL_RANK, env).tolist() == [0, 1, 2, 3]
    assert rm.eval_numpy(rm.SCORE, env).tolist() == [0, 55, 303, 10001]


def test_plan_state_moves_partitions_to_target_with_preferred_leader():
    s = snap([topic("t", {"replicas": [1, 2]}, {"replicas": [2, 3]})], brokers=4)
    state = replay.ClusterState.from_snapshot(s).with_plan([ReassignEntry("t", 0, (4, 3))])
    assert state.replicas[0].tolist()[:2] == [4, 3] and state.isr[0].tolist()[:2] == [4, 3]
    assert state.leader.tolist() == [4, 2]
    table = replay.predict(state, [1], "failure").to_pylist()
    assert [r["leader"] for r in table] == [4, 2] and not any(r["offline"] for r in table)
    with pytest.raises(BadInput, match="t-7"):
        replay.ClusterState.from_snapshot(s).with_plan([ReassignEntry("t", 7, (1, 2))])


def test_scenario_list_and_names():
    s = snap([topic("t", {"replicas": [1, 2, 3]})], brokers=[{"id": 1, "rack": "a"}, {"id": 2, "rack": "b"},
                                                          {"id": 3, "rack": "a"}, {"id": 4, "alive": False}])
    info = s
    names = [x.name for x in risk.build_scenarios(info, [(3, 1)], modes=("controlled",), all_brokers=True,
                                                 all_racks=True)]
    assert names == ["drain 3,1 [controlled]", "rolling 3,1 step 1/2 (broker 3) [controlled]",
                     "rolling 3,1 step 2/2 (broker 1) [controlled]", "rack a [controlled]", "rack b [controlled]",
                     "broker 1 [controlled]", "broker 2 [controlled]", "broker 3 [controlled]"]
    default = risk.build_scenarios(info)  # no drain: every live broker and every rack, both modes
    assert len(default) == 2 * (2 + 3) and {x.mode for x in default} == {"controlled", "failure"}
    with pytest.raises(BadInput, match="unknown broker"):
        risk.build_scenarios(info, [(9,)])
    with pytest.raises(BadInput, match="unknown rack"):
        risk.build_scenarios(info, drain_racks=["z"])
    with pytest.raises(BadInput, match="empty"):
        risk.parse_brokers(" , ")


# ------------------------------------------------------------------------------------------ restart steps
def test_demote_moves_leadership_to_the_first_live_in_sync_replica_and_names_what_cannot_move():
    # t-0 [1,2,3] ISR [3,1] led by 1: 2 is out of sync, so 3 comes first, 1 goes last, the election moves it to 3
    # t-1 [1,2,3] led by 2 (1 is only preferred): reordered [2,3,1], leader stays 2 (no move needed)
    # t-2 [2,1,3] led by 1: 2 is first and in sync already: no reorder, the election moves it to 2
    # solo-0 [1]: nobody to move to: stuck
    s = snap([topic("t", {"replicas": [1, 2, 3], "leader": 1, "isr": [3, 1]},
                    {"replicas": [1, 2, 3], "leader": 2, "isr": [1, 2, 3]},
                    {"replicas": [2, 1, 3], "leader": 1, "isr": [1, 2, 3]}),
              topic("solo", {"replicas": [1]})])
    st = replay.ClusterState.from_snapshot(s)
    b = replay._batch(st, np.arange(st.num_partitions), st.leader, st.isr, st.has_state)
    after, demoted_from, stuck = replay.demote(b, 1, st.alive_lut(st.lut_size()))
    got = {(st.topic_names[st.topic_idx[i]], int(st.partition[i])):
           ([x for x in after.replicas[i].tolist() if x >= 0], int(after.leader[i]), int(demoted_from[i]), bool(stuck[i]))
           for i in range(st.num_partitions)}
    assert got == {("solo", 0): ([1], 1, -1, True),
                   ("t", 0): ([3, 2, 1], 3, 1, False),
                   ("t", 1): ([2, 3, 1], 2, -1, False),
                   ("t", 2): ([2, 1, 3], 2, 1, False)}


@pytest.mark.parametrize("mode", ["failure", "controlled"])
def test_restart_steps_start_from_the_plan_state_with_the_broker_demoted(mode):
    """The seed incident with a restart plan's temporary replica: payments-0 [1] -> [1,2]. Step 1 (broker 1):
    demoted, payments-0 is led by 2 when 1 stops, so it stays online with ISR [2] (min ISR 1); a kill finds 1
    leading nothing (nothing unanswered until the session expires). Step 2 (broker 2) starts from the plan's
    state again (1 back, leading payments-0), not from step 1's leftovers."""
    s = snap([topic("payments", {"replicas": [1]}),
              topic("orders", {"replicas": [1, 2, 3]}, {"replicas": [2, 3, 1]}, min_insync_replicas="2")])
    state = replay.ClusterState.from_snapshot(s)
    scen = [x for x in risk.restart_scenarios(s, (1, 2), modes=(mode,)) if x.kind == "restart"]
    assert [x.name for x in scen] == [f"after plan: restart 1,2 step 1/2 (broker 1, demoted) [{mode}]",
                                      f"after plan: restart 1,2 step 2/2 (broker 2, demoted) [{mode}]"]
    res = replay.replay(state, scen, "3.7", state.with_plan([ReassignEntry("payments", 0, (1, 2))]))
    rows, sc = res.rows.to_pylist(), res.scenarios.to_pylist()
    p1 = row(rows, "payments", scenario=scen[0].id)
    assert (p1["replicas"], p1["leader"], p1["demoted_from"], p1["new_leader"], p1["new_isr"]) == ([2, 1], 2, 1, 2, [2])
    assert not p1["offline"] and not p1["under_min_isr"] and p1["at_min_isr"]
    o0 = row(rows, "orders", 0, scenario=scen[0].id)
    assert (o0["replicas"], o0["leader"], o0["new_leader"], o0["new_isr"]) == ([2, 3, 1], 2, 2, [2, 3])
    o1 = row(rows, "orders", 1, scenario=scen[0].id)
    assert (o1["demoted_from"], o1["leader"], o1["new_isr"]) == (None, 2, [2, 3])   # 1 only followed it
    assert sc[0]["unavailable_until_expiry"] == 0 and sc[0]["offline"] == 0 and sc[0]["failed_shutdowns"] == []
    # leaders after step 1: payments-0 and orders-0 moved 1 -> 2, orders-1 stays with 2: {2: 3, 3: 0}
    assert (sc[0]["survivors"], sc[0]["leaders_total"], sc[0]["leader_max"]) == (2, 3, 3)
    p2 = row(rows, "payments", scenario=scen[1].id)
    assert (p2["replicas"], p2["leader"], p2["isr"], p2["new_leader"], p2["new_isr"]) == ([1, 2], 1, [1, 2], 1, [1])
    assert all(x["level"] == "medium" for x in sc)   # at min ISR while a broker is down, nothing worse


def test_the_plain_roll_without_a_plan_reproduces_the_incident():
    s = snap([topic("payments", {"replicas": [1]})])
    scen = [x for x in risk.restart_scenarios(s, (1, 2), modes=("controlled",)) if x.state == "current"]
    res = replay.replay(replay.ClusterState.from_snapshot(s), scen)
    p = row(res.rows.to_pylist(), "payments", scenario=scen[0].id)
    assert (p["new_leader"], p["new_isr"], p["offline"]) == (-1, [1], True)
    assert res.scenarios.to_pylist()[0]["level"] == "critical"
