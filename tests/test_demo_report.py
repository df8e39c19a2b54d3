"""The plan summary `make demo` prints (kplan_airflow.summary.text_report), issue 19 item 7: the hot-spot line
is whole (it was cut mid-sentence), the risk table's columns are as wide as what they hold (the "before"
column overflowed into "after"), and the replica spread says what it counts, the drained broker at 0 (the
demo's "replica spread 30 -> 48" read as if the drain made things worse). The cluster is the review plugin's,
whose hot spot is worked out there by hand; no Airflow is started."""

from __future__ import annotations

import re

from kplan_airflow import summary as sm
from test_review_plugin import CLUSTER

from planner import api, risk
from planner import snapshot_io as sio
from planner.cluster import parse_cluster

WIDTH = 110


def test_the_demo_summary_keeps_every_sentence_whole_and_its_columns_apart(tmp_path):
    s = risk.snapshot_from_cluster(parse_cluster(CLUSTER))
    snap = sio.write_snapshot(tmp_path / "snap", s.manifest, s.brokers, s.topics, s.partitions)
    plan = api.plan_drain(api.DrainRequest(snapshot=snap, out=tmp_path / "plan", brokers=(1,),
                                           max_concurrent_per_broker=2)).plan
    long_before = "CRITICAL (offline 2, under min isr 12, under replicated 40)"
    pairs = [{"name": "drain of broker(s) 1", "after": {"level": "low"},
              "before": {"level": "critical", "offline": 2, "under_min_isr": 12, "under_replicated": 40}},
             {"name": "broker 4 fails", "before": {"level": "low"}, "after": {"level": "medium", "under_replicated": 24}}]
    text = sm.text_report(plan, pairs, width=WIDTH)
    lines = text.splitlines()
    head = lines.index(next(x for x in lines if x.lstrip().startswith("scenario")))
    assert all(len(x) <= WIDTH for x in lines[:head]), [x for x in lines if len(x) > WIDTH]   # the table: below
    flat = " ".join(text.split())   # long lines wrap under their text

    # broker 4 is rack r1's only eligible broker; every "orders" partition spans the 3 racks, so it keeps its 12
    # and takes broker 1's 12: 24 of 74 replicas on 5 brokers (mean 14.8, +62.2%). Said once, to its last word.
    hot = [x for x in lines if x.startswith("  HOT SPOT")]
    assert len(hot) == 1
    assert "HOT SPOT broker 4 (rack r1) ends +62.2% replicas vs the mean. Why (rack): rack r1 must hold at least " \
           "24 replicas on its only eligible broker" in flat
    assert re.search(r"HOT SPOT .*? those already on the rack stay\. ", flat + " "), flat

    # before: brokers 2..6 hold 13, 12, 12, 12, 12 (orders: 72 replicas over 6 brokers; legacy: one each on 1
    # and 2) and broker 1 holds 13; after: broker 4 holds 24, the others stay at 12..13 or take legacy-0
    assert "replicas per broker on the 5 brokers that stay: 12..13 (spread 1) -> 12..24 (spread 12); drained: " \
           "broker 1 13 -> 0" in flat

    table = lines[head:head + 3]
    col = table[0].index("after the plan")
    assert table[0].index("before") < col
    assert [x[col:] for x in table] == ["after the plan", "LOW", "MEDIUM (under replicated 24)"], table
    assert table[1][:col].rstrip().endswith(long_before)   # the whole cell, before the next column starts
    assert table[1][:col].endswith("  ")                   # with the two spaces between columns
    assert text.count("brokers that stay") == 1 and text.count("scenario") == 1
