"""The cluster description and the loader: validation, Kafka's exact bytes in a real ZooKeeper, chroots,
ephemeral brokers."""

from __future__ import annotations

import re

import pytest
from kazoo.exceptions import NodeExistsError

from planner import loader
from planner import zk as zkmod
from planner.cluster import load_description, parse_cluster
from planner.errors import BadInput, CodecError

DESC = {
    "brokers": [{"id": 1, "rack": "r1"}, {"id": 2}, {"id": 3, "rack": "r2", "alive": False,
                                                    "config": {"leader.replication.throttled.rate": "100"}}],
    "broker_defaults": {"min.insync.replicas": "2"},
    "controller": {"id": 2, "epoch": 5},
    "topics": [
        {"name": "t", "topic_id": "Ofg7kmlhTrGhrcRsNZ2hRA", "config": {"min.insync.replicas": "1"},
         "partitions": [{"replicas": [1, 2], "leader": 2, "isr": [2, 1], "leader_epoch": 3},
                        {"replicas": [2, 1]}]},
        {"name": "u", "version": 2, "deleting": True, "partitions": [
            {"replicas": [1, 3, 2], "adding_replicas": [3], "removing_replicas": [2], "leader": 1, "isr": [1]},
            {"replicas": [3], "no_state": True}]},
        {"name": "v", "version": 1, "partitions": [{"replicas": [3], "leader": 3, "isr": [3],
                                                    "leader_recovery_state": 1}]},
    ],
    "reassignment": [{"topic": "u", "partition": 0, "replicas": [1, 3]}],
    "preferred_election": [{"topic": "t", "partition": 0}],
}

# What Kafka 3.x writes for each znode, literally (timestamps masked as T).
EXPECTED = {
    "/brokers/ids/1": b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
                      b'"endpoints":["PLAINTEXT://broker-1:9092"],"rack":"r1","jmx_port":-1,"port":9092,'
                      b'"host":"broker-1","version":5,"timestamp":"T"}',
    "/brokers/ids/2": b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
                      b'"endpoints":["PLAINTEXT://broker-2:9092"],"jmx_port":-1,"port":9092,'
                      b'"host":"broker-2","version":5,"timestamp":"T"}',
    "/controller": b'{"version":2,"brokerid":2,"timestamp":"T","kraftControllerEpoch":-1}',
    "/controller_epoch": b"5",
    "/brokers/topics/t": b'{"version":3,"partitions":{"0":[1,2],"1":[2,1]},"adding_replicas":{},'
                         b'"removing_replicas":{},"topic_id":"Ofg7kmlhTrGhrcRsNZ2hRA"}',
    "/brokers/topics/u": b'{"version":2,"partitions":{"0":[1,3,2],"1":[3]},"adding_replicas":{"0":[3]},'
                         b'"removing_replicas":{"0":[2]}}',
    "/brokers/topics/v": b'{"version":1,"partitions":{"0":[3]}}',
    "/brokers/topics/t/partitions": b"",
    "/brokers/topics/t/partitions/0": b"",
    "/brokers/topics/t/partitions/0/state":
        b'{"controller_epoch":5,"leader":2,"version":1,"leader_epoch":3,"isr":[2,1]}',
    "/brokers/topics/t/partitions/1/state":
        b'{"controller_epoch":5,"leader":2,"version":1,"leader_epoch":0,"isr":[2,1]}',
    "/brokers/topics/u/partitions/0/state":
        b'{"controller_epoch":5,"leader":1,"version":1,"leader_epoch":0,"isr":[1]}',
    "/brokers/topics/v/partitions/0/state":
        b'{"controller_epoch":5,"leader":3,"version":1,"leader_epoch":0,"isr":[3],"leader_recovery_state":1}',
    "/config/topics/t": b'{"version":1,"config":{"min.insync.replicas":"1"}}',
    "/config/topics/u": b'{"version":1,"config":{}}',
    "/config/brokers/<default>": b'{"version":1,"config":{"min.insync.replicas":"2"}}',
    "/config/brokers/3": b'{"version":1,"config":{"leader.replication.throttled.rate":"100"}}',
    "/admin/reassign_partitions": b'{"version":1,"partitions":[{"topic":"u","partition":0,"replicas":[1,3]}]}',
    "/admin/preferred_replica_election": b'{"version":1,"partitions":[{"topic":"t","partition":0}]}',
    "/admin/delete_topics/u": b"",
}


