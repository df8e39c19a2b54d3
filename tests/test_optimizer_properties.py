"""Property tests of the optimizer: every hard guarantee and quality target on generated clusters, checked by
an independent checker (tests/optimizer_support.py: plain Python + CP-SAT, never the planner's flows).

Clusters: 3-8 brokers, RF 1/2/3 mixes, no racks / even / uneven / partly missing racks, a dead broker, empty
brokers (skew), an excluded topic, drains of 1-3 brokers.
"""

from __future__ import annotations

import math
import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from optimizer_support import (
    Spec,
    check_batch_files,
    check_batches,
    check_guarantees,
    counts,
    drain_count_optimum,
    expected_leaders,
    final_placement,
    leader_counts,
    leader_optimum_within,
    leaders_over_bounds,
    min_topic_bottleneck,
    necessary_keys,
    plan_maps,
    rebalance_optimum,
    scope_keys,
    topic_leader_floor,
    write_snapshot,
)

from planner.errors import BadInput
from planner.optimizer import Infeasible, Params, from_snapshot, make_plan
from planner.plan_format import plan_document, write_plan
from planner.snapshot_io import read_snapshot

SETTINGS = settings(max_examples=int(os.environ.get("KP_EXAMPLES", 100)), deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@st.composite
def clusters(draw, sized: bool = False) -> tuple[Spec, set[str]]:
    nb = draw(st.integers(3, 8))
    mode = draw(st.sampled_from(["none", "even", "uneven", "missing"]))
    k = draw(st.integers(2, 3))
    racks: dict[int, str | None] = {}
    for i in range(1, nb + 1):
        if mode == "none":
            racks[i] = None
        elif mode == "even":
            racks[i] = f"r{(i - 1) % k}"
        elif mode == "uneven":
            racks[i] = f"r{draw(st.integers(0, k - 1))}"
        else:
            racks[i] = None if draw(st.booleans()) else f"r{(i - 1) % k}"
    alive = set(racks)
    if nb >= 5 and draw(st.booleans()):
        alive.discard(draw(st.sampled_from(sorted(racks))))
    empty = draw(st.integers(0, 2))
    usable = sorted(racks)[: nb - empty] if nb - empty >= 3 else sorted(racks)
    assignment: dict[tuple[str, int], list[int]] = {}
    for ti in range(draw(st.integers(1, 3))):
        rf = draw(st.integers(1, 3))
        for p in range(draw(st.integers(1, 9))):
            assignment[(f"t{ti}", p)] = list(draw(st.permutations(usable)))[:rf]
    sizes = None
    if sized:
        sizes = {key: draw(st.integers(1, 10**9)) for key in sorted(assignment)}
    excluded = {"t1"} if "t1" in {t for t, _ in assignment} and draw(st.booleans()) else set()
    return Spec(racks, alive, assignment, sizes), excluded


def _plan(tmp, spec: Spec, excluded: set[str], params: Params):
    """Plan, write the plan folder, check its batch files; the document as written."""
    path = write_snapshot(spec, tmp)
    rx = "|".join(map(re.escape, sorted(excluded))) or None
    pb = from_snapshot(read_snapshot(path), exclude_topics=rx)
    res = make_plan(pb, params)
    doc = write_plan(tmp / "plan", res, {"fingerprint": "f", "taken_at": None}, {}, {})
    # determinism: a second run from a fresh read writes the same files byte for byte
    res2 = make_plan(from_snapshot(read_snapshot(path), exclude_topics=rx), params)
    write_plan(tmp / "again", res2, {"fingerprint": "f", "taken_at": None}, {}, {})
    files = sorted(f.name for f in (tmp / "plan").iterdir() if f.name != "solve.json")
    assert files == sorted(f.name for f in (tmp / "again").iterdir() if f.name != "solve.json")
    assert all((tmp / "plan" / f).read_bytes() == (tmp / "again" / f).read_bytes() for f in files)
    check_batch_files(doc, spec, tmp / "plan", params.batch_seconds)
    return pb, doc


def _check_leaders(spec: Spec, final: dict, excluded: set[str], eligible: set[int], doc: dict,
                   caps: dict[str, int] | None = None, scope: str = "all") -> None:
    """With leader scope `scope`: partitions outside it keep their order; within every topic the bottleneck is
    the least the placement allows given the leaders that stay (and within `caps`: a rebalance's
    max(ceil(partitions / brokers), least any placement allows)); then global balance and fewest changes;
    necessary and optional changes as counted here; and what the other scope would reach, as plan.json says."""
    bounds, opt, movable = expected_leaders(spec, final, excluded, eligible, scope)
    for k in set(final) - movable:
        if set(final[k]) == set(spec.assignment[k]):
            assert final[k] == spec.assignment[k], f"{k} is outside scope {scope} but was reordered"
    for t, best in bounds.items():
        lead: dict[int, int] = {}
        for k in final:
            if k[0] == t and final[k] and final[k][0] in eligible:
                lead[final[k][0]] = lead.get(final[k][0], 0) + 1
        assert max(lead.values()) == best, f"topic {t}: {max(lead.values())} leaders on one broker, min {best}"
        if caps is not None and scope == "all":
            assert best <= caps[t], f"topic {t}: bound {best}, cap {caps[t]}"
    lc = leader_counts(final, eligible)
    assert sum(v * v for v in lc.values()) == opt["square"], (lc, opt)
    assert max(lc.values()) - min(lc.values()) == opt["spread"], (lc, opt)
    changed = {k for k in final if final[k][:1] != spec.assignment[k][:1]}
    assert len(changed) == opt["changes"], (len(changed), opt)
    s = doc["summary"]
    assert s["leadership_changes"] == len(changed) and s["leader_scope"] == scope
    needed = necessary_keys(spec, final, movable, eligible)
    assert s["necessary_leadership_changes"] == len(changed & needed)
    assert s["optional_leadership_changes"] == len(changed - needed)
    # the other scope, on the same placement
    other = "all" if scope == "touched" else "touched"
    _, opt2, movable2 = expected_leaders(spec, final_placement(spec, final), excluded, eligible, other)
    alt = doc["leadership"]["alternative"]
    assert alt["scope"] == other
    assert (alt["leadership_changes"], alt["leader_spread_after"]) == (opt2["changes"], opt2["spread"]), (alt, opt2)


@SETTINGS
@given(data=st.data())
def test_drain_properties(tmp_path_factory, data):
    spec, excluded = data.draw(clusters(sized=data.draw(st.booleans())))
    drained = set(data.draw(st.lists(st.sampled_from(spec.broker_ids), min_size=1, max_size=3, unique=True)))
    limit = data.draw(st.integers(1, 3))
    eligible = spec.alive - drained
    rack_aware = any(r is not None for r in spec.racks.values())
    # independent expectations of refusal
    stuck_excluded = [k for k, r in spec.assignment.items() if k[0] in excluded and set(r) & drained]
    short = [k for k, r in spec.assignment.items() if k[0] not in excluded and set(r) & drained
             and len(eligible) + len([b for b in r if b not in spec.alive and b not in drained]) < len(r)]
    try:
        pb, doc = _plan(tmp_path_factory.mktemp("d"), spec, excluded,
                        Params("drain", sorted(drained), max_concurrent_per_broker=limit,
                               batch_seconds=data.draw(st.sampled_from([1, 60, 3600]))))
    except Infeasible as e:
        assert stuck_excluded or short, f"refused without cause: {e}"
        if stuck_excluded:
            assert "excluded topic(s) t1 hold replicas on drained brokers" in str(e)
        else:
            t, p = short[0]
            r = spec.assignment[(t, p)]
            assert str(e).startswith(f"topic {t}: RF {len(r)} but only "), str(e)
        return
    except BadInput as e:
        assert not eligible and "no registered broker would remain" in str(e)
        return
    assert not stuck_excluded and not short
    final = plan_maps(doc, spec)
    check_guarantees(spec, final, drained, excluded, rack_aware)
    # nothing but the drained replicas moves, so the moves equal the lower bound
    on_drained = sum(1 for r in spec.assignment.values() for b in r if b in drained)
    for k, r in spec.assignment.items():
        assert set(r) - drained <= set(final[k])
    assert doc["summary"]["replica_moves"] == on_drained == doc["summary"]["lower_bound_moves"]
    # the remaining brokers are as level as any drain can make them (CP-SAT min max and max min)
    c = counts(final, eligible)
    best_max, best_min = drain_count_optimum(spec, drained, rack_aware)
    assert (max(c.values()), min(c.values())) == (best_max, best_min)
    if best_max - best_min <= 1:
        assert max(c.values()) - min(c.values()) <= 1
    _check_leaders(spec, final, excluded, eligible, doc, scope="touched")
    check_batches(doc, spec, drained, limit)


def _leaders_fit_today(spec: Spec, excluded: set[str], eligible: set[int]) -> bool:
    """Every topic's current placement already admits preferred leaders within ceil(partitions/brokers)."""
    for t in spec.topics():
        if t in excluded:
            continue
        keys = [k for k in spec.assignment if k[0] == t]
        cands = [c for c in ([b for b in spec.assignment[k] if b in eligible] for k in keys) if c]
        if len(cands) < len(keys) or min_topic_bottleneck(cands, {}) > math.ceil(len(keys) / len(eligible)):
            return False
    return True


@settings(SETTINGS, max_examples=int(os.environ.get("KP_EXAMPLES", 60)))
@given(data=st.data())
def test_rebalance_properties(tmp_path_factory, data):
    """Adversarial small clusters (dead brokers holding replicas, lopsided racks, exclusions): every guarantee,
    the most level counts reachable with the fewest moves, every topic's leaders within max(ceil(partitions /
    brokers), the least any placement allows), and leaders as level as the final placement allows with the
    fewest changes."""
    spec, excluded = data.draw(clusters())
    eligible = spec.alive
    rack_aware = any(r is not None for r in spec.racks.values())
    pb, doc = _plan(tmp_path_factory.mktemp("r"), spec, excluded, Params("rebalance", balance="count"))
    final = plan_maps(doc, spec)
    check_guarantees(spec, final, set(), excluded, rack_aware)
    caps = {t: max(math.ceil(sum(1 for k in spec.assignment if k[0] == t) / len(eligible)),
                   topic_leader_floor(spec, t, rack_aware)) for t in spec.topics() if t not in excluded}
    c = counts(final, eligible)
    moves = sum(len(set(final[k]) - set(r)) for k, r in spec.assignment.items())
    assert moves == doc["summary"]["replica_moves"]
    # the most level counts any rebalance can reach with every topic's leaders within its cap (least square
    # sum, hence also least spread), with the fewest moves that reach them (CP-SAT, modelled independently)
    best_square, fewest, cp_caps = rebalance_optimum(spec, excluded, rack_aware)
    assert cp_caps == caps
    assert sum(v * v for v in c.values()) == best_square, (c, best_square)
    assert moves <= max(fewest, math.floor(1.05 * fewest)), (moves, fewest)
    _check_leaders(spec, final, excluded, eligible, doc, caps)
    check_batches(doc, spec, set(), 5)


@st.composite
def random_clusters(draw) -> Spec:
    """Clusters as they come: every broker registered, random placement, no racks or racks of equal size, new
    empty brokers."""
    k = draw(st.sampled_from([0, 2, 3]))
    nb = draw(st.sampled_from([n for n in range(5, 13) if not k or n % k == 0]))
    racks = {i: (f"r{(i - 1) % k}" if k else None) for i in range(1, nb + 1)}
    empty = draw(st.integers(0, 3))
    usable = list(range(1, nb - empty + 1))
    assignment = {}
    for ti in range(draw(st.integers(1, 4))):
        rf = draw(st.integers(1, 3))
        for p in range(draw(st.integers(5, 40))):
            assignment[(f"t{ti}", p)] = list(draw(st.permutations(usable)))[:rf]
    return Spec(racks, set(racks), assignment)


@SETTINGS
@given(data=st.data())
def test_rebalance_reaches_spread_one_with_the_lower_bound_moves(tmp_path_factory, data):
    """Replica counts within one of each other, with at most 1.05 x the lower bound moves (each broker's excess
    over its share when the largest brokers keep the ceil(mean) slots), and every topic's leaders within
    ceil(partitions / brokers). The lower bound and spread are computed here from the counts alone."""
    spec = data.draw(random_clusters())
    rack_aware = any(r is not None for r in spec.racks.values())
    pb, doc = _plan(tmp_path_factory.mktemp("q"), spec, set(), Params("rebalance", balance="count"))
    final = plan_maps(doc, spec)
    check_guarantees(spec, final, set(), set(), rack_aware)
    brokers = sorted(spec.alive)
    c0 = counts(spec.assignment, brokers)
    total = sum(c0.values())
    lo, r = divmod(total, len(brokers))
    ranked = sorted(brokers, key=lambda b: -c0[b])
    target = {b: lo + (1 if i < r else 0) for i, b in enumerate(ranked)}
    lower = sum(max(0, c0[b] - target[b]) for b in brokers)
    c = counts(final, brokers)
    moves = sum(len(set(final[k]) - set(v)) for k, v in spec.assignment.items())
    if _leaders_fit_today(spec, set(), set(brokers)):
        # (otherwise partitions must move for their topic's leaders to spread, which the count bound ignores)
        assert max(c.values()) - min(c.values()) <= 1, c
        assert moves <= max(lower, math.floor(1.05 * lower)), (moves, lower)
        assert lower <= doc["summary"]["lower_bound_moves"] <= moves, (doc["summary"], lower, moves)
    caps = {t: math.ceil(sum(1 for k in spec.assignment if k[0] == t) / len(brokers)) for t in spec.topics()}
    _check_leaders(spec, final, set(), set(brokers), doc, caps)


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_rebalance_budget_is_respected_and_never_worsens(tmp_path_factory, data):
    spec, excluded = data.draw(clusters(sized=True))
    budget_moves = data.draw(st.integers(0, 4))
    pb, doc = _plan(tmp_path_factory.mktemp("b"), spec, excluded,
                    Params("rebalance", max_moves=budget_moves, balance="count"))
    final = plan_maps(doc, spec)
    check_guarantees(spec, final, set(), excluded, any(r is not None for r in spec.racks.values()))
    moves = sum(len(set(final[k]) - set(r)) for k, r in spec.assignment.items())
    assert moves <= budget_moves
    before = counts(spec.assignment, spec.alive)
    after = counts(final, spec.alive)
    if _leaders_fit_today(spec, excluded, spec.alive):
        assert max(after.values()) - min(after.values()) <= max(before.values()) - min(before.values())


@pytest.mark.parametrize("seed", [1, 2])
def test_bytes_rebalance_levels_bytes_within_five_percent(tmp_path, seed):
    """Sizes known: every broker within 5 % of the mean bytes, moved bytes within 1.05 x the lower bound."""
    from planner.synth import synth_cluster, to_snapshot

    c = synth_cluster(brokers=24, partitions=6000, rf=[2, 3], racks=3, empty_brokers=3, seed=seed)
    to_snapshot(c, tmp_path / "s")
    pb = from_snapshot(read_snapshot(tmp_path / "s"))
    res = make_plan(pb, Params("rebalance"))
    doc = plan_document(res, {}, {})
    final = res.final
    sizes = c.size_bytes
    load = {}
    for i in range(len(final)):
        for b in final[i]:
            if b >= 0:
                load[int(b)] = load.get(int(b), 0) + int(sizes[i])
    mean = sum(load.values()) / len(load)
    assert len(load) == 24 and max(abs(v - mean) for v in load.values()) <= 0.05 * mean
    before = {}
    for i, reps in enumerate(c.replicas.tolist()):
        for b in reps:
            if b >= 1:
                before[b - 1] = before.get(b - 1, 0) + int(sizes[i])
    mean0 = sum(before.values()) / 24
    lower = sum(max(0.0, before.get(b, 0) - mean0) for b in range(24))
    moved = sum(int(sizes[i]) * len(set(final[i].tolist()) - set(pb.replicas[i].tolist()))
                for i in range(len(final)))
    assert moved <= 1.05 * lower
    assert doc["summary"]["bytes_moved"] == moved


@settings(SETTINGS, max_examples=int(os.environ.get("KP_EXAMPLES", 40)))
@given(data=st.data())
def test_max_leader_changes_gives_the_best_leaders_within_it(tmp_path_factory, data):
    """--max-leader-changes N: refused (naming the least N) below the necessary changes, counted here from the
    placement; otherwise the placement is the same as without a budget, at most N partitions change their
    preferred leader, and no choice with as few changes has fewer leaders over the topic bounds or, with as
    few, a smaller sum of squares of per-broker leader counts (CP-SAT)."""
    spec, excluded = data.draw(clusters())
    kind = data.draw(st.sampled_from(["drain", "rebalance"]))
    drained = set(data.draw(st.lists(st.sampled_from(spec.broker_ids), min_size=1, max_size=2, unique=True))) \
        if kind == "drain" else set()
    scope = data.draw(st.sampled_from(["touched", "all"]))
    eligible = spec.alive - drained
    base = Params(kind, sorted(drained), leader_scope=scope, balance="count")
    tmp = tmp_path_factory.mktemp("lb")
    try:
        _, doc0 = _plan(tmp / "free", spec, excluded, base)
    except BadInput:
        return  # refusals of the drain itself are tested above
    placed = final_placement(spec, plan_maps(doc0, spec))
    movable = scope_keys(spec, placed, excluded, scope)
    needed = necessary_keys(spec, placed, movable, eligible)
    budget = data.draw(st.integers(max(0, len(needed) - 1), len(needed) + 4))
    params = Params(kind, sorted(drained), leader_scope=scope, balance="count", max_leader_changes=budget)
    if budget < len(needed):
        with pytest.raises(Infeasible) as e:
            _plan(tmp / "b", spec, excluded, params)
        assert f"allow at least {len(needed)}" in str(e.value) and e.value.exit_code == 2
        return
    _, doc = _plan(tmp / "b", spec, excluded, params)
    final = plan_maps(doc, spec)
    assert {k: set(v) for k, v in final.items()} == {k: set(v) for k, v in placed.items()}
    changes = sum(1 for k in final if final[k][:1] != spec.assignment[k][:1])
    assert changes <= budget and doc["summary"]["leadership_changes"] == changes
    assert doc["leadership"]["max_changes"] == budget
    bounds, _, movable = expected_leaders(spec, placed, excluded, eligible, scope)
    for k in set(final) - movable:
        assert final[k] == placed[k], f"{k} outside scope {scope} was reordered"
    lc = leader_counts(final, eligible)
    ours = (leaders_over_bounds(final, eligible, bounds), sum(v * v for v in lc.values()))
    best = leader_optimum_within(placed, movable, eligible, bounds, spec.assignment, changes)
    assert ours == best, (ours, best, changes, budget)
