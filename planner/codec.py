"""Every ZooKeeper znode format of ZooKeeper-mode Kafka (2.4 - 3.9), in one place.

Rule (docs/KAFKA_ZK.md §1): read tolerantly (unknown keys ignored, optional keys defaulted), write exactly
what Kafka writes (compact UTF-8 JSON). Malformed data raises `CodecError` naming the znode path and the
problem, so an operator can find the znode with zkCli and look at it.

Paths are relative to the cluster's chroot; kazoo applies the chroot.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from planner.errors import CodecError
from planner.text import show

# ---------------------------------------------------------------------------------------------- paths
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONFIG = "/config"
CONFIG_TOPICS = "/config/topics"
CONFIG_BROKERS = "/config/brokers"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "/config/changes/config_change_"
REASSIGN = "/admin/reassign_partitions"
PREFERRED_ELECTION = "/admin/preferred_replica_election"
DELETE_TOPICS = "/admin/delete_topics"
ISR_CHANGES = "/isr_change_notification"
MIGRATION = "/migration"
CLUSTER_ID = "/cluster/id"
DEFAULT_BROKER_ENTITY = "<default>"

# Kafka's legal topic names: [a-zA-Z0-9._-], at most 249 characters, not "." or "..".
TOPIC_NAME_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def broker_config_path(broker: int | str) -> str:
    return f"{CONFIG_BROKERS}/{broker}"


def is_valid_topic_name(name: str) -> bool:
    return bool(TOPIC_NAME_RE.match(name)) and name not in (".", "..")


# --------------------------------------------------------------------------------------------- helpers
def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON, as Jackson writes it."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def loads(path: str, data: bytes | None) -> Any:
    if data is None or len(data) == 0:
        raise CodecError(path, "empty znode, expected JSON")
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CodecError(path, f"not valid JSON ({e})") from None


def _obj(path: str, value: Any) -> dict:
    if not isinstance(value, dict):
        raise CodecError(path, f"expected a JSON object, got {type(value).__name__}")
    return value


def _int(path: str, obj: dict, key: str, default: Any = ...) -> int:
    if key not in obj or obj[key] is None:
        if default is ...:
            raise CodecError(path, f"missing required key {key!r}")
        return default
    v = obj[key]
    # As strict as Kafka's own parsing (Jackson's `to[Int]`): "5" is not an integer. (Kafka writes its
    # timestamps as strings, and those are read with _str.)
    if isinstance(v, bool) or not isinstance(v, int):
        raise CodecError(path, f"{key!r} must be an integer, got {show(v)}")
    if not -(2**31) <= v < 2**31:
        raise CodecError(path, f"{key!r} {v} is out of range")
    return v


_INT = {int}


def _int_list(path: str, value: Any, what: str) -> list[int]:
    # `type(x) is int` also rejects bool (JSON's true/false); a set of the element types is the fast way to
    # check many short replica lists.
    if not isinstance(value, list) or not set(map(type, value)) <= _INT:
        raise CodecError(path, f"{what} must be a list of integers, got {show(value)}")
    return value


def _str(path: str, obj: dict, key: str, default: Any = ...) -> str | None:
    if key not in obj or obj[key] is None:
        if default is ...:
            raise CodecError(path, f"missing required key {key!r}")
        return default
    v = obj[key]
    if not isinstance(v, str):
        raise CodecError(path, f"{key!r} must be a string, got {show(v)}")
    return v


# ------------------------------------------------------------------------------------------ controller
@dataclass(frozen=True, slots=True)
class Controller:
    broker_id: int
    timestamp: str = "0"
    version: int = 2
    kraft_controller_epoch: int = -1

    @property
    def migrating_to_kraft(self) -> bool:
        return self.kraft_controller_epoch > 0


def decode_controller(data: bytes | None, path: str = CONTROLLER) -> Controller:
    obj = _obj(path, loads(path, data))
    version = _int(path, obj, "version", 1)
    ts = obj.get("timestamp", "0")
    return Controller(
        broker_id=_int(path, obj, "brokerid"),
        timestamp=str(ts),
        version=version,
        kraft_controller_epoch=_int(path, obj, "kraftControllerEpoch", -1),
    )


def encode_controller(c: Controller) -> bytes:
    obj: dict[str, Any] = {"version": c.version, "brokerid": c.broker_id, "timestamp": c.timestamp}
    if c.version >= 2:
        obj["kraftControllerEpoch"] = c.kraft_controller_epoch
    return dumps(obj)


def decode_controller_epoch(data: bytes | None, path: str = CONTROLLER_EPOCH) -> int:
    value = loads(path, data)
    if isinstance(value, bool) or not isinstance(value, int):
        raise CodecError(path, f"expected a plain integer, got {show(value)}")
    return value


def encode_controller_epoch(epoch: int) -> bytes:
    return str(int(epoch)).encode()


# --------------------------------------------------------------------------------------------- brokers
@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    host: str | None
    port: int
    endpoints: tuple[str, ...]
    rack: str | None = None
    jmx_port: int = -1
    timestamp: str = "0"
    listener_security_protocol_map: dict[str, str] = field(default_factory=dict)
    features: dict[str, Any] = field(default_factory=dict)
    version: int = 5


def decode_broker(broker_id: int, data: bytes | None, path: str | None = None) -> BrokerRegistration:
    path = path or broker_path(broker_id)
    obj = _obj(path, loads(path, data))
    version = _int(path, obj, "version", 1)
    host = _str(path, obj, "host", None)
    port = _int(path, obj, "port", -1)
    raw_endpoints = obj.get("endpoints")
    if raw_endpoints is None:
        endpoints: tuple[str, ...] = (f"PLAINTEXT://{host}:{port}",) if host else ()
    else:
        if not isinstance(raw_endpoints, list) or not all(isinstance(e, str) for e in raw_endpoints):
            raise CodecError(path, f"'endpoints' must be a list of strings, got {show(raw_endpoints)}")
        endpoints = tuple(raw_endpoints)
    proto_map = obj.get("listener_security_protocol_map") or {}
    if not isinstance(proto_map, dict):
        raise CodecError(path, "'listener_security_protocol_map' must be an object")
    features = obj.get("features") or {}
    if not isinstance(features, dict):
        raise CodecError(path, "'features' must be an object")
    return BrokerRegistration(
        broker_id=broker_id,
        host=host,
        port=port,
        endpoints=endpoints,
        rack=_str(path, obj, "rack", None),
        jmx_port=_int(path, obj, "jmx_port", -1),
        timestamp=str(obj.get("timestamp", "0")),
        listener_security_protocol_map=dict(proto_map),
        features=dict(features),
        version=version,
    )


def encode_broker(b: BrokerRegistration) -> bytes:
    """Broker registration as Kafka writes it (v5 by default; older versions drop the newer keys)."""
    obj: dict[str, Any] = {}
    if b.version >= 5:
        obj["features"] = b.features
    if b.version >= 4:
        obj["listener_security_protocol_map"] = b.listener_security_protocol_map or {
            e.split("://", 1)[0]: e.split("://", 1)[0] for e in b.endpoints
        }
    if b.version >= 2:
        obj["endpoints"] = list(b.endpoints)
    if b.rack is not None and b.version >= 3:
        obj["rack"] = b.rack
    obj["jmx_port"] = b.jmx_port
    obj["port"] = b.port
    obj["host"] = b.host
    obj["version"] = b.version
    obj["timestamp"] = b.timestamp
    return dumps(obj)


def broker_for(broker_id: int, rack: str | None = None, host: str | None = None, port: int = 9092,
               timestamp: str = "0") -> BrokerRegistration:
    """A v5 registration with one PLAINTEXT listener, as a 3.x broker writes it."""
    host = host or f"broker-{broker_id}"
    return BrokerRegistration(
        broker_id=broker_id,
        host=host,
        port=port,
        endpoints=(f"PLAINTEXT://{host}:{port}",),
        rack=rack,
        timestamp=timestamp,
        listener_security_protocol_map={"PLAINTEXT": "PLAINTEXT"},
    )


# ---------------------------------------------------------------------------------------------- topics
@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """`/brokers/topics/<t>`: partition -> ordered replicas (first = preferred leader)."""

    partitions: dict[int, list[int]]
    adding_replicas: dict[int, list[int]] = field(default_factory=dict)
    removing_replicas: dict[int, list[int]] = field(default_factory=dict)
    topic_id: str | None = None
    version: int = 3


def _partition_map(path: str, value: Any, what: str) -> dict[int, list[int]]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise CodecError(path, f"{what!r} must be an object of partition -> replica list")
    out: dict[int, list[int]] = {}
    for k, v in value.items():
        if not isinstance(k, str) or not k.isdecimal():  # what the regex \d+ accepts, without the regex
            raise CodecError(path, f"{what!r} has a partition key {k!r} that is not a non-negative integer")
        out[int(k)] = _int_list(path, v, f"{what}[{k}]")
    return out


def decode_topic(topic: str, data: bytes | None, path: str | None = None) -> TopicAssignment:
    path = path or topic_path(topic)
    obj = _obj(path, loads(path, data))
    version = _int(path, obj, "version", 1)
    if "partitions" not in obj:
        raise CodecError(path, "missing required key 'partitions'")
    parts = _partition_map(path, obj["partitions"], "partitions")
    adding = _partition_map(path, obj.get("adding_replicas"), "adding_replicas")
    removing = _partition_map(path, obj.get("removing_replicas"), "removing_replicas")
    for what, m in (("adding_replicas", adding), ("removing_replicas", removing)):
        for p, reps in m.items():
            if p not in parts:
                raise CodecError(path, f"adding/removing replicas name partition {p} which is not in 'partitions'")
            outside = sorted(set(reps) - set(parts[p]))
            if outside:
                raise CodecError(path, f"{what} of partition {p} names brokers {outside} that are not among "
                                       f"its replicas {parts[p]}")
    for p, reps in parts.items():
        if len(set(reps)) != len(reps):
            raise CodecError(path, f"partition {p} lists a replica twice: {reps}")
    return TopicAssignment(parts, adding, removing, _str(path, obj, "topic_id", None), version)


def encode_topic(t: TopicAssignment) -> bytes:
    obj: dict[str, Any] = {"version": t.version,
                           "partitions": {str(p): list(r) for p, r in sorted(t.partitions.items())}}
    if t.version >= 2:
        obj["adding_replicas"] = {str(p): list(r) for p, r in sorted(t.adding_replicas.items())}
        obj["removing_replicas"] = {str(p): list(r) for p, r in sorted(t.removing_replicas.items())}
    if t.version >= 3 and t.topic_id is not None:
        obj["topic_id"] = t.topic_id
    return dumps(obj)


# ------------------------------------------------------------------------------------- partition state
@dataclass(frozen=True, slots=True)
class PartitionState:
    leader: int
    leader_epoch: int
    controller_epoch: int
    isr: list[int]
    leader_recovery_state: int = 0  # 1 = RECOVERING, only written after an unclean election
    version: int = 1


def decode_partition_state(data: bytes | None, path: str) -> PartitionState:
    obj = _obj(path, loads(path, data))
    if "isr" not in obj:
        raise CodecError(path, "missing required key 'isr'")
    return PartitionState(
        leader=_int(path, obj, "leader"),
        leader_epoch=_int(path, obj, "leader_epoch"),
        controller_epoch=_int(path, obj, "controller_epoch"),
        isr=_int_list(path, obj["isr"], "isr"),
        leader_recovery_state=_int(path, obj, "leader_recovery_state", 0),
        version=_int(path, obj, "version", 1),
    )


def encode_partition_state(s: PartitionState) -> bytes:
    obj: dict[str, Any] = {
        "controller_epoch": s.controller_epoch,
        "leader": s.leader,
        "version": s.version,
        "leader_epoch": s.leader_epoch,
        "isr": list(s.isr),
    }
    if s.leader_recovery_state:
        obj["leader_recovery_state"] = s.leader_recovery_state
    return dumps(obj)


# --------------------------------------------------------------------------------------------- configs
def decode_config(data: bytes | None, path: str) -> dict[str, str]:
    """`/config/topics/<t>` and `/config/brokers/<id|<default>>`: the whole override set, values strings."""
    obj = _obj(path, loads(path, data))
    config = obj.get("config", {})
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise CodecError(path, "'config' must be an object of string -> string")
    for k, v in config.items():
        if not isinstance(v, str):
            raise CodecError(path, f"config value of {k!r} must be a string (Kafka stores strings), got {show(v)}")
    return dict(config)


def encode_config(config: dict[str, str]) -> bytes:
    for k, v in config.items():
        if not isinstance(v, str):
            raise ValueError(f"config value of {k!r} must be a string, got {v!r}")
    return dumps({"version": 1, "config": dict(sorted(config.items()))})


def decode_config_change(data: bytes | None, path: str) -> str:
    """A `/config/changes/config_change_<seq>` notification; returns the entity path ('topics/t')."""
    obj = _obj(path, loads(path, data))
    version = _int(path, obj, "version", 1)
    if version >= 2:
        entity = _str(path, obj, "entity_path")
    else:
        entity = f"{_str(path, obj, 'entity_type')}/{_str(path, obj, 'entity_name')}"
    assert entity is not None
    if "/" not in entity:
        raise CodecError(path, f"entity_path {entity!r} must look like 'topics/<name>' or 'brokers/<id>'")
    return entity


def encode_config_change(entity_path: str) -> bytes:
    return dumps({"version": 2, "entity_path": entity_path})


# ------------------------------------------------------------------------------------ admin: reassign
@dataclass(frozen=True, slots=True)
class ReassignEntry:
    topic: str
    partition: int
    replicas: tuple[int, ...]


REASSIGN_ENTRY_KEYS = {"topic", "partition", "replicas"}


def decode_reassignment(data: bytes | None, path: str = REASSIGN) -> list[ReassignEntry]:
    """Strict: exactly Kafka's schema. An extra key (e.g. `log_dirs`) makes Kafka's controller ignore the
    znode forever and block every later reassignment, so it is an error here, not something to tolerate."""
    obj = _obj(path, loads(path, data))
    extra = set(obj) - {"version", "partitions"}
    if extra:
        raise CodecError(path, f"unexpected top-level keys {sorted(extra)}")
    if obj.get("version") != 1:
        raise CodecError(path, f"version must be 1, got {show(obj.get('version'))}")
    return _reassign_entries(path, obj.get("partitions"), strict=True)


def _reassign_entries(path: str, entries: Any, strict: bool) -> list[ReassignEntry]:
    if not isinstance(entries, list):
        raise CodecError(path, "'partitions' must be a list")
    out: list[ReassignEntry] = []
    seen: set[tuple[str, int]] = set()
    for i, e in enumerate(entries):
        where = f"partitions[{i}]"
        if not isinstance(e, dict):
            raise CodecError(path, f"{where} must be an object")
        extra = set(e) - REASSIGN_ENTRY_KEYS
        if strict and extra:
            raise CodecError(
                path,
                f"{where} has keys {sorted(extra)}; the znode must hold only topic, partition, replicas "
                "(Kafka's controller ignores a znode with log_dirs and blocks every later reassignment)",
            )
        topic = e.get("topic")
        if not isinstance(topic, str) or not is_valid_topic_name(topic):
            raise CodecError(path, f"{where}.topic {show(topic)} is not a valid topic name")
        partition = e.get("partition")
        if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
            raise CodecError(path, f"{where}.partition must be a non-negative integer, got {show(partition)}")
        replicas = _int_list(path, e.get("replicas"), f"{where}.replicas")
        if not replicas:
            raise CodecError(path, f"{where} ({topic}-{partition}) has an empty replica list")
        if len(set(replicas)) != len(replicas):
            raise CodecError(path, f"{where} ({topic}-{partition}) lists a replica twice: {replicas}")
        if (topic, partition) in seen:
            raise CodecError(path, f"{topic}-{partition} is listed twice")
        seen.add((topic, partition))
        out.append(ReassignEntry(topic, partition, tuple(replicas)))
    return out


def encode_reassignment(entries: list[ReassignEntry]) -> bytes:
    return dumps(
        {
            "version": 1,
            "partitions": [{"topic": e.topic, "partition": e.partition, "replicas": list(e.replicas)}
                           for e in entries],
        }
    )


def decode_reassignment_file(data: bytes | str, path: str = "reassignment file") -> list[ReassignEntry]:
    """A `kafka-reassign-partitions.sh` file: same shape, but it may carry `log_dirs` (stripped here)."""
    raw = data.encode() if isinstance(data, str) else data
    obj = _obj(path, loads(path, raw))
    if obj.get("version", 1) != 1:
        raise CodecError(path, f"version must be 1, got {show(obj.get('version'))}")
    entries = obj.get("partitions")
    if isinstance(entries, list):
        for e in entries:
            if isinstance(e, dict) and "log_dirs" in e:
                dirs = e.pop("log_dirs")
                if not isinstance(dirs, list) or any(d != "any" for d in dirs):
                    raise CodecError(path, "log_dirs other than \"any\" cannot be applied through ZooKeeper")
    return _reassign_entries(path, entries, strict=True)


# -------------------------------------------------------------------------- admin: preferred election
def decode_preferred_election(data: bytes | None, path: str = PREFERRED_ELECTION) -> list[tuple[str, int]]:
    obj = _obj(path, loads(path, data))
    entries = obj.get("partitions")
    if not isinstance(entries, list):
        raise CodecError(path, "'partitions' must be a list")
    out = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            raise CodecError(path, f"partitions[{i}] must be an object")
        topic, partition = e.get("topic"), e.get("partition")
        if not isinstance(topic, str) or isinstance(partition, bool) or not isinstance(partition, int):
            raise CodecError(path, f"partitions[{i}] needs a string topic and an integer partition")
        out.append((topic, partition))
    return out


def encode_preferred_election(partitions: list[tuple[str, int]]) -> bytes:
    return dumps({"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]})