def _mask(data: bytes) -> bytes:
    return re.sub(rb'"timestamp":"\d+"', b'"timestamp":"T"', data)


def test_loaded_znodes_are_kafkas_bytes(zk_client):
    loader.load_cluster(zk_client, DESC)
    for path, want in EXPECTED.items():
        data, _ = zk_client.get(path)
        assert _mask(data) == want, path
    assert sorted(zk_client.get_children("/brokers/ids")) == ["1", "2"]  # 3 is not alive
    assert zk_client.exists("/brokers/topics/u/partitions/1/state") is None  # no state yet
    assert zk_client.exists("/brokers/topics/u/partitions/1") is None
    assert zk_client.exists("/brokers/ids/1").ephemeralOwner == zk_client.client_id[0]
    assert zk_client.exists("/controller").ephemeralOwner == zk_client.client_id[0]
    assert zk_client.exists("/brokers/topics/t").ephemeralOwner == 0
    for p in ("/consumers", "/brokers/seqid", "/config/changes", "/isr_change_notification", "/cluster"):
        assert zk_client.exists(p) is not None, p


def test_chroot_holds_everything(zk_server, zk_client, zk_connect):
    loader.load_cluster(zk_client, {"brokers": [{"id": 7}], "topics": [{"name": "c", "partitions": [
        {"replicas": [7]}]}]})
    chroot = "/" + zk_connect.split("/", 1)[1]
    root = zkmod.connect(zk_server.connect_string)
    try:
        assert root.get(chroot + "/brokers/topics/c")[0] == b'{"version":3,"partitions":{"0":[7]},' \
                                                            b'"adding_replicas":{},"removing_replicas":{}}'
        assert root.exists(chroot + "/brokers/ids/7") is not None
        assert root.exists("/brokers/topics/c") is None
    finally:
        root.stop()
        root.close()


def test_nested_chroot_is_created(zk_server, zk_chroot):
    client = zkmod.connect(zk_server.connect_string + zk_chroot + "/deep/kafka")
    try:
        loader.load_cluster(client, {"brokers": [{"id": 1}], "topics": []})
        assert client.get_children("/brokers/ids") == ["1"]
    finally:
        client.stop()
        client.close()


def test_ephemeral_brokers_vanish_with_the_session(zk_server, zk_client, zk_connect):
    other = zkmod.connect(zk_connect)
    loader.load_cluster(other, {"brokers": [{"id": 1}, {"id": 2}], "topics": [
        {"name": "t", "partitions": [{"replicas": [1, 2]}]}]})
    assert sorted(zk_client.get_children("/brokers/ids")) == ["1", "2"]
    other.stop()
    other.close()
    # Closing the session deletes its ephemerals at once (no session timeout wait).
    assert zk_client.get_children("/brokers/ids") == []
    assert zk_client.exists("/controller") is None
    assert zk_client.exists("/brokers/topics/t/partitions/0/state") is not None


def test_loading_twice_names_the_existing_znode(zk_client):
    desc = {"brokers": [{"id": 1}], "topics": [{"name": "t", "partitions": [{"replicas": [1]}]}]}
    loader.load_cluster(zk_client, desc, brokers=False, controller=False)
    with pytest.raises(NodeExistsError, match="/brokers/topics/t"):
        loader.load_cluster(zk_client, desc, brokers=False, controller=False)


