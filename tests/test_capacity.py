"""Disk capacity as a hard constraint (docs/PLAN.md "Disk capacity"): hand-worked drains and batch orders,
each with the unprotected case shown to fail, and every refusal naming brokers and bytes."""

from __future__ import annotations

import numpy as np
import pytest
from optimizer_support import Spec, plan_maps, write_snapshot

from planner.optimizer import Infeasible, Params, from_snapshot, make_plan
from planner.optimizer.batches import Batch, make_batches
from planner.optimizer.capacity import check_batches
from planner.plan_format import plan_document
from planner.snapshot_io import read_snapshot

GB = 1000


def _plan(tmp_path, spec: Spec, params: Params, max_disk_usage: float = 0.85):
    pb = from_snapshot(read_snapshot(write_snapshot(spec, tmp_path)), max_disk_usage=max_disk_usage)
    res = make_plan(pb, params)
    return pb, plan_document(res, {}, {})


def _usage(spec: Spec, final: dict) -> dict[int, int]:
    """Disk use after the plan, worked out independently: used now, + size per replica added, - size per
    replica removed."""
    use = dict(spec.disk_used)
    for k, before in spec.assignment.items():
        for b in set(final[k]) - set(before):
            use[b] += spec.sizes[k]
        for b in set(before) - set(final[k]):
            use[b] -= spec.sizes[k]
    return use


def _spec(**kw) -> Spec:
    # broker 1 (drained) holds two single-replica partitions of 300 and 200; broker 2 holds no replica but its
    # disk is nearly full (700 of 1000: room 150 under 85 %); brokers 3 and 4 hold one replica each
    assign = {("a", 0): [1], ("b", 0): [1], ("c", 0): [3], ("c", 1): [4]}
    sizes = {("a", 0): 300, ("b", 0): 200, ("c", 0): 10, ("c", 1): 10}
    base = dict(racks={b: None for b in range(1, 5)}, alive={1, 2, 3, 4}, assignment=assign, sizes=sizes,
                capacity={b: GB for b in range(1, 5)}, disk_used={1: 600, 2: 700, 3: 100, 4: 100})
    base.update(kw)
    return Spec(**base)


def test_a_drain_keeps_every_broker_under_the_disk_limit(tmp_path):
    spec = _spec()
    _, doc = _plan(tmp_path / "with", spec, Params("drain", [1]))
    final = plan_maps(doc, spec)
    use = _usage(spec, final)
    assert all(use[b] <= 850 for b in (2, 3, 4)), use
    assert 2 not in final[("a", 0)] + final[("b", 0)]      # 200 or 300 more would take broker 2 over 850
    assert doc["after"]["disk_used_bytes"] == [use[b] for b in (1, 2, 3, 4)]
    assert doc["brokers"]["disk_limit_bytes"] == [850] * 4

    # unprotected (capacity unknown): levelling counts gives the empty broker 2 one of them, over its limit
    blind = _spec(capacity=None, disk_used=None)
    _, doc = _plan(tmp_path / "blind", blind, Params("drain", [1]))
    final = plan_maps(doc, blind)
    assert 2 in final[("a", 0)] + final[("b", 0)]
    assert _usage(spec, final)[2] > 850
    assert any("disk capacity unknown" in w for w in doc["warnings"])


def test_the_limit_is_settable(tmp_path):
    # at 0.95 broker 2 has room 250: the 200 fits there and the count balance puts it there
    spec = _spec()
    _, doc = _plan(tmp_path, spec, Params("drain", [1]), max_disk_usage=0.95)
    final = plan_maps(doc, spec)
    assert final[("b", 0)] == [2] and final[("a", 0)] in ([3], [4])


def test_more_bytes_than_room_is_refused_naming_brokers_and_bytes(tmp_path):
    spec = _spec(disk_used={1: 600, 2: 700, 3: 700, 4: 800})   # room 150 + 150 + 50 = 350 < 500
    with pytest.raises(Infeasible) as e:
        _plan(tmp_path, spec, Params("drain", [1]))
    assert e.value.constraint == "disk-capacity"
    assert str(e.value) == ("disk capacity: the drain of brokers [1] moves 500 B, but the 3 brokers that stay "
                            "have only 350 B of room under 85 % of their capacity (2: 150 B, 3: 150 B, 4: 50 B)")


