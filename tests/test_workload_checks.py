"""The workload's per-partition sequence checks and percentiles, on reads worked out by hand (no broker)."""

from __future__ import annotations

from planner.sandbox.workload import Checker, _percentile


def test_duplicates_and_reordering_are_counted_once_each():
    c = Checker(2)
    # partition 0 reads seq 0, 1, 1 (again, at another offset), 3, 2 (below 3: out of order), 4
    for seq, off in [(0, 10), (1, 11), (1, 12), (3, 13), (2, 14), (4, 15)]:
        c.see(0, seq, off, "t-0")
    # partition 1 is clean and independent of partition 0's sequence
    for seq, off in [(0, 0), (1, 1), (2, 2)]:
        c.see(1, seq, off, "t-1")
    assert (c.read, c.duplicated, c.out_of_order) == (9, 1, 1)
    assert list(c.seen[0]) == [10, 11, 14, 13, 15]   # the offset each seq was first read at
    assert c.examples["duplicated"] == ["t-0 seq 1 at offsets 11 and 12"]
    assert c.examples["out_of_order"] == ["t-0 seq 2 at offset 14 after seq 3"]


def test_a_gap_is_not_a_reordering():
    c = Checker(1)
    for seq, off in [(0, 0), (5, 1), (6, 2)]:   # 1..4 failed to send: missing, not out of order
        c.see(0, seq, off, "t-0")
    assert (c.duplicated, c.out_of_order) == (0, 0)
    assert [x for x in c.seen[0]] == [0, -1, -1, -1, -1, 1, 2]


def test_nearest_rank_percentiles():
    values = sorted(float(x) for x in range(1, 101))   # 1..100
    assert (_percentile(values, 50), _percentile(values, 99), _percentile(values, 100)) == (50.0, 99.0, 100.0)
    assert _percentile([7.0], 99) == 7.0
    assert _percentile([1.0, 2.0, 3.0, 4.0, 1000.0], 99) == 1000.0   # one slow send of five is the p99
