"""Leader load (docs/PLAN.md "Leader load"): where sizes are known the bytes each broker leads are levelled
after the replica balance and the preferred-leader spread, never at their cost. Each plan is compared with the
same plan made without the step (the unprotected case), from plan.json's own lists."""

from __future__ import annotations

import numpy as np
import pytest

from planner.optimizer import Params, from_snapshot, make_plan, planning
from planner.plan_format import plan_document
from planner.snapshot_io import read_snapshot
from planner.synth import synth_cluster, to_snapshot


def _final(doc: dict, snap) -> dict[tuple[str, int], list[int]]:
    p = snap.partitions.to_pydict()
    final = {(t, n): list(r) for t, n, r in zip(p["topic"], p["partition"], p["replicas"], strict=True)}
    for m in doc["moves"]:
        final[(m["topic"], m["partition"])] = list(m["to"])
    return final


def _figures(final: dict, sizes: dict, eligible: set[int]) -> dict:
    """Worked out from the final lists alone: leaders and bytes led per broker, leaders per (topic, broker)."""
    leaders: dict[int, int] = dict.fromkeys(eligible, 0)
    led: dict[int, int] = dict.fromkeys(eligible, 0)
    per_topic: dict[tuple[str, int], int] = {}
    for (t, p), reps in final.items():
        b = reps[0]
        if b in eligible:
            leaders[b] += 1
            led[b] += sizes[(t, p)]
        per_topic[(t, b)] = per_topic.get((t, b), 0) + 1
    return {"leaders": leaders, "led": led, "topic_max": max(per_topic.values()),
            "placement": {k: sorted(v) for k, v in final.items()}}


@pytest.mark.parametrize("kind,seed", [("drain", 1), ("drain", 2), ("rebalance", 3), ("rebalance", 4)])
def test_bytes_led_are_levelled_without_touching_counts_or_placement(tmp_path, monkeypatch, kind, seed):
    c = synth_cluster(brokers=8, partitions=400, rf=[1, 2, 3], racks=2, partitions_per_topic=40, seed=seed,
                      moved_leader_fraction=0.3)
    rng = np.random.default_rng(seed)
    c.size_bytes = (rng.pareto(1.2, c.num_partitions) * 1e8).astype(np.int64) + 1   # very different sizes
    snap = read_snapshot(to_snapshot(c, tmp_path / "s"))
    p = snap.partitions.to_pydict()
    sizes = dict(zip(zip(p["topic"], p["partition"], strict=True), p["size_bytes"], strict=True))
    params = Params("drain", [int(c.broker_ids[0])]) if kind == "drain" else Params("rebalance")
    eligible = set(c.broker_ids.tolist()) - set(params.brokers)

    res = make_plan(from_snapshot(snap), params)
    doc = plan_document(res, {}, {})
    monkeypatch.setattr(planning, "level_bytes_led", lambda pb, ordered, *a, **k: (ordered, 0))
    doc0 = plan_document(make_plan(from_snapshot(snap), params), {}, {})   # unprotected: the step left out

    with_, without = (_figures(_final(d, snap), sizes, eligible) for d in (doc, doc0))
    assert with_["placement"] == without["placement"]          # no replica moves for leader load
    assert with_["leaders"] == without["leaders"]              # leader spread untouched
    assert with_["topic_max"] <= without["topic_max"]
    changes = [sum(1 for m in d["moves"] if m["from"][0] != m["to"][0]) for d in (doc, doc0)]
    spread = [max(f["led"].values()) - min(f["led"].values()) for f in (with_, without)]
    squares = [sum(v * v for v in f["led"].values()) for f in (with_, without)]
    assert squares[0] <= squares[1]
    assert doc["after"]["bytes_led"] == [with_["led"].get(b, 0) if b in eligible else doc["after"]["bytes_led"][i]
                                         for i, b in enumerate(doc["brokers"]["ids"])]
    assert changes[0] <= changes[1]     # no preferred-leader change added for leader load
    swaps = doc["leadership"]["bytes_led_swaps"]
    if swaps:
        assert squares[0] < squares[1] and spread[0] <= spread[1], (spread, squares)
    print(kind, seed, "swaps", swaps, "spread", spread, "changes", changes)
