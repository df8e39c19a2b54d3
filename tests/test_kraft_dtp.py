"""DescribeTopicPartitions answers read into columns (planner/kraft_dtp.py) agree with kafka-python's own decoder
on every field of every partition: answers encoded by kafka-python's generated classes from Kafka's JSON schema
(random clusters: replication factors 1-6, empty and null ELR / last-known ELR, offline replicas, partition and
topic errors, a topic split over two pages, the next cursor present or null), a partition carrying a tagged
field (hand-made bytes), and lists of 127+ ids (a two-byte length: kafka-python's decoder takes over). Real
brokers' answers are compared in tests/test_kraft_sandbox.py."""

from __future__ import annotations

import random
import uuid

import numpy as np
import pytest
from kafka.protocol.admin import DescribeTopicPartitionsResponse as R

from planner import kraft_dtp as dtp

T = R.DescribeTopicPartitionsResponseTopic
P = T.DescribeTopicPartitionsResponsePartition


def part(rng: random.Random, index: int, big: bool = False) -> P:
    n = 130 if big else rng.randint(1, 6)
    replicas = rng.sample(range(1, 400), n)
    isr = replicas[:rng.randint(0, n)]
    elr = rng.choice([None, [], replicas[len(isr):][:1]])
    lke = rng.choice([None, [], replicas[-1:]])
    return P(error_code=rng.choice([0] * 20 + [5]), partition_index=index, leader_id=isr[0] if isr else -1,
             leader_epoch=rng.randint(-1, 1000), replica_nodes=replicas, isr_nodes=isr,
             eligible_leader_replicas=elr, last_known_elr=lke, offline_replicas=rng.choice([[], replicas[-1:]]))


def answer(topics: list[tuple[str, list[P]]], cursor: tuple[str, int] | None, error: int = 0) -> bytes:
    resp = R(throttle_time_ms=3, topics=[
        T(error_code=error, name=name, topic_id=uuid.uuid5(uuid.NAMESPACE_URL, name), is_internal=name[0] == "_",
          partitions=parts, topic_authorized_operations=-2147483648) for name, parts in topics],
        next_cursor=None if cursor is None else R.Cursor(topic_name=cursor[0], partition_index=cursor[1]))
    return bytes(resp.encode(version=0))


def columns(s: dtp.Sweep) -> dict:
    return {"topics": s.topics, "ids": s.topic_ids, "internal": s.internal, "problems": sorted(s.problems),
            "t": s.t.tolist(), "p": s.partition.tolist(), "error": s.error.tolist(), "leader": s.leader.tolist(),
            "epoch": s.leader_epoch.tolist(), "cursors": s.cursors,
            **{k: [v.row(i) for i in range(len(s))] for k, v in s.lists.items()}}


@pytest.mark.parametrize("seed", range(6))
def test_the_fast_reader_equals_kafka_pythons_decoder(seed):
    rng = random.Random(seed)
    names = sorted({f"t{rng.randint(0, 999):03d}" for _ in range(30)} | {"__consumer_offsets"})
    topics = [(n, [part(rng, i) for i in range(rng.randint(1, 40))]) for n in names]
    # two pages, the middle topic split between them (as Kafka pages by its cursor)
    mid = len(topics) // 2
    name, parts = topics[mid]
    cut = len(parts) // 2
    pages = [answer(topics[:mid] + [(name, parts[:cut])], (name, cut)),
             answer([(name, parts[cut:])] + topics[mid + 1:], None)]
    fast, slow = dtp.decode(pages), dtp._slow(pages)
    assert fast.fast and not slow.fast
    assert columns(fast) == columns(slow)
    assert len(fast) == sum(len(p) for _, p in topics) and fast.cursors == ((name, cut), None)
    # the dict form kraft_admin.describe_topic_partitions gives, from kafka-python's objects, independently
    want = {(n, p.partition_index): {
        "leader": p.leader_id, "leader_epoch": p.leader_epoch, "replicas": list(p.replica_nodes),
        "isr": list(p.isr_nodes), "elr": p.eligible_leader_replicas, "last_known_elr": p.last_known_elr,
        "offline_replicas": list(p.offline_replicas), "error": "LeaderNotAvailableError" if p.error_code else None}
        for n, ps in topics for p in ps}
    got = {k: {f: v[f] for f in want[k]} for k, v in fast.as_dicts().items()}
    assert got == want
    # the columns a snapshot table is made of, with null kept apart from []
    elr = fast.lists["elr"].arrow().to_pylist()
    assert elr == [want[(fast.topics[t], p)]["elr"] for t, p in zip(fast.t, fast.partition, strict=True)]
    assert any(v is None for v in elr) and any(v == [] for v in elr)


