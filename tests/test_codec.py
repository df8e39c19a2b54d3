"""Every znode format of docs/KAFKA_ZK.md §1: Kafka's own example values decode to what they say, encoding gives
Kafka's bytes, round trips hold (hypothesis), and malformed data names the znode path."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner import codec
from planner.errors import CodecError

STATE = "/brokers/topics/t/partitions/0/state"

# ------------------------------------------------------------------------------------------ controller


def test_controller_v1_and_v2():
    v1 = b'{"version":1,"brokerid":1,"timestamp":"1700000000000"}'
    c = codec.decode_controller(v1)
    assert (c.broker_id, c.version, c.timestamp, c.kraft_controller_epoch) == (1, 1, "1700000000000", -1)
    assert not c.migrating_to_kraft
    assert codec.encode_controller(c) == v1
    v2 = b'{"version":2,"brokerid":3,"timestamp":"1700000000000","kraftControllerEpoch":-1}'
    c = codec.decode_controller(v2)
    assert (c.broker_id, c.version, c.kraft_controller_epoch) == (3, 2, -1)
    assert codec.encode_controller(c) == v2
    # A KRaft controller that took over during a migration writes its epoch.
    m = codec.decode_controller(b'{"version":2,"brokerid":3000,"timestamp":"1","kraftControllerEpoch":5}')
    assert m.migrating_to_kraft and m.kraft_controller_epoch == 5


def test_controller_epoch():
    assert codec.decode_controller_epoch(b"7") == 7
    assert codec.encode_controller_epoch(7) == b"7"
    for bad in (b"", b"seven", b'"7"', b"true", b"7.5"):
        with pytest.raises(CodecError) as e:
            codec.decode_controller_epoch(bad)
        assert e.value.path == "/controller_epoch" and "/controller_epoch" in str(e.value)


# --------------------------------------------------------------------------------------------- brokers
# The examples in Kafka's ZkData.scala (BrokerIdZNode), version by version.
BROKER_V1 = b'{"version":1,"host":"localhost","port":9092,"jmx_port":9999,"timestamp":"2233345666"}'
BROKER_V2 = (b'{"version":2,"host":"localhost","port":9092,"jmx_port":9999,"timestamp":"2233345666",'
             b'"endpoints":["CLIENT://host1:9092","REPLICATION://host1:9093"]}')
BROKER_V3 = (b'{"version":3,"host":"localhost","port":9092,"jmx_port":9999,"timestamp":"2233345666",'
             b'"endpoints":["CLIENT://host1:9092","REPLICATION://host1:9093"],"rack":"dc1"}')
BROKER_V4 = (b'{"version":4,"host":"localhost","port":9092,"jmx_port":9999,"timestamp":"2233345666",'
             b'"endpoints":["CLIENT://host1:9092","REPLICATION://host1:9093"],'
             b'"listener_security_protocol_map":{"CLIENT":"SSL","REPLICATION":"PLAINTEXT"},"rack":"dc1"}')
BROKER_V5 = (b'{"version":5,"host":"localhost","port":9092,"jmx_port":9999,"timestamp":"2233345666",'
             b'"endpoints":["CLIENT://host1:9092","REPLICATION://host1:9093"],'
             b'"listener_security_protocol_map":{"CLIENT":"SSL","REPLICATION":"PLAINTEXT"},"rack":"dc1",'
             b'"features":{"feature1":{"min_version":1,"first_active_version":1,"max_version":2}}}')


@pytest.mark.parametrize("data,version,endpoints,rack,proto", [
    (BROKER_V1, 1, ("PLAINTEXT://localhost:9092",), None, {}),
    (BROKER_V2, 2, ("CLIENT://host1:9092", "REPLICATION://host1:9093"), None, {}),
    (BROKER_V3, 3, ("CLIENT://host1:9092", "REPLICATION://host1:9093"), "dc1", {}),
    (BROKER_V4, 4, ("CLIENT://host1:9092", "REPLICATION://host1:9093"), "dc1",
     {"CLIENT": "SSL", "REPLICATION": "PLAINTEXT"}),
    (BROKER_V5, 5, ("CLIENT://host1:9092", "REPLICATION://host1:9093"), "dc1",
     {"CLIENT": "SSL", "REPLICATION": "PLAINTEXT"}),
])
def test_broker_versions(data, version, endpoints, rack, proto):
    b = codec.decode_broker(7, data)
    assert (b.broker_id, b.version, b.host, b.port, b.jmx_port, b.timestamp) == (
        7, version, "localhost", 9092, 9999, "2233345666")
    assert b.endpoints == endpoints and b.rack == rack and b.listener_security_protocol_map == proto
    # Re-encoding keeps every field of that version (key order is Jackson's, not significant).
    again = codec.decode_broker(7, codec.encode_broker(b))
    assert again == b
    assert json.loads(codec.encode_broker(b)) == {k: v for k, v in json.loads(data).items()
                                                   if not (version == 1 and k == "endpoints")}


def test_broker_v5_as_a_3x_broker_writes_it():
    reg = codec.broker_for(1, rack="r1", host="kafka-1", timestamp="1700000000000")
    assert codec.encode_broker(reg) == (
        b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
        b'"endpoints":["PLAINTEXT://kafka-1:9092"],"rack":"r1","jmx_port":-1,"port":9092,"host":"kafka-1",'
        b'"version":5,"timestamp":"1700000000000"}')
    no_rack = codec.encode_broker(codec.broker_for(2, host="kafka-2", timestamp="1"))
    assert b"rack" not in no_rack


def test_broker_tolerates_unknown_and_missing_keys():
    b = codec.decode_broker(3, b'{"version":5,"host":"h","port":1,"future_key":[1,2],"endpoints":[]}')
    assert (b.host, b.port, b.endpoints, b.rack, b.jmx_port) == ("h", 1, (), None, -1)


@pytest.mark.parametrize("data,problem", [
    (b"{", "not valid JSON"),
    (b"[]", "expected a JSON object"),
    (b'{"version":5,"host":"h","port":"x"}', "'port' must be an integer"),
    (b'{"version":5,"host":"h","port":1,"endpoints":"PLAINTEXT://h:1"}', "'endpoints' must be a list"),
    (b'{"version":5,"host":"h","port":1,"rack":3}', "'rack' must be a string"),
])
def test_broker_malformed_names_path(data, problem):
    with pytest.raises(CodecError) as e:
        codec.decode_broker(4, data)
    assert e.value.path == "/brokers/ids/4" and problem in e.value.problem
    assert str(e.value).startswith("/brokers/ids/4: ")


# ---------------------------------------------------------------------------------------------- topics
def test_topic_v1_v2_v3():
    v1 = b'{"version":1,"partitions":{"0":[0,1,3],"1":[1,2,0]}}'
    t = codec.decode_topic("foo", v1)
    assert (t.version, t.partitions, t.adding_replicas, t.topic_id) == (1, {0: [0, 1, 3], 1: [1, 2, 0]}, {}, None)
    assert codec.encode_topic(t) == v1
    v2 = b'{"version":2,"partitions":{"0":[1,2]},"adding_replicas":{},"removing_replicas":{}}'
    t = codec.decode_topic("foo", v2)
    assert (t.version, t.partitions) == (2, {0: [1, 2]})
    assert codec.encode_topic(t) == v2
    # v3 mid-reassignment of partition 0 from [1, 2, 3] to [4, 5, 6]: the union, with adding/removing.
    v3 = (b'{"version":3,"partitions":{"0":[4,5,6,1,2,3],"1":[2,3,1]},"adding_replicas":{"0":[4,5,6]},'
          b'"removing_replicas":{"0":[1,2,3]},"topic_id":"Ofg7kmlhTrGhrcRsNZ2hRA"}')
    t = codec.decode_topic("foo", v3)
    assert t.partitions == {0: [4, 5, 6, 1, 2, 3], 1: [2, 3, 1]}
    assert t.adding_replicas == {0: [4, 5, 6]} and t.removing_replicas == {0: [1, 2, 3]}
    assert t.topic_id == "Ofg7kmlhTrGhrcRsNZ2hRA" and t.version == 3
    assert codec.encode_topic(t) == v3


def test_topic_reads_partition_order_and_tolerates_unknown_keys():
    t = codec.decode_topic("foo", b'{"partitions":{"10":[1],"2":[3,1]},"extra":{"a":1}}')
    assert t.partitions == {10: [1], 2: [3, 1]} and t.version == 1


@pytest.mark.parametrize("data,problem", [
    (b'{"version":3}', "missing required key 'partitions'"),
    (b'{"version":3,"partitions":{"a":[1]}}', "not a non-negative integer"),
    (b'{"version":3,"partitions":{"0":[1,"2"]}}', "list of integers"),
    (b'{"version":3,"partitions":{"0":[1,1]}}', "twice"),
    (b'{"version":3,"partitions":{"0":[1]},"adding_replicas":{"5":[2]}}', "not in 'partitions'"),
    (b'{"version":3,"partitions":{"0":[1]},"topic_id":7}', "'topic_id' must be a string"),
])
def test_topic_malformed_names_path(data, problem):
    with pytest.raises(CodecError) as e:
        codec.decode_topic("foo", data)
    assert e.value.path == "/brokers/topics/foo" and problem in e.value.problem


# ------------------------------------------------------------------------------------- partition state
def test_partition_state_with_and_without_recovery_state():
    plain = b'{"controller_epoch":7,"leader":1,"version":1,"leader_epoch":4,"isr":[1,2]}'
    s = codec.decode_partition_state(plain, STATE)
    assert (s.leader, s.leader_epoch, s.controller_epoch, s.isr, s.leader_recovery_state) == (1, 4, 7, [1, 2], 0)
    assert codec.encode_partition_state(s) == plain
    unclean = b'{"controller_epoch":7,"leader":3,"version":1,"leader_epoch":5,"isr":[3],"leader_recovery_state":1}'
    s = codec.decode_partition_state(unclean, STATE)
    assert (s.leader, s.isr, s.leader_recovery_state) == (3, [3], 1)
    assert codec.encode_partition_state(s) == unclean
    # The seed incident: RF 1, its broker killed.
    s = codec.decode_partition_state(b'{"controller_epoch":2,"leader":-1,"version":1,"leader_epoch":3,"isr":[1]}',
                                     STATE)
    assert s.leader == -1 and s.isr == [1]


@pytest.mark.parametrize("data,problem", [
    (None, "empty znode"),
    (b"", "empty znode"),
    (b'{"leader":1,"leader_epoch":0,"controller_epoch":1}', "missing required key 'isr'"),
    (b'{"leader":true,"leader_epoch":0,"controller_epoch":1,"isr":[1]}', "'leader' must be an integer"),
    (b'{"leader":1,"leader_epoch":0,"controller_epoch":1,"isr":[1,null]}', "isr must be a list of integers"),
    (b'{"leader_epoch":0,"controller_epoch":1,"isr":[1]}', "missing required key 'leader'"),
])
def test_partition_state_malformed_names_path(data, problem):
    with pytest.raises(CodecError) as e:
        codec.decode_partition_state(data, STATE)
    assert e.value.path == STATE and problem in e.value.problem and STATE in str(e.value)


# --------------------------------------------------------------------------------------------- configs
def test_topic_and_broker_configs():
    data = b'{"version":1,"config":{"min.insync.replicas":"2","unclean.leader.election.enable":"false"}}'
    cfg = codec.decode_config(data, "/config/topics/t")
    assert cfg == {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
    assert codec.encode_config(cfg) == data
    rates = b'{"version":1,"config":{"follower.replication.throttled.rate":"10485760",' \
            b'"leader.replication.throttled.rate":"10485760"}}'
    assert codec.encode_config(codec.decode_config(rates, "/config/brokers/1")) == rates
    assert codec.decode_config(b'{"version":1}', "/config/brokers/<default>") == {}
    with pytest.raises(CodecError) as e:
        codec.decode_config(b'{"version":1,"config":{"min.insync.replicas":2}}', "/config/topics/t")
    assert e.value.path == "/config/topics/t" and "must be a string" in e.value.problem
    with pytest.raises(ValueError):
        codec.encode_config({"min.insync.replicas": 2})


def test_config_change_notifications():
    assert codec.decode_config_change(b'{"version":2,"entity_path":"topics/t"}', "/config/changes/config_change_0") \
        == "topics/t"
    assert codec.decode_config_change(b'{"version":1,"entity_type":"topics","entity_name":"t"}',
                                      "/config/changes/config_change_1") == "topics/t"
    assert codec.decode_config_change(b'{"version":2,"entity_path":"brokers/<default>"}',
                                      "/config/changes/config_change_2") == "brokers/<default>"
    assert codec.encode_config_change("brokers/3") == b'{"version":2,"entity_path":"brokers/3"}'
    with pytest.raises(CodecError) as e:
        codec.decode_config_change(b'{"version":2,"entity_path":"nope"}', "/config/changes/config_change_9")
    assert e.value.path == "/config/changes/config_change_9"


# ------------------------------------------------------------------------------------- admin znodes
def test_reassignment_strict():
    data = b'{"version":1,"partitions":[{"topic":"foo","partition":1,"replicas":[0,1,3]}]}'
    entries = codec.decode_reassignment(data)
    assert entries == [codec.ReassignEntry("foo", 1, (0, 1, 3))]
    assert codec.encode_reassignment(entries) == data
    with pytest.raises(CodecError) as e:
        codec.decode_reassignment(b'{"version":1,"partitions":[{"topic":"foo","partition":1,"replicas":[0],'
                                  b'"log_dirs":["any"]}]}')
    assert e.value.path == "/admin/reassign_partitions" and "log_dirs" in str(e.value)
    assert "/admin/reassign_partitions" in str(e.value)
    for bad, problem in [
        (b'{"version":2,"partitions":[]}', "version must be 1"),
        (b'{"version":1,"partitions":[],"extra":1}', "unexpected top-level keys"),
        (b'{"version":1,"partitions":[{"topic":"a b","partition":0,"replicas":[1]}]}', "not a valid topic name"),
        (b'{"version":1,"partitions":[{"topic":"a","partition":-1,"replicas":[1]}]}', "non-negative"),
        (b'{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[]}]}', "empty replica list"),
        (b'{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[1,1]}]}', "twice"),
        (b'{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[1]},'
         b'{"topic":"a","partition":0,"replicas":[2]}]}', "listed twice"),
    ]:
        with pytest.raises(CodecError) as e:
            codec.decode_reassignment(bad)
        assert e.value.path == "/admin/reassign_partitions" and problem in e.value.problem


def test_reassignment_file_strips_any_log_dirs():
    f = json.dumps({"version": 1, "partitions": [
        {"topic": "foo", "partition": 0, "replicas": [4, 5], "log_dirs": ["any", "any"]},
        {"topic": "foo", "partition": 1, "replicas": [5, 6]}]})
    entries = codec.decode_reassignment_file(f, "plan/reassignment.json")
    assert entries == [codec.ReassignEntry("foo", 0, (4, 5)), codec.ReassignEntry("foo", 1, (5, 6))]
    assert b"log_dirs" not in codec.encode_reassignment(entries)
    with pytest.raises(CodecError) as e:
        codec.decode_reassignment_file(json.dumps({"version": 1, "partitions": [
            {"topic": "foo", "partition": 0, "replicas": [4], "log_dirs": ["/data/1"]}]}), "plan/r.json")
    assert e.value.path == "plan/r.json" and "log_dirs" in e.value.problem


def test_preferred_replica_election():
    data = b'{"version":1,"partitions":[{"topic":"foo","partition":1},{"topic":"bar","partition":0}]}'
    entries = codec.decode_preferred_election(data)
    assert entries == [("foo", 1), ("bar", 0)]
    assert codec.encode_preferred_election(entries) == data
    with pytest.raises(CodecError) as e:
        codec.decode_preferred_election(b'{"version":1,"partitions":[{"topic":"foo"}]}')
    assert e.value.path == "/admin/preferred_replica_election"


# ------------------------------------------------------------------------------------ round trips
broker_ids = st.integers(0, 2**31 - 1)
topic_names = st.from_regex(r"[a-zA-Z0-9._-]{1,40}", fullmatch=True).filter(lambda s: s not in (".", ".."))
replica_lists = st.lists(broker_ids, min_size=1, max_size=6, unique=True)
strings = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)


@settings(max_examples=60)
@given(parts=st.dictionaries(st.integers(0, 5000), replica_lists, max_size=8), version=st.sampled_from([1, 2, 3]),
       topic_id=st.one_of(st.none(), st.text("ABCDEFabcdef0123456789-_", min_size=22, max_size=22)),
       data=st.data())
def test_topic_round_trip(parts, version, topic_id, data):
    adding, removing = {}, {}
    if version >= 2 and parts:
        for p in data.draw(st.lists(st.sampled_from(sorted(parts)), unique=True, max_size=3)):
            adding[p] = parts[p][:1]
            removing[p] = parts[p][1:2]
    t = codec.TopicAssignment(parts, adding, {p: r for p, r in removing.items() if r},
                              topic_id if version >= 3 else None, version)
    assert codec.decode_topic("t", codec.encode_topic(t)) == t


@settings(max_examples=60)
@given(leader=st.one_of(st.just(-1), broker_ids), epoch=st.integers(0, 2**31 - 1),
       ctrl=st.integers(0, 2**31 - 1), isr=st.lists(broker_ids, max_size=6, unique=True), lrs=st.sampled_from([0, 1]))
def test_partition_state_round_trip(leader, epoch, ctrl, isr, lrs):
    s = codec.PartitionState(leader, epoch, ctrl, isr, lrs)
    assert codec.decode_partition_state(codec.encode_partition_state(s), STATE) == s


@settings(max_examples=40)
@given(config=st.dictionaries(strings, strings, max_size=6))
def test_config_round_trip(config):
    assert codec.decode_config(codec.encode_config(config), "/config/topics/t") == config


@settings(max_examples=40)
@given(bid=broker_ids, rack=st.one_of(st.none(), strings.filter(bool)), host=strings.filter(bool),
       port=st.integers(1, 65535), ts=st.integers(0, 2**45).map(str))
def test_broker_round_trip(bid, rack, host, port, ts):
    reg = codec.broker_for(bid, rack=rack, host=host, port=port, timestamp=ts)
    assert codec.decode_broker(bid, codec.encode_broker(reg)) == reg


@settings(max_examples=40)
@given(entries=st.dictionaries(st.tuples(topic_names, st.integers(0, 10_000)), replica_lists, max_size=6))
def test_reassignment_and_election_round_trip(entries):
    es = [codec.ReassignEntry(t, p, tuple(r)) for (t, p), r in entries.items()]
    assert codec.decode_reassignment(codec.encode_reassignment(es)) == es
    pe = [(t, p) for (t, p) in entries]
    assert codec.decode_preferred_election(codec.encode_preferred_election(pe)) == pe


@settings(max_examples=30)
@given(bid=broker_ids, ts=st.integers(0, 2**45).map(str), kraft=st.integers(-1, 100))
def test_controller_round_trip(bid, ts, kraft):
    c = codec.Controller(bid, ts, 2, kraft)
    assert codec.decode_controller(codec.encode_controller(c)) == c


def test_sizes_read_in_binary_units_everywhere():
    from planner.text import size

    assert [size(n) for n in (0, 1023, 1024, 1536, 24_000_000, 72_000_000, 5 * 2**40, 3 * 2**50)] == [
        "0 B", "1,023 B", "1.0 KiB", "1.5 KiB", "22.9 MiB", "68.7 MiB", "5.0 TiB", "3,072.0 TiB"]
    assert size(None) == "?" and size(None, unknown="size unknown") == "size unknown"
