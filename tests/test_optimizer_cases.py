"""Hand-worked optimizer cases, every refusal with its exact text, and `kplan plan` end to end."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pytest
from optimizer_support import Spec, min_topic_bottleneck, plan_maps, write_snapshot

from planner import cli
from planner.codec import decode_reassignment
from planner.errors import BadInput
from planner.optimizer import Infeasible, Params, from_snapshot, make_plan
from planner.optimizer.leaders import choose_leaders
from planner.optimizer.sizes import parse_sizes
from planner.plan_format import plan_document
from planner.plan_model import read_plan
from planner.snapshot_io import read_snapshot
from planner.snapshot_io import write_snapshot as write_snapshot_folder
from planner.synth import synth_cluster, to_snapshot


def _plan(tmp_path, spec: Spec, params: Params, exclude: str | None = None):
    pb = from_snapshot(read_snapshot(write_snapshot(spec, tmp_path)), exclude_topics=exclude)
    res = make_plan(pb, params)
    return res, plan_document(res, {}, {})


def _racks(n: int, k: int = 0) -> dict[int, str | None]:
    return {i: (f"r{(i - 1) % k}" if k else None) for i in range(1, n + 1)}


# ------------------------------------------------------------------------------------------ hand cases
def test_rf1_partition_on_the_drained_broker_moves(tmp_path):
    spec = Spec(_racks(4), {1, 2, 3, 4}, {("solo", 0): [1], ("other", 0): [2, 3], ("other", 1): [3, 4]})
    res, doc = _plan(tmp_path, spec, Params("drain", [1]))
    final = plan_maps(doc, spec)
    assert final[("solo", 0)] in ([2], [3], [4])
    assert [m["topic"] for m in doc["moves"] if m["kind"] == "data"] == ["solo"]
    assert doc["summary"]["replica_moves"] == doc["summary"]["lower_bound_moves"] == 1
    # no other replica to lead from, so it is in no leadership batch; one data batch moves it
    assert [b["partitions"] for b in doc["batches"] if b["kind"] == "data"] == [[["solo", 0]]]
    assert ["solo", 0] not in [p for b in doc["batches"] if b["kind"] == "leadership" for p in b["partitions"]]


def test_topic_with_as_many_partitions_as_brokers_gets_all_leaders_on_different_brokers(tmp_path):
    # six partitions, six brokers, every partition led by broker 1 today
    assign = {("orders", i): [1, (i % 5) + 2, ((i + 1) % 5) + 2] for i in range(6)}
    spec = Spec(_racks(6), set(range(1, 7)), assign)
    for kind in ("rebalance", "drain"):
        params = Params("rebalance") if kind == "rebalance" else Params("drain", [6], leader_scope="all")
        res, doc = _plan(tmp_path / kind, spec, params)
        final = plan_maps(doc, spec)
        leaders = [final[("orders", i)][0] for i in range(6)]
        if kind == "rebalance":
            assert sorted(leaders) == [1, 2, 3, 4, 5, 6]
        else:  # broker 6 leaves: five brokers for six partitions, at most two on one
            assert max(leaders.count(b) for b in set(leaders)) == 2 and 6 not in leaders
    (tmp_path / "r2").mkdir()
    res, doc = _plan(tmp_path / "r2", spec, Params("rebalance"))
    assert doc["topics"]["max_leaders_per_broker_after"] == [1]
    assert doc["topics"]["max_leaders_per_broker_before"] == [6]


def test_leadership_moves_off_drained_brokers_before_any_data(tmp_path):
    spec = Spec(_racks(4), {1, 2, 3, 4}, {("t", 0): [1, 2, 3], ("t", 1): [2, 1, 3], ("t", 2): [3, 4, 2]})
    res, doc = _plan(tmp_path, spec, Params("drain", [1]))
    first = doc["batches"][0]
    assert first["kind"] == "leadership"
    lists = dict(zip(map(tuple, first["partitions"]), first["replicas"], strict=True))
    # t-0 is led from broker 1: its current replicas, reordered so a remaining one leads
    assert sorted(lists[("t", 0)]) == [1, 2, 3] and lists[("t", 0)][0] in (2, 3)
    assert all(b["kind"] == "data" for b in doc["batches"][1:])
    assert {tuple(p) for b in doc["batches"][1:] for p in b["partitions"]} == {("t", 0), ("t", 1)}


def test_data_batches_respect_the_per_broker_limit_smallest_first(tmp_path):
    assign = {(f"t{i:02d}", 0): [1] for i in range(12)}
    sizes = {(f"t{i:02d}", 0): 1000 * (12 - i) for i in range(12)}
    spec = Spec(_racks(4), {1, 2, 3, 4}, assign, sizes)
    res, doc = _plan(tmp_path, spec, Params("drain", [1], max_concurrent_per_broker=5))
    data = [b for b in doc["batches"] if b["kind"] == "data"]
    assert [len(b["partitions"]) for b in data] == [5, 5, 2]  # every move touches broker 1
    order = [sizes[tuple(p)] for b in data for p in b["partitions"]]
    assert order == sorted(order)
    res, doc = _plan(tmp_path / "l", spec, Params("drain", [1], max_concurrent_per_broker=5,
                                                  order="largest-first"))
    order = [sizes[tuple(p)] for b in doc["batches"] if b["kind"] == "data" for p in b["partitions"]]
    assert order == sorted(order, reverse=True)


def test_budgeted_rebalance_is_the_best_balance_within_the_budget(tmp_path):
    # 20 one-partition topics: brokers 1 and 2 hold ten each, 3 and 4 are new. Six moves can at best reach
    # 7, 7, 3, 3 (each move takes one from a full broker to an empty one).
    assign = {(f"t{i:02d}", 0): [1 if i < 10 else 2] for i in range(20)}
    spec = Spec(_racks(4), {1, 2, 3, 4}, assign)
    res, doc = _plan(tmp_path, spec, Params("rebalance", max_moves=6))
    assert doc["after"]["replicas"] == [7, 7, 3, 3]
    assert doc["summary"]["replica_moves"] == 6
    res, doc = _plan(tmp_path / "free", spec, Params("rebalance"))
    assert doc["after"]["replicas"] == [5, 5, 5, 5] and doc["summary"]["replica_moves"] == 10


def test_flow_rebalance_levels_a_cluster_with_new_brokers(tmp_path):
    """Above the exact-solver size: the flow decomposition reaches spread 1 with the lower bound of moves."""
    c = synth_cluster(brokers=30, partitions=3000, rf=[2, 3], racks=3, empty_brokers=3, sizes=False, seed=4)
    to_snapshot(c, tmp_path / "s")
    pb = from_snapshot(read_snapshot(tmp_path / "s"))
    res = make_plan(pb, Params("rebalance"))
    doc = plan_document(res, {}, {})
    counts = np.bincount(res.final[res.final >= 0], minlength=30)
    assert counts.max() - counts.min() <= 1
    before = np.bincount(c.replicas[c.replicas >= 0] - 1, minlength=30)
    lo, r = divmod(int(before.sum()), 30)
    target = np.full(30, lo)
    target[np.argsort(-before, kind="stable")[:r]] += 1
    lower = int(np.maximum(0, before - target).sum())
    assert lower <= doc["summary"]["replica_moves"] <= 1.05 * lower
    n_t = np.bincount(pb.topic_of)
    assert (np.asarray(doc["topics"]["max_leaders_per_broker_after"]) <= -(-n_t // 30)).all()
    assert doc["after"]["leader_spread"] <= 1


def test_decomposed_leader_order_meets_the_targets(tmp_path):
    """The large-cluster leader path (per-topic flows, then balancing rounds) on a drained placement: every
    topic at its own minimum bottleneck (independent matching), leaders within one of the ideal."""
    c = synth_cluster(brokers=24, partitions=2400, rf=3, racks=3, seed=7)
    to_snapshot(c, tmp_path / "s")
    pb = from_snapshot(read_snapshot(tmp_path / "s"))
    drained = np.zeros(24, bool)
    drained[[0, 1]] = True
    from planner.optimizer.drain import place_drain

    placed = place_drain(pb, drained)
    eligible = pb.alive & ~drained
    lr = choose_leaders(pb, placed, eligible, ~pb.fixed, exact_limit=0)
    assert lr.method == "decomposed"
    lead = lr.ordered[:, 0]
    for t in range(len(pb.topic_names)):
        rows = np.flatnonzero(pb.topic_of == t)
        cands = [[int(b) for b in placed[r] if b >= 0] for r in rows]
        got = np.bincount(lead[rows]).max()
        assert got == min_topic_bottleneck(cands, {})
    counts = np.bincount(lead, minlength=24)[eligible]
    ideal = len(lead) / eligible.sum()
    assert np.abs(counts - ideal).max() <= 1


# ------------------------------------------------------------------------------------------- refusals
def test_refused_when_a_topic_cannot_keep_its_replication_factor(tmp_path):
    spec = Spec(_racks(3), {1, 2, 3}, {("orders", 0): [1, 2, 3], ("orders", 1): [2, 3, 1], ("logs", 0): [1]})
    with pytest.raises(Infeasible) as e:
        _plan(tmp_path, spec, Params("drain", [3]))
    assert str(e.value) == ("topic orders: RF 3 but only 2 eligible brokers remain (registered, not drained) "
                            "for partitions orders-0, orders-1")
    assert e.value.constraint == "replication-factor" and e.value.exit_code == 2


def test_refused_when_an_excluded_topic_lives_on_a_drained_broker(tmp_path):
    spec = Spec(_racks(3), {1, 2, 3}, {("audit", 0): [1, 2], ("audit", 1): [2, 3], ("x", 0): [1]})
    with pytest.raises(Infeasible) as e:
        _plan(tmp_path, spec, Params("drain", [1]), exclude="audit")
    assert str(e.value) == ("excluded topic(s) audit hold replicas on drained brokers, and excluded topics are "
                            "never moved: audit-0")


def test_refused_when_a_partition_being_reassigned_lives_on_a_drained_broker(tmp_path):
    spec = Spec(_racks(3), {1, 2, 3}, {("t", 0): [1, 2], ("t", 1): [2, 3]})
    path = write_snapshot(spec, tmp_path)
    snap = read_snapshot(path)
    parts = snap.partitions
    target = pa.array([[2, 3], None], type=pa.list_(pa.int32()))
    parts = parts.set_column(parts.schema.get_field_index("target_replicas"), "target_replicas", target)
    write_snapshot_folder(tmp_path / "inflight", snap.manifest, snap.brokers, snap.topics, parts)
    pb = from_snapshot(read_snapshot(tmp_path / "inflight"))
    with pytest.raises(Infeasible) as e:
        make_plan(pb, Params("drain", [1]))
    assert str(e.value) == ("partitions being reassigned now hold replicas on drained brokers; wait for that "
                            "reassignment to finish: t-0")
    # elsewhere the in-flight partition is simply left alone
    res = make_plan(pb, Params("drain", [3]))
    assert (res.final[0] == pb.replicas[0]).all()


@pytest.mark.parametrize(("argv", "message"), [
    (["--brokers", "9"], "unknown broker(s) [9]: the snapshot knows 1, 2, 3"),
    (["--brokers", " , "], "--brokers is empty: name at least one broker id"),
    (["--brokers", "1,1"], "brokers lists a broker twice: [1, 1]"),
    (["--brokers", "a"], "--brokers 'a': broker ids are integers, comma separated"),
    (["--brokers", "1,2,3"], "no registered broker would remain to hold replicas"),
    (["--brokers", "1", "--exclude-topics", "("], "exclude_topics '(' is not a valid regular expression"),
    (["--brokers", "1", "--max-concurrent-per-broker", "0"], "max_concurrent_per_broker must be at least 1"),
])
def test_bad_requests_exit_2_and_write_nothing(tmp_path, capsys, argv, message):
    spec = Spec(_racks(3), {1, 2, 3}, {("t", 0): [1, 2], ("t", 1): [2, 3]})
    snap = write_snapshot(spec, tmp_path)
    out = tmp_path / "plan"
    rc = cli.main(["plan", "drain", "--snapshot", str(snap), "--out", str(out), "--quiet", *argv])
    assert rc == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_missing_snapshot_and_bad_sizes_file_exit_2(tmp_path, capsys):
    rc = cli.main(["plan", "rebalance", "--snapshot", str(tmp_path / "nope"), "--out", str(tmp_path / "p")])
    assert rc == 2 and f"snapshot folder {tmp_path / 'nope'} does not exist" in capsys.readouterr().err
    snap = write_snapshot(Spec(_racks(3), {1, 2, 3}, {("t", 0): [1, 2]}), tmp_path)
    rc = cli.main(["plan", "rebalance", "--snapshot", str(snap), "--out", str(tmp_path / "p"),
                   "--sizes", str(tmp_path / "none.json")])
    assert rc == 2 and "no such file" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text('{"t0": 5}')
    rc = cli.main(["plan", "rebalance", "--snapshot", str(snap), "--out", str(tmp_path / "p"),
                   "--sizes", str(tmp_path / "bad.json")])
    assert rc == 2 and "'t0' is not 'topic-partition'" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


def test_sizes_file_formats():
    assert parse_sizes('{"orders-0": 10, "my-topic-12": 7}') == {("orders", 0): 10, ("my-topic", 12): 7}
    log_dirs = (
        "Querying brokers for log directories information\n"
        "Received log directory information from brokers 1,2\n"
        '{"version":1,"brokers":[{"broker":1,"logDirs":[{"logDir":"/d","error":null,"partitions":['
        '{"partition":"orders-0","size":100,"offsetLag":0,"isFuture":false},'
        '{"partition":"orders-1","size":5,"offsetLag":0,"isFuture":true}]}]},'
        '{"broker":2,"logDirs":[{"logDir":"/d","error":null,"partitions":['
        '{"partition":"orders-0","size":120,"offsetLag":0,"isFuture":false}]}]}]}\n'
    )
    # the largest replica counts; future (log-dir move) replicas do not
    assert parse_sizes(log_dirs) == {("orders", 0): 120}
    with pytest.raises(BadInput, match="size of 'x-1' must be a non-negative integer"):
        parse_sizes('{"x-1": -3}')


# ---------------------------------------------------------------------------------------- end to end
def test_cli_drain_end_to_end_is_deterministic_and_reads_back(tmp_path, capsys):
    c = synth_cluster(brokers=9, partitions=400, rf=[1, 2, 3], racks=3, seed=3)
    to_snapshot(c, tmp_path / "snap")
    outs = []
    for name in ("a", "b"):
        rc = cli.main(["plan", "drain", "--snapshot", str(tmp_path / "snap"), "--brokers", "2,5",
                       "--out", str(tmp_path / name)])
        assert rc == 0
        outs.append({f: (tmp_path / name / f).read_bytes() for f in ("plan.json", "reassignment.json",
                                                                     "rollback.json")})
    assert outs[0] == outs[1]
    printed = capsys.readouterr().out
    assert "replica moves" in printed and "lower bound" in printed and "times" in printed
    plan = read_plan(tmp_path / "a")
    doc = json.loads((tmp_path / "a" / "plan.json").read_text())
    assert plan.id == doc["id"]
    assert doc["kind"] == "drain" and doc["parameters"]["brokers"] == [2, 5]
    assert doc["snapshot"]["fingerprint"] == json.loads((tmp_path / "snap" / "manifest.json").read_text())[
        "fingerprint"]
    # reassignment.json is exactly Kafka's format (the strict znode decoder accepts it), rollback = snapshot
    entries = decode_reassignment((tmp_path / "a" / "reassignment.json").read_bytes())
    assert {e.topic for e in entries} <= set(c.topic_names)
    before = {(c.topic_names[c.topic_of[i]], int(c.partition[i])): [int(b) for b in c.replicas[i] if b >= 0]
              for i in range(len(c.partition))}
    for e in plan.rollback:
        assert list(e.replicas) == before[(e.topic, e.partition)]
    for e in plan.reassignment:
        assert not {2, 5} & set(e.replicas)
    moved = sum(1 for reps in before.values() for b in reps if b in (2, 5))
    assert doc["summary"]["replica_moves"] == moved
    timings = json.loads((tmp_path / "a" / "solve.json").read_text())["timings_s"]
    assert timings["total"] > 0 and "placement" in timings
    # an edited plan is refused
    text = (tmp_path / "a" / "plan.json").read_text().replace('"order": "smallest-first"',
                                                                 '"order": "largest-first"')
    (tmp_path / "a" / "plan.json").write_text(text)
    with pytest.raises(BadInput, match="does not match its id"):
        read_plan(tmp_path / "a")


def test_cli_rebalance_end_to_end(tmp_path, capsys):
    c = synth_cluster(brokers=12, partitions=600, rf=3, racks=3, empty_brokers=2, seed=5)
    to_snapshot(c, tmp_path / "snap")
    rc = cli.main(["plan", "rebalance", "--snapshot", str(tmp_path / "snap"), "--out", str(tmp_path / "p"),
                   "--exclude-topics", "topic-00003", "--max-concurrent-per-broker", "3"])
    assert rc == 0
    doc = read_plan(tmp_path / "p").doc
    assert doc["parameters"]["balance"] == "bytes" and doc["parameters"]["exclude_topics"] == "topic-00003"
    assert not [m for m in doc["moves"] if m["topic"] == "topic-00003"]
    assert doc["summary"]["bytes_max_deviation_pct_after"] <= 5.0
    for b in doc["batches"]:
        if b["kind"] == "data":
            touched: dict[int, int] = {}
            moves = {(m["topic"], m["partition"]): m for m in doc["moves"]}
            for t, p in b["partitions"]:
                m = moves[(t, p)]
                for x in set(m["from"]) ^ set(m["to"]):
                    touched[x] = touched.get(x, 0) + 1
            assert max(touched.values()) <= 3
    n_e = 12
    for n, after, ex in zip(doc["topics"]["partitions"], doc["topics"]["max_leaders_per_broker_after"],
                            doc["topics"]["excluded"], strict=True):
        assert ex or after <= math.ceil(n / n_e)


def test_plan_files_list_broker_ids_of_each_row_whatever_its_padding():
    """plan_format's replica lists (ids, not indices; -1 padding left out) for rows of mixed lengths, a gap
    inside a row, and no rows, against lists written out by hand."""
    from types import SimpleNamespace

    from planner.plan_format import _id_lists

    pb = SimpleNamespace(broker_ids=np.array([101, 102, 103, 107], np.int32))
    packed = np.array([[0, 1, 2], [3, -1, -1], [2, 0, -1], [-1, -1, -1]], np.int32)
    assert _id_lists(pb, packed) == [[101, 102, 103], [107], [103, 101], []]
    gap = np.array([[0, -1, 2], [1, 3, -1]], np.int32)
    assert _id_lists(pb, gap) == [[101, 103], [102, 107]]
    assert _id_lists(pb, np.zeros((0, 3), np.int32)) == []


def test_batches_put_each_move_in_the_first_batch_where_its_brokers_have_room():
    """batches._first_fit (it jumps over full batches by per-broker pointers) against the rule applied
    naively: each move, in order, into the first batch where every broker it adds or removes has fewer than
    `limit` moves; random moves over 6 brokers, limits 1-3."""
    from planner.optimizer.batches import _first_fit

    rng = np.random.default_rng(7)
    for limit in (1, 2, 3):
        n, B = 300, 6
        orig = np.array([rng.choice(B, 3, replace=False) for _ in range(n)], np.int32)
        final = orig.copy()
        for i in range(n):
            final[i, rng.integers(3)] = rng.choice([b for b in range(B) if b not in orig[i]])
        loads: list[list[int]] = []
        want: list[int] = []
        for o, f in zip(orig.tolist(), final.tolist(), strict=True):
            touched = (set(o) ^ set(f))
            k = 0
            while True:
                if k == len(loads):
                    loads.append([0] * B)
                if all(loads[k][b] < limit for b in touched):
                    break
                k += 1
            for b in touched:
                loads[k][b] += 1
            want.append(k)
        got = np.zeros(n, np.int64)
        for k, group in enumerate(_first_fit(orig, final, limit, B)):
            got[group] = k
        assert got.tolist() == want