def test_rows_come_sorted_whatever_the_order_of_the_answers():
    rng = random.Random(7)
    a = answer([("b", [part(rng, 1), part(rng, 0)])], None)
    z = answer([("a", [part(rng, 0)])], None)
    s = dtp.decode([a, z])
    assert s.topics == ["a", "b"] and s.t.tolist() == [0, 1, 1] and s.partition.tolist() == [0, 0, 1]
    assert columns(s) == columns(dtp._slow([a, z]))


def test_a_partition_with_a_tagged_field_is_read_past_it():
    rng = random.Random(1)
    p = part(rng, 0)
    plain = answer([("a", [p, part(rng, 1)])], None)
    # the first partition starts after ThrottleTimeMs, the topic count, ErrorCode, Name "a", TopicId, IsInternal
    # and the partition count (4 + 1 + 2 + 2 + 16 + 1 + 1); its last byte is its tagged-field count, 0
    lists = (p.replica_nodes, p.isr_nodes, p.eligible_leader_replicas, p.last_known_elr, p.offline_replicas)
    at = 27 + 14 + sum(1 + 4 * len(v or ()) for v in lists)
    assert plain[at] == 0
    tagged = plain[:at] + b"\x01\x05\x02\xab\xcd" + plain[at + 1:]   # one field: tag 5, 2 bytes
    fast, slow = dtp.decode([tagged]), dtp._slow([tagged])
    assert fast.fast and columns(fast) == columns(slow)
    assert {k: v for k, v in columns(fast).items()} == columns(dtp.decode([plain]))


def test_a_list_of_130_ids_falls_back_to_kafka_python_and_a_torn_answer_fails():
    rng = random.Random(2)
    body = answer([("a", [part(rng, 0), part(rng, 1, big=True)])], None)
    s = dtp.decode([body])
    assert not s.fast and len(s.lists["replicas"].row(1)) == 130
    assert columns(s) == columns(dtp._slow([body]))
    with pytest.raises(Exception):   # noqa: B017 - kafka-python's own error for a torn answer
        dtp.decode([body[:-7]])


def test_a_topic_error_is_named():
    rng = random.Random(3)
    s = dtp.decode([answer([("a", [part(rng, 0)]), ("b", [])], None, error=0),
                    answer([("c", [])], None, error=3)])
    assert "c: UnknownTopicOrPartitionError" in s.problems and s.topics == ["a", "b", "c"]


def test_same_state_sees_an_isr_change_and_ignores_null_versus_empty():
    rng = random.Random(4)
    parts = [part(rng, i) for i in range(5)]
    a = dtp.decode([answer([("a", parts)], None)])
    b = dtp.decode([answer([("a", parts)], None)])
    assert a.same_state(b) and a is not b
    changed = list(parts)
    p = parts[2]
    changed[2] = P(error_code=p.error_code, partition_index=2, leader_id=p.leader_id, leader_epoch=p.leader_epoch,
                   replica_nodes=p.replica_nodes, isr_nodes=p.replica_nodes[:1] if len(p.isr_nodes) != 1 else
                   p.replica_nodes, eligible_leader_replicas=p.eligible_leader_replicas,
                   last_known_elr=p.last_known_elr, offline_replicas=p.offline_replicas)
    assert not a.same_state(dtp.decode([answer([("a", changed)], None)]))
    assert np.array_equal(a.partition, np.arange(5))