def test_a_partition_that_fits_no_single_broker_is_refused(tmp_path):
    # room 250 on each of 2, 3, 4 (750 in all) but the 300 fits none of them
    spec = _spec(disk_used={1: 600, 2: 600, 3: 600, 4: 600})
    with pytest.raises(Infeasible) as e:
        _plan(tmp_path, spec, Params("drain", [1]))
    assert e.value.constraint == "disk-capacity"
    assert "a-0 (300 B)" in str(e.value) and "over the limit" in str(e.value)


def test_a_kept_broker_already_over_the_limit_is_refused(tmp_path):
    spec = _spec(disk_used={1: 600, 2: 100, 3: 900, 4: 100})
    with pytest.raises(Infeasible) as e:
        _plan(tmp_path, spec, Params("drain", [1]))
    assert str(e.value).startswith("disk capacity: 1 broker(s) already use more than 85 % of their log dirs' "
                                   "capacity before the plan (broker 3: 900 B of 1,000 B (90.0 %), 50 B over "
                                   "the limit); this plan cannot lower them")
    assert str(e.value).endswith("raise max_disk_usage to at least 0.90")


def test_the_drained_broker_may_be_over_the_limit(tmp_path):
    # draining a full disk is what the constraint must allow
    spec = _spec(disk_used={1: 990, 2: 100, 3: 100, 4: 100})
    _plan(tmp_path, spec, Params("drain", [1]))


# ------------------------------------------------------------------------------------- batch boundaries
def _problem(tmp_path, assign, final, sizes, used, limit=5):
    ids = sorted({b for r in list(assign.values()) + list(final.values()) for b in r})
    spec = Spec({b: None for b in ids}, set(ids), assign, sizes, {b: GB for b in ids}, used)
    pb = from_snapshot(read_snapshot(write_snapshot(spec, tmp_path)))
    keys = sorted(assign)
    fin = pb.replicas.copy()
    for i, k in enumerate(keys):
        fin[i, : len(final[k])] = pb.broker_index(final[k])
    return pb, keys, fin


def test_a_batch_that_fills_a_broker_before_it_frees_space_waits(tmp_path):
    # a: 1 -> 2 frees 400 on broker 1; b: 3 -> 1 adds 400 to broker 1 (used 800, limit 850). Together in one
    # batch broker 1 would hold 1200 until the batch completes: b must wait for a.
    assign = {("a", 0): [1], ("b", 0): [3]}
    final = {("a", 0): [2], ("b", 0): [1]}
    pb, keys, fin = _problem(tmp_path, assign, final, {k: 400 for k in assign}, {1: 800, 2: 0, 3: 0})
    batches = make_batches(pb, fin, np.zeros(pb.num_brokers, bool), limit=5)
    order = [[keys[r] for r in b.rows.tolist()] for b in batches]
    assert order == [[("a", 0)], [("b", 0)]]
    check_batches(pb, batches, "the plan")     # the independent walk agrees
    # unprotected: both in one batch, which the walk refuses, naming the broker and the batch
    together = [Batch(0, "data", np.array([0, 1]), fin[[0, 1]])]
    with pytest.raises(Infeasible, match=r"while batch 0 runs .* broker 1: 1.2 KiB of 1,000 B \(120.0 %, receiving 400 B\), 350 B over"):
        check_batches(pb, together, "the plan")


def test_a_swap_between_two_full_brokers_cannot_be_ordered(tmp_path):
    assign = {("a", 0): [1], ("b", 0): [2]}
    final = {("a", 0): [2], ("b", 0): [1]}
    pb, _, fin = _problem(tmp_path, assign, final, {k: 400 for k in assign}, {1: 800, 2: 800})
    with pytest.raises(Infeasible, match=r"2 moves cannot be ordered into batches that keep brokers \[1, 2\]"):
        make_batches(pb, fin, np.zeros(pb.num_brokers, bool), limit=5)