def test_sandbox_style_load_writes_no_brokers_or_controller(zk_client):
    loader.load_cluster(zk_client, DESC, brokers=False, controller=False)
    assert zk_client.get_children("/brokers/ids") == []
    assert zk_client.exists("/controller") is None and zk_client.exists("/controller_epoch") is None


@pytest.mark.parametrize("desc,message", [
    ([], "must be a JSON object"),
    ({"brokers": []}, "'brokers' must be a non-empty list"),
    ({"brokers": [{"id": "1"}]}, "needs an integer 'id'"),
    ({"brokers": [{"id": 1}, {"id": 1}]}, "negative or duplicated"),
    ({"brokers": [{"id": 1, "rack": ""}]}, "rack must be a non-empty string"),
    ({"brokers": [{"id": 1}], "topics": {}}, "'topics' must be a list"),
    ({"brokers": [{"id": 1}], "topics": [{"name": "bad name", "partitions": [{"replicas": [1]}]}]},
     "not a legal Kafka topic name"),
    ({"brokers": [{"id": 1}], "topics": [{"name": "t", "partitions": [{"replicas": [1]}]},
                                         {"name": "t", "partitions": [{"replicas": [1]}]}]}, "listed twice"),
    ({"brokers": [{"id": 1}], "topics": [{"name": "t", "partitions": []}]}, "non-empty list"),
    ({"brokers": [{"id": 1}], "topics": [{"name": "t", "partitions": [{"replicas": []}]}]}, "must not be empty"),
    ({"brokers": [{"id": 1}], "topics": [{"name": "t", "partitions": [{"replicas": [1, 1]}]}]}, "twice"),
    ({"brokers": [{"id": 1}], "topics": [{"name": "t", "partitions": [{"replicas": [1], "leader": 2}]}]},
     "leader 2 must be -1 or one of the replicas"),
    ({"brokers": [{"id": 1}], "topics": [{"name": "t", "partitions": [{"replicas": [1], "isr": [2]}]}]},
     "not replicas"),
    ({"brokers": [{"id": 1}, {"id": 2}], "topics": [{"name": "t", "partitions": [
        {"replicas": [1, 2], "leader": 1, "isr": [2]}]}]}, "is not in the isr"),
    ({"brokers": [{"id": 1}], "topics": [{"name": "t", "partitions": [{"replicas": [1], "size_bytes": -1}]}]},
     "size_bytes"),
    ({"brokers": [{"id": 1}], "topics": [{"name": "t", "version": 4, "partitions": [{"replicas": [1]}]}]},
     "version must be 1, 2 or 3"),
    ({"brokers": [{"id": 1}], "topics": [{"name": "t", "config": {"a": [1]}, "partitions": [{"replicas": [1]}]}]},
     "must be a string"),
])
def test_description_validation(desc, message):
    with pytest.raises(BadInput, match=re.escape(message)):
        parse_cluster(desc)


def test_description_reassignment_is_strict():
    with pytest.raises(CodecError, match="log_dirs"):
        parse_cluster({"brokers": [{"id": 1}], "topics": [], "reassignment": [
            {"topic": "t", "partition": 0, "replicas": [1], "log_dirs": ["any"]}]})


def test_description_defaults():
    c = parse_cluster({"brokers": [{"id": 4}, {"id": 5, "alive": False}], "topics": [
        {"name": "t", "config": {"unclean.leader.election.enable": True}, "partitions": [
            {"replicas": [5, 4]}, {"replicas": [4], "no_state": True}]}]})
    p0, p1 = c.topics[0].partitions
    assert (p0.leader, p0.isr, p0.has_state) == (5, [5, 4], True)
    assert (p1.leader, p1.isr, p1.has_state) == (-1, [], False)
    assert c.topics[0].config == {"unclean.leader.election.enable": "true"}
    assert c.controller_id == 4 and c.controller_epoch == 1


def test_load_description_file_errors(tmp_path):
    with pytest.raises(BadInput, match="does not exist"):
        load_description(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(BadInput, match="not valid JSON"):
        load_description(tmp_path / "bad.json")
