"""`kplan snapshot` against a real ZooKeeper loaded with hand-written clusters.

Expected values are written by hand from the cluster descriptions below (or, for broker epochs and the
consistency test, read independently from ZooKeeper with kazoo), never computed by the snapshot code.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner import cli, codec, loader, synth
from planner import snapshot_io as sio
from planner import zk as zkmod
from planner.errors import BadInput, CodecError, KraftMigration, NotAKafkaCluster, ZkUnavailable
from planner.snapshot import take_snapshot as _take_snapshot


def take_snapshot(*args, **kwargs):
    """These clusters live in ZooKeeper alone (loaded znodes, no broker listening): no sizes to ask for."""
    kwargs.setdefault("sizes_from", "none")
    return _take_snapshot(*args, **kwargs)

TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"

VARIED = {
    "brokers": [
        {"id": 1, "rack": "r1"},
        {"id": 2, "rack": "r2"},
        {"id": 3, "rack": "r1"},
        {"id": 4},  # no rack
        {"id": 5, "rack": "r2", "config": {"leader.replication.throttled.rate": "1000000",
                                           "follower.replication.throttled.rate": "2000000"}},
        {"id": 9, "alive": False},  # dead: only named in an assignment
    ],
    "broker_defaults": {"min.insync.replicas": "2"},
    "controller": {"id": 2, "epoch": 7},
    "topics": [
        {"name": "orders", "topic_id": TOPIC_ID,
         "config": {"min.insync.replicas": "3", "unclean.leader.election.enable": "true",
                    "leader.replication.throttled.replicas": "2:3,2:1",
                    "follower.replication.throttled.replicas": "2:5"},
         "partitions": [
             {"replicas": [1, 2, 3], "leader": 1, "isr": [1, 2, 3], "leader_epoch": 4},
             {"replicas": [2, 3, 4], "leader": 3, "isr": [3, 2]},  # shrunk ISR, leader moved
             # mid-reassignment from [3, 1, 2] to [3, 1, 5]: Kafka writes TRS ++ (ORS - TRS)
             {"replicas": [3, 1, 5, 2], "adding_replicas": [5], "removing_replicas": [2], "leader": 3,
              "isr": [3, 1, 2]},
         ]},
        {"name": "logs", "version": 2, "partitions": [
            {"replicas": [4], "leader": 4, "isr": [4], "leader_epoch": 2, "leader_recovery_state": 1},
            {"replicas": [9], "leader": -1, "isr": [9]},  # offline: its only replica is dead
            {"replicas": [1, 4], "no_state": True},       # new partition, never had a leader
        ]},
        {"name": "old", "version": 1, "deleting": True, "partitions": [
            {"replicas": [1, 2], "leader": 2, "isr": [2]},
        ]},
    ],
    "reassignment": [{"topic": "orders", "partition": 2, "replicas": [3, 1, 5]}],
    "preferred_election": [{"topic": "orders", "partition": 1}],
}

# (topic, partition, replicas, adding, removing, target, has_state, leader, epoch, isr, ctrl epoch, lrs)
VARIED_ROWS = [
    ("logs", 0, [4], [], [], None, True, 4, 2, [4], 7, 1),
    ("logs", 1, [9], [], [], None, True, -1, 0, [9], 7, 0),
    ("logs", 2, [1, 4], [], [], None, False, -1, -1, [], -1, 0),
    ("old", 0, [1, 2], [], [], None, True, 2, 0, [2], 7, 0),
    ("orders", 0, [1, 2, 3], [], [], None, True, 1, 4, [1, 2, 3], 7, 0),
    ("orders", 1, [2, 3, 4], [], [], None, True, 3, 0, [3, 2], 7, 0),
    ("orders", 2, [3, 1, 5, 2], [5], [2], [3, 1, 5], True, 3, 0, [3, 1, 2], 7, 0),
]
VARIED_FINGERPRINT = "sha256:" + hashlib.sha256(
    b"logs\t0\t4\nlogs\t1\t9\nlogs\t2\t1,4\nold\t0\t1,2\n"
    b"orders\t0\t1,2,3\norders\t1\t2,3,4\norders\t2\t3,1,5,2\n"
).hexdigest()


def _rows(table):
    d = table.to_pydict()
    return [
        (d["topic"][i], d["partition"][i], d["replicas"][i], d["adding_replicas"][i], d["removing_replicas"][i],
         d["target_replicas"][i], d["has_state"][i], d["leader"][i], d["leader_epoch"][i], d["isr"][i],
         d["controller_epoch"][i], d["leader_recovery_state"][i])
        for i in range(table.num_rows)
    ]


def _tree(client, root="/"):
    """Every znode under root with its data and the stat fields any write would change."""
    out = {}
    stack = [root]
    while stack:
        p = stack.pop()
        data, st = client.get(p)
        out[p] = (data, st.mzxid, st.version, st.cversion, st.aversion, st.pzxid, st.numChildren)
        stack.extend((p.rstrip("/") + "/" + c) for c in client.get_children(p))
    return out


@pytest.mark.parametrize("read_mode,workers", [("multiread", 1), ("multiread", 2), ("plain", 1)])
def test_varied_cluster(zk_client, zk_connect, tmp_path, read_mode, workers):
    loader.load_cluster(zk_client, VARIED)
    before = _tree(zk_client)
    res = take_snapshot(zk_connect, tmp_path / "s", read_mode=read_mode, workers=workers)
    assert _tree(zk_client) == before  # a snapshot writes nothing

    snap = sio.read_snapshot(tmp_path / "s")  # the folder is a valid snapshot
    assert _rows(snap.partitions) == VARIED_ROWS
    # state_version is the stat version of a state znode the loader created once: 0; -1 without state.
    assert snap.partitions.column("state_version").to_pylist() == [0, 0, -1, 0, 0, 0, 0]
    assert snap.partitions.column("size_bytes").null_count == 7

    t = snap.topics.to_pydict()
    assert t["topic"] == ["logs", "old", "orders"]
    assert t["topic_id"] == [None, None, TOPIC_ID]
    assert t["znode_version"] == [2, 1, 3]
    assert t["partitions"] == [3, 1, 3]
    assert t["replication_factor"] == [2, 2, 3]
    assert t["min_insync_replicas"] == [2, 2, 3]  # logs and old take the broker default
    assert t["unclean_leader_election"] == [False, False, True]
    assert [json.loads(c) for c in t["config"]] == [
        {}, {}, {"min.insync.replicas": "3", "unclean.leader.election.enable": "true",
                 "leader.replication.throttled.replicas": "2:3,2:1",
                 "follower.replication.throttled.replicas": "2:5"}]
    assert t["leader_throttled_replicas"] == [None, None, "2:3,2:1"]
    assert t["follower_throttled_replicas"] == [None, None, "2:5"]
    assert t["queued_for_deletion"] == [False, True, False]

    b = snap.brokers.to_pydict()
    assert b["broker"] == [1, 2, 3, 4, 5, 9]
    assert b["alive"] == [True, True, True, True, True, False]
    assert b["rack"] == ["r1", "r2", "r1", None, "r2", None]
    assert b["host"] == ["broker-1", "broker-2", "broker-3", "broker-4", "broker-5", None]
    assert b["port"] == [9092] * 5 + [-1]
    assert b["endpoints"][0] == ["PLAINTEXT://broker-1:9092"] and b["endpoints"][5] == []
    czxids = [zk_client.exists(f"/brokers/ids/{i}").czxid for i in range(1, 6)]
    assert b["epoch"] == czxids + [-1]
    assert b["registration_version"] == [5, 5, 5, 5, 5, -1]
    assert b["is_controller"] == [False, True, False, False, False, False]
    assert b["leader_throttle_rate"] == [None, None, None, None, 1_000_000, None]
    assert b["follower_throttle_rate"] == [None, None, None, None, 2_000_000, None]
    assert json.loads(b["config"][4]) == VARIED["brokers"][4]["config"]

    m = snap.manifest
    assert m["format"] == "kplan-snapshot/1"
    assert m["source"] == {"zk": zk_connect.split("/")[0], "chroot": "/" + zk_connect.split("/", 1)[1]}
    assert m["controller"] == {"broker": 2, "epoch": 7, "kraft_controller_epoch": -1}
    assert m["counts"] == {"brokers": 6, "alive_brokers": 5, "topics": 3, "partitions": 7, "replicas": 16,
                           "offline": 1, "under_replicated": 2, "leaderless_new": 1, "state_unknown": 0}
    assert m["fingerprint"] == VARIED_FINGERPRINT
    assert m["broker_defaults"] == {"min.insync.replicas": "2"}
    assert m["reassignment_in_flight"] == [{"topic": "orders", "partition": 2, "replicas": [3, 1, 5]}]
    assert m["preferred_election_pending"] == [{"topic": "orders", "partition": 1}]
    assert m["topics_queued_for_deletion"] == ["old"]
    # broker 9 is named by logs-1's assignment but not registered: the cluster is not healthy, and says so
    assert m["warnings"] == [{"path": "/brokers/topics",
                              "problem": "1 partition has replicas on brokers that are not registered (9)"}]
    assert m["consistency"]["consistent"] is True and m["consistency"]["mode"] == read_mode
    # Every state znode read was last modified at or before the zxid the snapshot stands for.
    newest = max(zk_client.exists(codec.state_path(tp, p)).mzxid for tp, p, *_ in VARIED_ROWS if _[4])
    assert m["zxid"]["min"] <= m["zxid"]["max"] and newest <= m["zxid"]["max"]
    assert res.manifest["fingerprint"] == VARIED_FINGERPRINT


def test_sizes_file_takes_the_largest_replica(zk_client, zk_connect, tmp_path):
    loader.load_cluster(zk_client, {"brokers": [{"id": 1}, {"id": 2}], "topics": [
        {"name": "a", "partitions": [{"replicas": [1, 2]}, {"replicas": [2, 1]}, {"replicas": [1]}]}]})
    doc = {"version": 1, "brokers": [
        {"broker": 1, "logDirs": [{"logDir": "/d1", "error": None, "partitions": [
            {"partition": "a-0", "size": 100, "offsetLag": 0, "isFuture": False},
            {"partition": "a-1", "size": 70, "offsetLag": 30, "isFuture": False},
            {"partition": "gone-3", "size": 5, "offsetLag": 0, "isFuture": False}]}]},
        {"broker": 2, "logDirs": [{"logDir": "/d2", "error": None, "partitions": [
            {"partition": "a-0", "size": 90, "offsetLag": 10, "isFuture": False},
            {"partition": "a-1", "size": 120, "offsetLag": 0, "isFuture": False}]}]}]}
    f = tmp_path / "sizes.txt"
    # kafka-log-dirs.sh prints two status lines before the JSON.
    f.write_text("Querying brokers for log directories information\n"
                 "Received log directory information from brokers 1,2\n" + json.dumps(doc) + "\n")
    res = take_snapshot(zk_connect, tmp_path / "s", sizes=f)
    assert res.partitions.column("size_bytes").to_pylist() == [100, 120, None]
    assert any("1 replica sizes" in w["problem"] for w in res.manifest["warnings"])


def test_sizes_from_log_dirs_json(zk_client, zk_connect, tmp_path):
    from planner.cluster import log_dirs_json, parse_cluster

    desc = {"brokers": [{"id": 1}, {"id": 2}, {"id": 3}], "topics": [
        {"name": "x", "partitions": [{"replicas": [1, 2, 3], "size_bytes": 5_000_000_000},
                                     {"replicas": [3, 2], "size_bytes": 0}]}]}
    loader.load_cluster(zk_client, desc)
    f = tmp_path / "sizes.json"
    f.write_text(json.dumps(log_dirs_json(parse_cluster(desc))))
    res = take_snapshot(zk_connect, tmp_path / "s", sizes=f)
    assert res.partitions.column("size_bytes").to_pylist() == [5_000_000_000, 0]


def test_bad_sizes_file_fails_before_reading(zk_server, tmp_path):
    f = tmp_path / "sizes.json"
    f.write_text('{"version":1,"brokers":[{"broker":1,"logDirs":[{"partitions":[{"partition":"nodash","size":1}]}]}]}')
    with pytest.raises(BadInput, match="nodash"):
        # An unreachable port: the file is checked first, so this fails fast with the file's problem.
        take_snapshot("127.0.0.1:1/x", tmp_path / "s", sizes=f)
    assert not (tmp_path / "s").exists()


# ------------------------------------------------------------------------------------ consistency
def _set_epoch(client, topic, p, epoch, isr):
    st = codec.PartitionState(leader=isr[0], leader_epoch=epoch, controller_epoch=1, isr=isr)
    return client.set(codec.state_path(topic, p), codec.encode_partition_state(st))


@pytest.mark.parametrize("read_mode", ["multiread", "plain"])
def test_change_after_read_is_reread(zk_client, zk_connect, tmp_path, read_mode):
    """A state written after the snapshot read it (but before it finished) ends up in the snapshot."""
    loader.load_cluster(zk_client, {"brokers": [{"id": 1}, {"id": 2}], "topics": [
        {"name": "a", "partitions": [{"replicas": [1, 2]}] * 4},
        {"name": "b", "partitions": [{"replicas": [2, 1]}] * 3}]})

    def progress(msg):
        if msg.startswith("checking for changes"):  # everything has been read once
            _set_epoch(zk_client, "a", 2, 9, [2])
            zk_client.delete("/brokers/ids/1")       # broker 1 dies
            loader.create_many(zk_client, [(codec.topic_path("c"), codec.encode_topic(
                codec.TopicAssignment({0: [2]}))), (codec.topic_config_path("c"), codec.encode_config({}))])

    res = take_snapshot(zk_connect, tmp_path / "s", progress=progress, read_mode=read_mode)
    p = res.partitions.to_pydict()
    assert list(zip(p["topic"], p["partition"], p["leader"], p["leader_epoch"], p["isr"], strict=True)) == [
        ("a", 0, 1, 0, [1, 2]), ("a", 1, 1, 0, [1, 2]), ("a", 2, 2, 9, [2]), ("a", 3, 1, 0, [1, 2]),
        ("b", 0, 2, 0, [2, 1]), ("b", 1, 2, 0, [2, 1]), ("b", 2, 2, 0, [2, 1]),
        ("c", 0, -1, -1, []),  # created after the first read, with no state yet
    ]
    assert res.brokers.column("alive").to_pylist() == [False, True]
    c = res.manifest["consistency"]
    assert c["rounds"] >= 1 and c["rereads"] >= 4 and c["consistent"]


@pytest.mark.parametrize("read_mode", ["multiread", "plain"])
def test_concurrent_writer_gives_the_state_at_one_zxid(zk_client, zk_connect, tmp_path, read_mode):
    """A writer sweeps new leader epochs over all partitions while the snapshot runs. Whatever moment the
    snapshot settles on, every partition must show exactly the last write at or before manifest zxid.max
    (the writes' own zxids are recorded from ZooKeeper's answers, independently of the snapshot)."""
    n = 120
    loader.load_cluster(zk_client, {"brokers": [{"id": 1}, {"id": 2}], "topics": [
        {"name": "w", "partitions": [{"replicas": [1, 2]}] * n}]})
    writes: list[tuple[int, int, int]] = []   # (mzxid, partition, epoch)
    started = threading.Event()
    writer_client = zkmod.connect(zk_connect)

    def writer():
        try:
            for gen in range(1, 6):
                for p in range(n):
                    st = _set_epoch(writer_client, "w", p, gen, [1, 2] if gen % 2 else [2, 1])
                    writes.append((st.mzxid, p, gen))
                    started.set()
        finally:
            started.set()

    thread = threading.Thread(target=writer)

    def progress(msg):
        if msg.startswith("reading ") and "partition states" in msg and not thread.is_alive() and not writes:
            thread.start()
            assert started.wait(30)

    try:
        res = take_snapshot(zk_connect, tmp_path / "s", read_mode=read_mode, max_rounds=100_000,
                            progress=progress)
    finally:
        thread.join()
        writer_client.stop()
        writer_client.close()
    m = res.manifest
    assert m["consistency"]["consistent"] and m["consistency"]["rounds"] >= 1
    cut = m["zxid"]["max"]
    expected = [0] * n
    for z, p, gen in sorted(writes):
        if z <= cut:
            expected[p] = gen
    assert res.partitions.column("leader_epoch").to_pylist() == expected
    isr = res.partitions.column("isr").to_pylist()
    assert isr == [[1, 2] if e % 2 else ([2, 1] if e else [1, 2]) for e in expected]


def test_a_cluster_that_never_settles_is_flagged(zk_client, zk_connect, tmp_path):
    loader.load_cluster(zk_client, {"brokers": [{"id": 1}], "topics": [
        {"name": "busy", "partitions": [{"replicas": [1]}] * 3}]})
    epoch = iter(range(1, 100))

    def progress(msg):
        # Every read of the topic's states (first read and each re-read) is followed by another change.
        if msg.startswith("reading ") and "partition states" in msg:
            _set_epoch(zk_client, "busy", 1, next(epoch), [1])

    res = take_snapshot(zk_connect, tmp_path / "s", progress=progress, max_rounds=2)
    c = res.manifest["consistency"]
    assert c == {"rereads": c["rereads"], "rounds": 2, "consistent": False, "mode": "multiread"}
    [w] = res.manifest["warnings"]
    assert "kept changing" in w["problem"] and "/brokers/topics/busy/partitions/1/state" in w["problem"]
    assert sio.read_snapshot(tmp_path / "s").manifest["consistency"]["consistent"] is False


# ------------------------------------------------------------------------------------ bad input
def test_malformed_state_names_the_znode_or_is_skipped(zk_client, zk_connect, tmp_path):
    loader.load_cluster(zk_client, {"brokers": [{"id": 1}], "topics": [
        {"name": "t", "partitions": [{"replicas": [1]}, {"replicas": [1]}, {"replicas": [1]}]}]})
    zk_client.set("/brokers/topics/t/partitions/1/state", b'{"leader":"one","isr":[1]}')
    with pytest.raises(CodecError, match="/brokers/topics/t/partitions/1/state"):
        take_snapshot(zk_connect, tmp_path / "strict")
    assert not (tmp_path / "strict" / "manifest.json").exists()

    # lenient: the partition's assignment is known, so it is kept, with its state marked unknown
    res = take_snapshot(zk_connect, tmp_path / "lenient", lenient=True)
    assert res.partitions.column("partition").to_pylist() == [0, 1, 2]
    errors = res.partitions.column("state_error").to_pylist()
    assert errors[0] is None and errors[2] is None and "'leader' must be an integer" in errors[1]
    w, unknown = res.manifest["warnings"]
    assert w["path"] == "/brokers/topics/t/partitions/1/state" and "leader" in w["problem"]
    assert "1 partition with an unknown state" in unknown["problem"]
    assert res.manifest["counts"]["state_unknown"] == 1 and res.manifest["counts"]["offline"] == 0
    assert sio.read_snapshot(tmp_path / "lenient").manifest["warnings"] == [w, unknown]


@pytest.mark.parametrize("path,data,what", [
    ("/brokers/topics/bad", b"not json", "not valid JSON"),
    ("/brokers/topics/bad", b'{"version":3,"partitions":{"0":[1,1]}}', "twice"),
    ("/brokers/topics/bad", b'{"version":3,"partitions":{"x":[1]}}', "not a non-negative integer"),
    ("/config/topics/bad", b'{"version":1,"config":{"min.insync.replicas":2}}', "must be a string"),
    ("/config/topics/bad", b'{"version":1,"config":{"min.insync.replicas":"two"}}', "not an integer"),
])
def test_malformed_topic_names_the_znode_or_is_skipped(zk_client, zk_connect, tmp_path, path, data, what):
    loader.load_cluster(zk_client, {"brokers": [{"id": 1}], "topics": [
        {"name": "bad", "partitions": [{"replicas": [1]}]}, {"name": "good", "partitions": [{"replicas": [1]}]}]})
    zk_client.set(path, data)
    with pytest.raises(CodecError) as e:
        take_snapshot(zk_connect, tmp_path / "strict")
    assert e.value.path == path and what in e.value.problem
    res = take_snapshot(zk_connect, tmp_path / "lenient", lenient=True)
    assert res.topics.column("topic").to_pylist() == ["good"]
    assert res.partitions.column("topic").to_pylist() == ["good"]
    assert [w["path"] for w in res.manifest["warnings"]] == [path]


def test_reassignment_with_log_dirs_is_an_error(zk_client, zk_connect, tmp_path):
    loader.load_cluster(zk_client, {"brokers": [{"id": 1}, {"id": 2}], "topics": [
        {"name": "t", "partitions": [{"replicas": [1]}]}]})
    zk_client.create(codec.REASSIGN, b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2],'
                                     b'"log_dirs":["any"]}]}')
    assert cli.main(["snapshot", "--zk", zk_connect, "--out", str(tmp_path / "s")]) == 2
    assert not (tmp_path / "s" / "manifest.json").exists()
    res = take_snapshot(zk_connect, tmp_path / "l", lenient=True)
    assert res.manifest["reassignment_in_flight"] == []
    [w] = res.manifest["warnings"]
    assert w["path"] == "/admin/reassign_partitions" and "log_dirs" in w["problem"]


def test_topic_without_any_state_is_leaderless_new(zk_client, zk_connect, tmp_path):
    loader.load_cluster(zk_client, {"brokers": [{"id": 1}, {"id": 2}], "topics": [
        {"name": "fresh", "partitions": [{"replicas": [1, 2], "no_state": True},
                                         {"replicas": [2, 1], "no_state": True}]}]})
    zk_client.delete("/brokers/topics/fresh/partitions")  # not even the partitions folder exists yet
    res = take_snapshot(zk_connect, tmp_path / "s")
    p = res.partitions.to_pydict()
    assert p["has_state"] == [False, False] and p["leader"] == [-1, -1] and p["isr"] == [[], []]
    assert res.manifest["counts"]["leaderless_new"] == 2 and res.manifest["counts"]["offline"] == 0


# /migration and /controller as Kafka 3.9.2 wrote them in the migration sandbox (tests/test_zk_migration.py)
PRE = b'{"version":0,"kraft_metadata_offset":-1,"kraft_controller_id":-1,"kraft_metadata_epoch":-1,"kraft_controller_epoch":-1}'
DONE = b'{"version":0,"kraft_metadata_offset":303,"kraft_controller_id":1000,"kraft_metadata_epoch":1,"kraft_controller_epoch":1}'
KRAFT_CONTROLLER = b'{"version":2,"brokerid":1000,"timestamp":"1795676882424","kraftControllerEpoch":1}'


@pytest.mark.parametrize("how, phase", [("controller", "initial metadata load"), ("no-zk-brokers", "dual-write")])
def test_kraft_migration_led_by_kraft_is_refused_naming_the_state(zk_client, zk_connect, tmp_path, capsys, how,
                                                                   phase):
    loader.load_cluster(zk_client, {"brokers": [{"id": 1}], "topics": []}, controller=False)
    if how == "controller":   # the KRaft controller claimed /controller, the metadata load not finished
        zk_client.create(codec.CONTROLLER, KRAFT_CONTROLLER)
        zk_client.create(codec.MIGRATION, PRE)
    else:
        zk_client.create(codec.CONTROLLER, KRAFT_CONTROLLER)
        zk_client.create(codec.MIGRATION, DONE)
    if how == "no-zk-brokers":
        zk_client.delete("/brokers/ids/1")
    with pytest.raises(KraftMigration, match=f"state MIGRATION, {phase} phase .KRaft controller 1000 .epoch 1. is "
                                             "the controller") as e:
        take_snapshot(zk_connect, tmp_path / "s")
    assert ("read it again once /migration records the copy" if how == "controller"
            else "read the cluster through its bootstrap servers") in str(e.value)
    assert e.value.migration.authoritative == "kraft"
    assert cli.main(["snapshot", "--zk", zk_connect, "--out", str(tmp_path / "c")]) == 1
    assert f"MIGRATION, {phase} phase" in capsys.readouterr().err
    assert not (tmp_path / "c" / "manifest.json").exists()


def test_pre_migration_is_read_through_zookeeper_and_says_so(zk_client, zk_connect, tmp_path):
    """PRE_MIGRATION: the KRaft controller created /migration and waits for the brokers; the ZooKeeper controller
    (broker 1) still runs the cluster, so ZooKeeper is read (planner.zk_migration)."""
    loader.load_cluster(zk_client, {"brokers": [{"id": 1}, {"id": 2}], "topics": [
        {"name": "t", "partitions": [{"replicas": [1, 2], "leader": 2, "isr": [2]}]}]}, controller=False)
    zk_client.create(codec.CONTROLLER, b'{"version":2,"brokerid":1,"timestamp":"1","kraftControllerEpoch":-1}')
    zk_client.create(codec.MIGRATION, PRE)
    res = take_snapshot(zk_connect, tmp_path / "s")
    assert res.manifest["source"]["migration"] == {
        "state": "PRE_MIGRATION", "phase": "pre-migration", "authoritative": "zookeeper", "kraft_controller_id": -1,
        "kraft_controller_epoch": -1, "kraft_metadata_offset": -1, "zk_controller": 1, "zk_brokers": 2}
    assert res.partitions.to_pydict()["leader"] == [2] and res.partitions.to_pydict()["isr"] == [[2]]


def test_no_kafka_in_chroot(zk_client, zk_connect, tmp_path, capsys):
    loader.load_cluster(zk_client, {"brokers": [{"id": 1}], "topics": []})
    with pytest.raises(NotAKafkaCluster, match="no Kafka cluster"):
        take_snapshot(zk_connect + "/nothing-here", tmp_path / "s")
    assert cli.main(["snapshot", "--zk", zk_connect.rsplit("/", 1)[0] + "/absent", "--out", str(tmp_path / "c")]) == 2
    assert "no Kafka cluster" in capsys.readouterr().err


def test_unreachable_zookeeper_fails_in_bounded_time(tmp_path, capsys):
    with socket.socket() as s:   # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    rc = cli.main(["snapshot", "--zk", f"127.0.0.1:{port}", "--out", str(tmp_path / "s"), "--timeout", "2"])
    assert rc == 2 and time.monotonic() - started < 15
    assert "could not connect" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()
    with pytest.raises(ZkUnavailable):
        take_snapshot(f"127.0.0.1:{port}", tmp_path / "s", timeout=1)


def test_digest_auth(zk_server, zk_chroot, tmp_path, monkeypatch, capsys):
    acl = [zkmod.digest_acl("kplan", "s3cret")]
    client = zkmod.connect(zk_server.connect_string, auth=("kplan", "s3cret"))
    try:
        client.default_acl = acl
        client.ensure_path(zk_chroot)
        client.chroot = zk_chroot
        loader.load_cluster(client, {"brokers": [{"id": 1, "rack": "r"}], "topics": [
            {"name": "secret", "partitions": [{"replicas": [1]}]}]})
        assert client.get_acls("/brokers/topics/secret/partitions/0/state")[0] == acl
        connect = zk_server.connect_string + zk_chroot
        monkeypatch.setenv("MY_ZK_AUTH", "kplan:s3cret")
        assert cli.main(["snapshot", "--zk", connect, "--out", str(tmp_path / "ok"), "--zk-auth-env",
                         "MY_ZK_AUTH", "--no-sizes"]) == 0
        assert "s3cret" not in (tmp_path / "ok" / "manifest.json").read_text()
        assert sio.read_snapshot(tmp_path / "ok").partitions.column("leader").to_pylist() == [1]
        monkeypatch.setenv("KPLAN_ZK_AUTH", "kplan:wrong")
        capsys.readouterr()
        assert cli.main(["snapshot", "--zk", connect, "--out", str(tmp_path / "bad")]) == 2
        assert "NOAUTH" in capsys.readouterr().err
        monkeypatch.delenv("KPLAN_ZK_AUTH")
        with pytest.raises(BadInput, match="without credentials.*NOAUTH"):
            take_snapshot(connect, tmp_path / "none")
        assert not (tmp_path / "bad" / "manifest.json").exists()
        assert cli.main(["snapshot", "--zk", connect, "--out", str(tmp_path / "x"), "--zk-auth-env",
                         "UNSET_VAR_FOR_TEST"]) == 2
    finally:
        client.stop()
        client.close()


def test_failed_snapshot_leaves_no_manifest(zk_client, zk_connect, tmp_path):
    loader.load_cluster(zk_client, {"brokers": [{"id": 1}], "topics": [{"name": "t", "partitions": [
        {"replicas": [1]}]}]})
    out = tmp_path / "s"
    take_snapshot(zk_connect, out)
    zk_client.set("/brokers/topics/t/partitions/0/state", b"{")
    with pytest.raises(CodecError):
        take_snapshot(zk_connect, out)
    # Reading failed before anything was written: the previous complete snapshot is untouched.
    assert sio.read_snapshot(out).partitions.num_rows == 1
    # A failure while writing over it leaves the folder without a manifest (incomplete), not a mix.
    zk_client.set("/brokers/topics/t/partitions/0/state", codec.encode_partition_state(
        codec.PartitionState(1, 3, 1, [1])))
    (out / "partitions.parquet").unlink()
    (out / "partitions.parquet").mkdir()
    with pytest.raises(OSError):
        take_snapshot(zk_connect, out)
    assert not (out / "manifest.json").exists()
    with pytest.raises(BadInput, match="no manifest.json"):
        sio.read_snapshot(out)


def test_cli_summary(zk_client, zk_connect, tmp_path, capsys):
    loader.load_cluster(zk_client, VARIED)
    assert cli.main(["snapshot", "--zk", zk_connect, "--out", str(tmp_path / "s"), "--no-sizes"]) == 0
    out, err = capsys.readouterr()
    assert "brokers alive   5 (no rack: 4; r1: 1,3; r2: 2,5)" in out
    assert "brokers dead    1 (no rack: 9)" in out
    assert "controller      broker 2, epoch 7" in out
    assert "offline         1" in out and "under-replicated 2" in out and "leaderless-new  1" in out
    assert "orders-2->[3, 1, 5]" in out
    assert VARIED_FINGERPRINT in out
    assert "reading" in err  # progress on stderr
    assert cli.main(["snapshot", "--zk", zk_connect, "--out", str(tmp_path / "w"), "--workers", "0"]) == 2


# ------------------------------------------------------------------------------------ property
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), brokers=st.integers(3, 8), partitions=st.integers(1, 120),
       shrink=st.floats(0, 0.5))
def test_snapshot_reproduces_random_clusters(zk_server, tmp_path, seed, brokers, partitions, shrink):
    c = synth.synth_cluster(brokers=brokers, partitions=partitions, rf=[1, 2, 3], racks=2,
                            partitions_per_topic=7, seed=seed, shrunk_isr_fraction=shrink,
                            moved_leader_fraction=0.3)
    desc = synth.to_description(c)
    chroot = f"/prop{os.getpid()}_{seed}_{brokers}_{partitions}_{int(shrink * 1000)}"
    root = zkmod.connect(zk_server.connect_string)
    try:
        if root.exists(chroot):
            root.delete(chroot, recursive=True)
    finally:
        root.stop()
        root.close()
    client = zkmod.connect(zk_server.connect_string + chroot)
    try:
        loader.load_cluster(client, desc)
        out = tmp_path / f"s{seed}_{brokers}_{partitions}"
        res = take_snapshot(zk_server.connect_string + chroot, out)
    finally:
        client.stop()
        client.close()
    rows = []
    for t in desc["topics"]:
        for i, p in enumerate(t["partitions"]):
            rows.append((t["name"], i, p["replicas"], p["leader"], p["isr"]))
    rows.sort()
    got = res.partitions.to_pydict()
    assert list(zip(got["topic"], got["partition"], got["replicas"], got["leader"], got["isr"], strict=True)) == rows
    lines = "".join(f"{t}\t{p}\t{','.join(map(str, r))}\n" for t, p, r, _, _ in rows)
    assert res.manifest["fingerprint"] == "sha256:" + hashlib.sha256(lines.encode()).hexdigest()
    table = pq.read_table(out / "partitions.parquet")
    assert table.num_rows == len(rows)
    assert np.array_equal(res.brokers.column("broker").to_numpy(), np.arange(1, brokers + 1))
