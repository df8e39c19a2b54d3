"""Issue 25: a count rebalance levels replica counts wherever the rack rules allow, says why and proves the
best spread where they do not, and is measured against a bound for its whole goal.

Every expectation here is worked out independently of the optimizer (tests/rebalance_support.py: a
per-partition flow with lower bounds for what the rules allow, per-topic flows for the bounds), or by hand.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from optimizer_support import (
    Spec,
    check_guarantees,
    counts,
    leader_counts,
    min_topic_bottleneck,
    plan_maps,
    write_snapshot,
)
from rebalance_support import (
    Feasibility,
    as_lists,
    count_bounds,
    deficiency,
    generate,
    joint_extra,
    leader_band_feasible,
    random_shape,
)

from planner.commands.plan import _moves_line
from planner.optimizer import Params, from_snapshot, make_plan
from planner.plan_format import plan_document
from planner.snapshot_io import read_snapshot
from planner.synth import to_snapshot

N_CLUSTERS = 36


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    """Generated clusters (tests/rebalance_support.random_shape: 4-20 brokers, no racks or 2-5 racks, some of
    uneven sizes, RF 1-4 mixed, new empty and hot brokers, a broker that left, placements with and without
    rack awareness), each planned once as a count rebalance."""
    rng = np.random.default_rng(25)
    out = []
    for i in range(N_CLUSTERS):
        shape = random_shape(rng, per_broker=(60, 160), max_brokers=20)
        c = generate(shape)
        folder = tmp_path_factory.mktemp(f"c{i}") / "s"
        to_snapshot(c, folder)
        pb = from_snapshot(read_snapshot(folder))
        doc = plan_document(make_plan(pb, Params("rebalance", balance="count")), {}, {})
        out.append((shape, c, doc))
    return out


def _spec(c) -> tuple[Spec, bool]:
    racks, alive, assign = as_lists(c)
    return Spec(racks, alive, assign), any(r is not None for r in racks.values())


def test_every_plan_reaches_the_spread_the_rules_allow(plans):
    """Replica spread <= 1, or the best spread the rules allow, which the independent flow proves: no
    placement has its smallest count above L or its largest below U, and the band [L, U] is reachable. Where
    that is wider than 1 the plan says so and names the rack. (Partitions already below the rack rule are only
    bounded by the flow; there the plan must not claim better than the bound.)"""
    spread_above_one = 0
    for shape, c, doc in plans:
        spec, rack_aware = _spec(c)
        final = plan_maps(doc, spec)
        check_guarantees(spec, final, set(), set(), rack_aware)
        fz = Feasibility(spec.racks, spec.alive, spec.assignment, set(), rack_aware)
        best, lo, hi = fz.best_spread()
        c1 = counts(final, spec.alive)
        spread = max(c1.values()) - min(c1.values())
        s = doc["summary"]
        assert (s["reachable_replica_spread"], s["target_replica_band"]) == (best, [lo, hi]), (shape, best, lo, hi)
        assert spread >= best, shape
        if not fz.relaxed:
            assert spread <= max(1, best), (shape, spread, best)
        if best > 1:
            spread_above_one += 1
            assert "rack" in s["replica_spread_reason"], s["replica_spread_reason"]
        else:
            assert s["replica_spread_reason"] is None
    assert spread_above_one, "the generator made no cluster whose racks keep the counts apart"


def test_every_plan_is_measured_against_a_bound_for_its_whole_goal(plans):
    """The plan's lower bound is at least each bound worked out here (replicas above / missing below the band,
    the leader-cap deficiency, the joint bound) and at least the fewest new replicas the independent
    per-partition flow needs for the band under the rack rules (exact where no partition's rule is relaxed
    there; before the per-partition flow the plan's rack bound was a class relaxation, 736 where 898 are
    needed on an uneven 5-rack cluster, so a plan at x1.39 of it was at x1.14 of the truth), and every plan
    within 1 % of it."""
    over = []
    rooms = 0
    for shape, c, doc in plans:
        spec, rack_aware = _spec(c)
        s = doc["summary"]
        lo, hi = s["target_replica_band"]
        eligible = spec.alive
        before = counts(spec.assignment, eligible)
        above, below = count_bounds(before, lo, hi)
        n_t: dict[str, int] = {}
        for t, _p in spec.assignment:
            n_t[t] = n_t.get(t, 0) + 1
        caps = {t: math.ceil(n / len(eligible)) for t, n in n_t.items()}
        d = deficiency(spec.assignment, eligible, caps, set())
        e_hi = joint_extra(spec.assignment, eligible, caps, set(), hi)
        e_lo = e_hi if hi == lo + 1 else joint_extra(spec.assignment, eligible, caps, set(), lo + 1)
        lb = s["lower_bound_moves"]
        assert lb >= max(above, below, d, above + e_hi, below + e_lo), (shape, s)
        fz = Feasibility(spec.racks, eligible, spec.assignment, set(), rack_aware)
        least = fz.least_new_replicas(lo, hi)
        # a bound (never above what the rules need), and where the independent flow is exact, that very count
        assert s["lower_bound_parts"]["rack_transport"] <= least, (shape, least)
        if not fz.relaxed:
            assert s["lower_bound_parts"]["rack_transport"] == least, (shape, least)
        moves = s["replica_moves"]
        assert moves >= least, shape
        # every broker left room to lead its share as well (every plan reaches leader spread <= 1: the test
        # below): a bound for the whole goal, which the plan's own, where it reports one, must not exceed
        roomy = fz.least_new_replicas(lo, hi, room=True)
        assert roomy is not None and moves >= roomy >= least, (shape, roomy)
        got = s["lower_bound_parts"]["leader_room_transport"]
        assert got <= roomy and (fz.relaxed or got in (0, roomy)), (shape, got, roomy)
        rooms += got > least
        if moves > 1.01 * lb:
            over.append((round(moves / lb, 4), shape))
    assert not over, over
    assert rooms, "no plan needed more moves for leader room than for the counts"


def _leader_room(final: dict, eligible: set[int]) -> tuple[dict[int, int], int]:
    """Worked out here from the placement: per broker, the partitions it could lead with every topic at most
    ceil(partitions / brokers) per broker (of each topic the partitions it holds, up to that cap), and the
    level floor(partitions / brokers) that each broker must lead for leader spread <= 1."""
    n_t: dict[str, int] = {}
    for t, _p in final:
        n_t[t] = n_t.get(t, 0) + 1
    held: dict[tuple[str, int], int] = {}
    for (t, _p), reps in final.items():
        for b in reps:
            if b in eligible:
                held[(t, b)] = held.get((t, b), 0) + 1
    room = dict.fromkeys(eligible, 0)
    for (t, b), n in held.items():
        room[b] += min(n, math.ceil(n_t[t] / len(eligible)))
    led = sum(1 for reps in final.values() if any(b in eligible for b in reps))
    return room, led // len(eligible)


def test_leaders_level_wherever_the_placement_allows(plans):
    """Every plan: every topic at most ceil(partitions / brokers) preferred leaders per broker and the leader
    counts within one of each other, on a placement where an assignment of leaders with both exists (an
    independent max flow with lower bounds), with every broker's leader room (worked out here) at the level.
    History: before room.mend_room_count 3 of the 36 plans kept leader spread 3, 4 and 6 with brokers short of
    room; with it 2 kept 3 (a broker 2 short, the 1 % over the bound spent). Now the placement flow leaves every
    broker room where the plain one does not (a bound for the whole goal: on the 8-broker one 321 moves where
    the plain flow needs 318; a one-off CP-SAT model of counts, racks, caps and level leaders, 47 s, not run
    here, found 321 the exact minimum), and exchanges
    across the leader flow's cut (leader_cut.py) serve what room alone does not (two plans had every broker's
    room, both with partitions a multiple of the brokers, and kept leader spread 2)."""
    over_ceil = []
    for shape, c, doc in plans:
        spec, _ = _spec(c)
        final = plan_maps(doc, spec)
        room, level = _leader_room(final, spec.alive)
        assert min(room.values()) >= level, shape
        assert doc["after"]["leader_spread"] <= 1, shape
        led = leader_counts(final, spec.alive)
        assert max(led.values()) - min(led.values()) <= 1, shape
        assert doc["summary"]["leader_spread_reason"] is None, shape
        if leader_band_feasible(final, spec.alive):
            assert doc["summary"]["topics_over_ceil_partitions_per_broker"] == 0, shape
            continue
        # a topic above ceil only where no leader choice on the placement keeps it within (a b-matching here),
        # and no placement in the band either: a rack that the band fills with the replicas the rules send there
        # (the independent flow refuses one more) is closed to partitions that the rules do not send there, and
        # on the brokers left some broker must lead more than the cap
        names = doc["topics"]["names"]
        fz = Feasibility(spec.racks, spec.alive, spec.assignment, set(), True)
        lo, hi = doc["summary"]["target_replica_band"]
        closed = fz.closed_racks(lo, hi)
        for k in np.flatnonzero(np.array(doc["topics"]["max_leaders_per_broker_after"])
                                > np.array(doc["topics"]["ceil_partitions_per_broker"])).tolist():
            rows = [reps for (t, _p), reps in final.items() if t == names[k]]
            most = doc["topics"]["max_leaders_per_broker_after"][k]
            assert most == min_topic_bottleneck([[b for b in r if b in spec.alive] for r in rows], {}), shape
            assert all(len(r) < len(fz.rack_set) for r in rows), shape     # the rules send them to no rack
            open_b = [b for b in spec.alive if spec.racks[b] not in closed]
            assert most == -(-len(rows) // len(open_b)), (shape, names[k], closed)
            over_ceil.append((shape.seed, names[k], sorted(closed)))
    # one: the 8-broker cluster whose rack r2 (2 brokers) must hold 685 replicas at the top of the band
    # [267, 343] (reach 76), the six others at its bottom, so topic t012's 7 partitions of RF 2 (cap 1) have
    # the 6 brokers of r0 and r1; the band wins and the plan warns
    assert over_ceil == [(649891614, "t012", ["r2"])], over_ceil


def test_bytes_rebalances_level_bytes_and_counts_or_say_they_did_not(tmp_path):
    """Sizes known (log-normal per topic): a bytes rebalance of twelve generated clusters brings every broker
    within 5 % of the mean bytes (worked out here from the plan's placement) or the plan's warnings say so
    (never a quiet miss), with replica spread <= 1 where the racks allow it, every topic within
    ceil(partitions / brokers) preferred leaders per broker and the leader counts within one of each other.

    One of the twelve missed the bytes (20 brokers, 3 racks of 7, 7 and 6: 7.1 % from the mean): rack r2's six
    brokers hold a replica of every partition of three or more replicas (their forced bytes alone 96 % of the
    mean), four of them 7.0-7.1 % above, the other two near the mean, and the byte swaps tried only the heaviest
    brokers against the lightest (all on r0 / r1, where only the few 1- and 2-replica partitions of r2 may
    go). Swaps between a heavy broker and any lighter one (byte_level._pairs, wide) pass bytes to r2's own
    brokers near the mean: 4.89 %. Before byte_level.swap_bytes it also missed the counts (spread 81), and
    before byte_level.mend_room two others left leader spread 6 and 10."""
    rng = np.random.default_rng(25)
    missed = []
    for i in range(36):
        shape = random_shape(rng, per_broker=(60, 160), max_brokers=20)
        if i % 3:
            continue
        c = generate(shape)
        r2 = np.random.default_rng(shape.seed + 1)
        per_topic = r2.lognormal(18, 1.5, len(c.topic_names))
        c = dataclasses.replace(c, size_bytes=(per_topic[c.topic_of] * r2.uniform(0.7, 1.3, c.num_partitions))
                                .astype(np.int64))
        folder = tmp_path / f"c{i}"
        to_snapshot(c, folder)
        doc = plan_document(make_plan(from_snapshot(read_snapshot(folder)), Params("rebalance")), {}, {})
        assert doc["summary"]["balance"] == "bytes"
        spec, _ = _spec(c)
        final = plan_maps(doc, spec)
        size = {(c.topic_names[c.topic_of[k]], int(c.partition[k])): int(c.size_bytes[k])
                for k in range(c.num_partitions)}
        load = dict.fromkeys(spec.alive, 0)
        for key, reps in final.items():
            for b in reps:
                if b in load:
                    load[b] += size[key]
        mean = sum(load.values()) / len(load)
        off_bytes = max(abs(v - mean) for v in load.values()) > 0.05 * mean
        c1 = counts(final, spec.alive)
        assert max(c1.values()) - min(c1.values()) <= max(1, doc["summary"]["reachable_replica_spread"]), shape
        assert not off_bytes or "tolerance of a bytes rebalance" in " ".join(doc["warnings"]), (shape, doc["warnings"])
        led = leader_counts(final, spec.alive)
        assert max(led.values()) - min(led.values()) <= 1, (shape, led)
        assert doc["after"]["leader_spread"] <= 1 and doc["summary"]["topics_over_ceil_partitions_per_broker"] == 0
        if off_bytes:
            missed.append(shape)
    assert not missed, missed


def test_a_band_the_racks_force_is_widened_to_what_level_leaders_need(tmp_path):
    """A larger generated cluster (the 7th of random_shape(seed 7, 400-1000 partitions per broker, up to 24
    brokers): 13 brokers on racks of 3, 2 and 8, 7,982 partitions) whose rack r1 must hold a replica of every
    partition that spans all racks. The racks alone allow spread 732 ([1378, 2110]), but in no band narrower than
    [1378, 2204] does every broker keep room to lead its share within the topics' caps (the independent flow:
    the rack flow refuses any minimum above 1378, the room flow any maximum below 2204), so 826 is the least
    spread that keeps leader spread <= 1 possible. The plan reaches exactly that, with leader spread <= 1 and no
    topic over its cap (checked here from its placement), and says why. Before, it targeted [1378, 2110] and
    ended at 820 with leader spread 12 and 2 topics over their cap; then at 826 with 1,896 moves, 1.0139x the
    least new replicas of that band with room (1,870); now 1,876."""
    rng = np.random.default_rng(7)
    for _ in range(7):
        shape = random_shape(rng, per_broker=(400, 1000), max_brokers=24)
    c = generate(shape)
    to_snapshot(c, tmp_path / "s")
    doc = plan_document(make_plan(from_snapshot(read_snapshot(tmp_path / "s")), Params("rebalance", balance="count")),
                        {}, {})
    spec, _ = _spec(c)
    fz = Feasibility(spec.racks, spec.alive, spec.assignment, set(), True)
    assert not fz.relaxed
    big = fz.total + 1
    assert fz.band_feasible(1378, 2110) and not fz.band_feasible(1379, big)      # rack-only best 732
    assert not fz.band_feasible(0, 2203, room=True) and fz.band_feasible(1378, 2204, room=True)
    final = plan_maps(doc, spec)
    check_guarantees(spec, final, set(), set(), True)
    c1 = counts(final, spec.alive)
    assert (min(c1.values()), max(c1.values())) == (1378, 2204)
    led = leader_counts(final, spec.alive)
    assert max(led.values()) - min(led.values()) <= 1
    cap = {}
    for (t, _p), reps in final.items():
        cap[(t, reps[0])] = cap.get((t, reps[0]), 0) + 1
    n_t: dict[str, int] = {}
    for t, _p in final:
        n_t[t] = n_t.get(t, 0) + 1
    assert all(n <= math.ceil(n_t[t] / len(spec.alive)) for (t, _b), n in cap.items())
    s = doc["summary"]
    assert (s["reachable_replica_spread"], s["target_replica_band"]) == (826, [1378, 2204])
    # within 1 % of the fewest new replicas that leave every broker room in that band (the independent flow: a
    # lower bound for any placement with level leaders); 82678ca made 1,896 for 1,870 (1.0139x): repair moves
    # for the leader caps that other moves undid in count, now sent back in pairs (leader_cut.undo_moves)
    least = fz.least_new_replicas(1378, 2204, room=True)
    assert least is not None and s["replica_moves"] <= 1.01 * least, (s["replica_moves"], least)
    assert any(w.startswith("replica spread 826 at best with level leaders, not the 732 the racks alone allow: "
                            "rack r1 ") for w in doc["warnings"]), doc["warnings"]


def _larger(seed: int, index: int, tmp_path) -> tuple:
    """The `index`-th (1-based) cluster of random_shape(seed, 400-1000 partitions per broker, up to 24 brokers),
    planned as a count rebalance: (shape, cluster, plan document)."""
    rng = np.random.default_rng(seed)
    for _ in range(index):
        shape = random_shape(rng, per_broker=(400, 1000), max_brokers=24)
    c = generate(shape)
    to_snapshot(c, tmp_path / "s")
    doc = plan_document(make_plan(from_snapshot(read_snapshot(tmp_path / "s")), Params("rebalance", balance="count")),
                        {}, {})
    return shape, c, doc


@pytest.mark.parametrize("seed,index", [(7, 9), (8, 8), (8, 1)])
def test_larger_clusters_level_leaders_within_the_bound(seed, index, tmp_path):
    """Three larger generated clusters: 15 brokers on 2 racks with 14,715 partitions and 11 brokers on 3 racks
    with 10,087, whose placement leaves the leader flow short (every broker has room, but not as a set: 82 and 4
    units), so that leader_cut's exchanges must serve it; and 19 brokers on 2 racks, one of them gone, with
    8,132 partitions. Each plan reaches leader spread <= 1 with every topic within ceil(partitions / brokers)
    preferred leaders per registered broker (worked out here from the placement; the independent leader flow
    is feasible on it), replica spread <= 1 on the two 2-rack clusters and the racks' best on the 3-rack one
    (its summary's, proven for that band by the test above's kind of flow in the 36-cluster test), within
    1 % of its bound.

    History (all fail on 82678ca): the exchanges tried the cheapest first and re-tried the same failing ones
    each step (a replica sent to a (topic, broker) place that no longer reaches the sink, or a follower sent
    back that the flow leads from): 6,571 max flows and 128 s on the first, so a budget of trials was set, and
    with it the first kept leader spread 41 and the second 3. Now the flow's residual sides order the
    exchanges (one trial per unit on the first). The third needed 203k arcs in the per-partition flow, just
    above its limit of 200k, so the count rounds planned it: 1,412 moves for a bound of 1,398 (1.0100x); and
    its summary counted one topic over its cap for the 13 RF 1 partitions left on the broker that is gone
    (offline: no plan can lead them elsewhere)."""
    shape, c, doc = _larger(seed, index, tmp_path)
    spec, rack_aware = _spec(c)
    final = plan_maps(doc, spec)
    check_guarantees(spec, final, set(), set(), rack_aware)
    led = leader_counts(final, spec.alive)
    assert max(led.values()) - min(led.values()) <= 1, (shape, led)
    per: dict[tuple[str, int], int] = {}
    n_t: dict[str, int] = {}
    for (t, _p), reps in final.items():
        if reps[0] in spec.alive:
            per[(t, reps[0])] = per.get((t, reps[0]), 0) + 1
        n_t[t] = n_t.get(t, 0) + 1
    assert all(n <= math.ceil(n_t[t] / len(spec.alive)) for (t, _b), n in per.items()), shape
    assert leader_band_feasible(final, spec.alive), shape
    c1 = counts(final, spec.alive)
    s = doc["summary"]
    assert max(c1.values()) - min(c1.values()) <= (1 if shape.racks == 2 else s["reachable_replica_spread"]), shape
    assert s["replica_moves"] <= 1.01 * s["lower_bound_moves"], (shape, s["replica_moves"], s["lower_bound_moves"])
    assert doc["after"]["leader_spread"] <= 1 and s["topics_over_ceil_partitions_per_broker"] == 0


# --------------------------------------------------------------------------------------------- by hand
def _lopsided(tmp_path) -> tuple[Spec, dict]:
    """Racks a (broker 1), b (2, 3), c (4, 5, 6); 60 partitions of RF 3 (one replica on each rack, so broker 1
    holds all 60), and 30 single-replica topics of one partition each, on racks b and c."""
    rng = np.random.default_rng(1)
    racks = {1: "a", 2: "b", 3: "b", 4: "c", 5: "c", 6: "c"}
    assign = {("t", i): [1, int(rng.choice([2, 3])), int(rng.choice([4, 5, 6]))] for i in range(60)}
    assign.update({(f"u{i:02d}", 0): [int(rng.choice([2, 3, 4, 5, 6]))] for i in range(30)})
    spec = Spec(racks, set(racks), assign)
    pb = from_snapshot(read_snapshot(write_snapshot(spec, tmp_path)))
    return spec, plan_document(make_plan(pb, Params("rebalance", balance="count")), {}, {})


def test_a_rack_that_must_hold_too_much_is_named_with_the_best_spread(tmp_path):
    """Worked by hand: broker 1 must hold the 60 RF-3 replicas (their rack-a copies). The other five hold the
    remaining 2 x 60 + 30 = 150, at best 30 each (rack b's two brokers share 60 RF-3 replicas, rack c's three
    the other 60 plus the 30 single replicas). So the best spread is 60 - 30 = 30, and rack a is the reason."""
    spec, doc = _lopsided(tmp_path)
    s = doc["summary"]
    assert (s["reachable_replica_spread"], s["target_replica_band"]) == (30, [30, 60])
    assert s["replica_spread_reason"].startswith("rack a has 1 eligible broker(s) and must hold at least 60")
    final = plan_maps(doc, spec)
    assert counts(final, spec.alive) == {1: 60, 2: 30, 3: 30, 4: 30, 5: 30, 6: 30}
    assert "replica spread <= 30 (30..60 per broker)" in _moves_line(doc)


def test_the_independent_check_refuses_what_the_rules_forbid(tmp_path):
    """The harness can fail: on the lopsided cluster the flow refuses spread 29 at every level (so a plan that
    claimed it would fail), and leaving the counts as they are would fail the spread assertion above."""
    spec, doc = _lopsided(tmp_path)
    fz = Feasibility(spec.racks, spec.alive, spec.assignment, set(), True)
    assert not any(fz.band_feasible(lo, lo + 29) for lo in range(0, 61))
    assert fz.band_feasible(30, 60)
    untouched = counts(spec.assignment, spec.alive)
    assert max(untouched.values()) - min(untouched.values()) > 30


def test_an_empty_rebalance_says_already_balanced(tmp_path):
    """Six brokers, two racks, already level (each broker 2 replicas, each rack covered): no move, and the
    summary says "already balanced" instead of a bound and a ratio of zero."""
    racks = {1: "a", 2: "b", 3: "a", 4: "b", 5: "a", 6: "b"}
    assign = {("t", 0): [1, 2], ("t", 1): [3, 4], ("t", 2): [5, 6], ("t", 3): [2, 3], ("t", 4): [4, 5],
              ("t", 5): [6, 1]}
    spec = Spec(racks, set(racks), assign)
    pb = from_snapshot(read_snapshot(write_snapshot(spec, tmp_path)))
    doc = plan_document(make_plan(pb, Params("rebalance", balance="count")), {}, {})
    s = doc["summary"]
    assert s["replica_moves"] == 0 and s["lower_bound_moves"] == 0 and s["already_balanced"]
    assert s["moves_over_lower_bound"] is None
    assert _moves_line(doc).endswith("already balanced, nothing to move")


def test_larger_cluster_whose_topic_floors_widen_the_band(tmp_path):
    """The 6th cluster of seed 8 (as above): 10 brokers on racks of 2, 1 and 7, 8,240 partitions, RF 1-4. Rack
    r1's one broker must hold a replica of every partition that spans all racks, so the band is wide; and some
    topics leave every broker partitions to lead whatever the others lead (a topic of 1,514 partitions with cap
    152 leaves 146 to each of the 10). The room flow alone allows a maximum of 5,286; with each topic's floor in
    it (the independent flow here) none below 5,287 is possible, so the best spread with level leaders is
    5,287 - 1,188 = 4,099, proven on both sides. The plan reaches that band with leader spread <= 1 and no topic
    over ceil(partitions / brokers) (worked out here from its placement).

    History: main before (553f629) targeted [1188, 5286] and ended with leader spread 2 and 2 topics over their
    cap (t074, t120: RF 1), 457 moves for a bound of 452 (the chains moved t074's sole replica onto a broker
    already leading one, and the repair moved it back); 90f910e: 457 moves for 452 as well, 1.0111x of the
    plan's bound, which counted neither the floors nor level leaders with the placement. The least any plan can
    make is 456 (the per-partition LP relaxation of the whole goal, bench/rebalance_lp_bound.py, 3 min, not run
    here); the plan now computes the same LP over classes of interchangeable partitions (lp_bound.py, ~1 s)
    where its flow bounds leave it more than 1 % over: 457 for 456, 1.0022x (fails on 90f910e: 452)."""
    shape, c, doc = _larger(8, 6, tmp_path)
    spec, _ = _spec(c)
    fz = Feasibility(spec.racks, spec.alive, spec.assignment, set(), True)
    assert not fz.relaxed
    assert not fz.band_feasible(1189, fz.total + 1)                   # the rack flow: no minimum above 1,188
    assert fz.band_feasible(1188, 5286, room=True)                    # room alone would allow 5,286 ...
    assert not fz.band_feasible(0, 5286, room=True, floors=True)      # ... the topics' floors do not
    assert fz.band_feasible(1188, 5287, room=True, floors=True)
    final = plan_maps(doc, spec)
    check_guarantees(spec, final, set(), set(), True)
    c1 = counts(final, spec.alive)
    assert (min(c1.values()), max(c1.values())) == (1188, 5287), shape
    led = leader_counts(final, spec.alive)
    assert max(led.values()) - min(led.values()) <= 1, led
    per: dict[tuple[str, int], int] = {}
    n_t: dict[str, int] = {}
    for (t, _p), reps in final.items():
        per[(t, reps[0])] = per.get((t, reps[0]), 0) + 1
        n_t[t] = n_t.get(t, 0) + 1
    assert all(n <= math.ceil(n_t[t] / len(spec.alive)) for (t, _b), n in per.items())
    assert leader_band_feasible(final, spec.alive)
    s = doc["summary"]
    assert (s["reachable_replica_spread"], s["target_replica_band"]) == (4099, [1188, 5287])
    assert doc["after"]["leader_spread"] <= 1 and s["topics_over_ceil_partitions_per_broker"] == 0
    # the plan's bound is the LP relaxation of its whole goal (band, racks, leader caps, level leaders): at most
    # 456, the optimum of the per-partition LP written apart (bench/rebalance_lp_bound.py 8:6, GLOP, 3 min;
    # bench/results/rebalance-lp-bound-issue25-s10.txt), and within 1 % of the plan's moves (>= 453 for 457)
    lb = s["lower_bound_moves"]
    assert s["lower_bound_basis"] == "LP relaxation of the whole goal", s["lower_bound_basis"]
    assert lb <= 456 and lb <= s["replica_moves"] <= 1.01 * lb, (s["replica_moves"], lb)
    assert "LP relaxation of the band, the rack rules" in _moves_line(doc)


def test_the_goal_lp_counts_what_a_topic_leaves_each_broker_to_lead(tmp_path):
    """Worked by hand: brokers 1 (rack a), 2 and 3 (rack b); topic t of 3 partitions, RF 2, all on {1, 2}. Its
    cap is ceil(3 / 3) = 1 and leader spread <= 1 needs every broker to lead exactly one, so broker 3 must lead
    one, hence hold one: at least one move, though no broker is outside a band of [0, 6] (the count bound is
    0). The rack rule (2 racks, so one replica on each) lets only broker 2's replica go to broker 3: one move
    does it, so the LP's optimum is 1. With the band [2, 2] broker 1 would have to shed a replica, which no
    partition can (each needs rack a's only broker): no plan, and the LP says so (None)."""
    from planner.optimizer.lp_bound import goal_lp_bound
    from planner.optimizer.witness import leader_cap0

    racks = {1: "a", 2: "b", 3: "b"}
    spec = Spec(racks, set(racks), {("t", i): [1, 2] for i in range(3)})
    pb = from_snapshot(read_snapshot(write_snapshot(spec, tmp_path)))
    eligible = pb.alive.copy()
    caps = leader_cap0(pb, eligible)
    assert goal_lp_bound(pb, eligible, 0, 6, caps) == 1
    assert goal_lp_bound(pb, eligible, 2, 2, caps) is None