def configs_answer(version: int = 4) -> bytes:
    from kafka.protocol.admin import DescribeConfigsResponse as CR

    res, entry = CR.DescribeConfigsResult, CR.DescribeConfigsResult.DescribeConfigsResourceResult

    def e(name: str, value: str | None, source: int, sensitive: bool = False):
        return entry(name=name, value=value, read_only=False, config_source=source, is_sensitive=sensitive,
                     synonyms=[], config_type=2, documentation=None)

    topics = [
        res(error_code=0, error_message=None, resource_type=2, resource_name="orders", configs=[
            e("cleanup.policy", "compact", 1), e("min.insync.replicas", "2", 1), e("retention.ms", "604800000", 5),
            e("segment.bytes", "1073741824", 4), e("x." + "long" * 40, "v" * 300, 1)]),
        res(error_code=0, error_message=None, resource_type=2, resource_name="plain", configs=[
            e("retention.ms", "604800000", 5), e("min.insync.replicas", "1", 3)]),
        res(error_code=0, error_message=None, resource_type=2, resource_name="secret",
            configs=[e("some.password", None, 1, sensitive=True), e("unclean.leader.election.enable", "true", 1)]),
        res(error_code=3, error_message="This server does not host this topic-partition.", resource_type=2,
            resource_name="gone", configs=[]),
    ]
    return bytes(CR(throttle_time_ms=0, results=topics).encode(version=version))


@pytest.mark.parametrize("version", [4, 3])
def test_topic_overrides_are_read_from_the_answers_bytes(version):
    body = configs_answer(version)
    got = dtp.topic_overrides(version, body)
    # each topic's own overrides (ConfigSource TOPIC_CONFIG = 1), worked out from the answer above by hand
    assert got == ({"orders": {"cleanup.policy": "compact", "min.insync.replicas": "2", "x." + "long" * 40: "v" * 300},
                    "plain": {}, "secret": {"unclean.leader.election.enable": "true"}},
                   {"gone": "UnknownTopicOrPartitionError (This server does not host this topic-partition.)"})
    assert got == dtp._overrides_slow(version, body)
    if version == 4:
        assert dtp._overrides_fast(body) == got       # the fast reader itself (a 2-byte string length included)


def test_the_partition_block_holds_the_sweep_and_the_reassignments_rows():
    """planner.admin_reader builds the snapshot's partition block from a sweep's columns: every row its
    partition's state, the reassignment's adding / removing replicas only on the rows being moved."""
    from planner.admin_reader import AdminClusterReader

    rng = random.Random(5)
    parts = {"b": [part(rng, i) for i in range(3)], "a": [part(rng, i) for i in range(2)]}
    s = dtp.decode([answer(sorted(parts.items()), None)])
    moving = {("b", 2): {"adding": [7, 8], "removing": [3]}, ("a", 0): {"adding": [9], "removing": []},
              ("zz", 0): {"adding": [1], "removing": []}}             # a topic the sweep does not have
    topics = AdminClusterReader("k:9092")._topics(s, moving, {"a": {"cleanup.policy": "compact"}, "b": {}})
    t = topics["a"].block.table.to_pydict()
    rows = list(zip(t["_t"], t["partition"], strict=True))
    assert rows == [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]
    assert t["adding_replicas"] == [[9], [], [], [], [7, 8]] and t["removing_replicas"] == [[], [], [], [], [3]]
    want = {("a" if ti == 0 else "b", p): parts["a" if ti == 0 else "b"][p] for ti, p in rows}
    assert t["replicas"] == [list(want[k].replica_nodes) for k in want]
    assert t["elr"] == [want[k].eligible_leader_replicas for k in want]
    assert t["leader"] == [want[k].leader_id for k in want]
    assert dict(topics["a"].config) == {"cleanup.policy": "compact"} and dict(topics["b"].config) == {}
