"""DescribeTopicPartitions answers read straight into columns (planner/kraft_admin.py asks; this reads what comes
back), as planner/kafka_log_dirs.py does for DescribeLogDirs.

kafka-python decodes an answer into one Python object per partition and per field: at 12,000 partitions that was
most of a KRaft snapshot's client time, and the snapshot reads every partition at least twice (the consistency
re-read). The answer's layout is Kafka's schema (DescribeTopicPartitionsResponse.json, version 0, flexible):

    ThrottleTimeMs int32, Topics [ErrorCode int16, Name compact string, TopicId uuid, IsInternal bool,
      Partitions [ErrorCode int16, PartitionIndex int32, LeaderId int32, LeaderEpoch int32, ReplicaNodes [int32],
                  IsrNodes [int32], EligibleLeaderReplicas [int32] (nullable), LastKnownElr [int32] (nullable),
                  OfflineReplicas [int32], tagged fields],
      TopicAuthorizedOperations int32, tagged fields],
    NextCursor (nullable struct: -1, or 1 then TopicName compact string, PartitionIndex int32, tagged fields),
    tagged fields

A compact array's length is an unsigned varint of n + 1 (0 = null). So one pass in Python walks each partition's
five length bytes (nothing else), and numpy gathers the fixed fields and every broker id of every list at once
into Arrow-style columns (offsets + values + validity). Anything the walk does not expect (a list of 127 or more
ids, whose length takes two varint bytes; a malformed buffer) falls back to kafka-python's own decoder for that
answer: never a wrong figure, at worst the old speed.

Each page's body after ThrottleTimeMs is kept (`Sweep.pages`): two sweeps whose requests were the same and
whose answers are byte for byte the same describe the same states, so the snapshot's consistency re-read
compares bytes, and decodes a re-read only when they differ.
"""

from __future__ import annotations

import functools
import struct
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner.kafka_log_dirs import RawHeader

LISTS = ("replicas", "isr", "elr", "last_known_elr", "offline_replicas")
NULLABLE = (False, False, True, True, False)
_HEAD = np.dtype([("error", ">i2"), ("partition", ">i4"), ("leader", ">i4"), ("leader_epoch", ">i4")])


class _Malformed(Exception):
    pass


@dataclass
class IdLists:
    """One list column: partition i's ids are values[offsets[i]:offsets[i + 1]]; valid[i] false = null."""

    offsets: np.ndarray                 # int32, n + 1
    values: np.ndarray                  # int32
    valid: np.ndarray                   # bool, n

    def row(self, i: int) -> list[int] | None:
        return self.values[self.offsets[i]:self.offsets[i + 1]].tolist() if self.valid[i] else None

    def take(self, order: np.ndarray) -> IdLists:
        counts = np.diff(self.offsets)[order]
        offsets = np.zeros(len(order) + 1, np.int32)
        np.cumsum(counts, out=offsets[1:])
        starts = self.offsets[:-1][order]
        idx = np.repeat(starts - offsets[:-1], counts) + np.arange(int(offsets[-1]), dtype=np.int64)
        return IdLists(offsets, self.values[idx], self.valid[order])

    def arrow(self) -> Any:
        import pyarrow as pa

        return pa.ListArray.from_arrays(pa.array(self.offsets, pa.int32()), pa.array(self.values, pa.int32()),
                                        mask=pa.array(~self.valid))


@dataclass
class Sweep:
    """Every partition of one DescribeTopicPartitions sweep, as columns sorted by (topic, partition)."""

    topics: list[str]                   # sorted, each once
    topic_ids: list[str | None]         # per topic (uuid text, as kafka-python gives it)
    internal: list[bool]
    problems: list[str]                 # "topic: ERROR" / "topic-p: ERROR" for every topic or partition error
    t: np.ndarray                       # int32: index into topics, per partition
    partition: np.ndarray               # int32
    error: np.ndarray                   # int16
    leader: np.ndarray                  # int32
    leader_epoch: np.ndarray            # int32
    lists: dict[str, IdLists]
    pages: tuple[bytes, ...] = field(default=(), repr=False)   # each answer's body after ThrottleTimeMs
    cursors: tuple[tuple[str, int] | None, ...] = ()            # each answer's next cursor
    fast: bool = True

    def __len__(self) -> int:
        return len(self.partition)

    def same_state(self, other: Sweep) -> bool:
        """Every partition's leader, leader epoch, replicas, ISR, ELR and last-known ELR agree (what the
        consistency re-read compares; offline replicas follow from these and the brokers' fencing)."""
        if self.topics != other.topics or not (np.array_equal(self.t, other.t) and np.array_equal(
                self.partition, other.partition) and np.array_equal(self.leader, other.leader)
                and np.array_equal(self.leader_epoch, other.leader_epoch)):
            return False
        for k in ("replicas", "isr", "elr", "last_known_elr"):
            a, b = self.lists[k], other.lists[k]
            # null and [] compare alike here, as the dict reader's tuple(v or ()) did
            if not (np.array_equal(a.offsets, b.offsets) and np.array_equal(a.values, b.values)):
                return False
        return True

    def as_dicts(self) -> dict[tuple[str, int], dict]:
        """kraft_admin.describe_topic_partitions' form, partitions only (the tests' reference)."""
        out: dict[tuple[str, int], dict] = {}
        for i in range(len(self)):
            ti = int(self.t[i])
            out[(self.topics[ti], int(self.partition[i]))] = {
                "leader": int(self.leader[i]), "leader_epoch": int(self.leader_epoch[i]),
                "replicas": self.lists["replicas"].row(i), "isr": self.lists["isr"].row(i),
                "elr": self.lists["elr"].row(i), "last_known_elr": self.lists["last_known_elr"].row(i),
                "offline_replicas": self.lists["offline_replicas"].row(i), "topic_id": self.topic_ids[ti],
                "error": _error_name(int(self.error[i])) if self.error[i] else None, "internal": self.internal[ti]}
        return out

    @classmethod
    def from_dicts(cls, parts: dict[tuple[str, int], dict]) -> Sweep:
        """A sweep from kraft_admin's dict form (the Metadata answer of a migration's hybrid phase)."""
        keys = sorted(k for k in parts if k[1] >= 0)
        names = sorted({t for t, _ in parts})
        rank = {n: i for i, n in enumerate(names)}
        first = {}
        for (t, _), v in parts.items():
            first.setdefault(t, v)
        problems = [f"{t}: {v['error']}" if p < 0 else f"{t}-{p}: {v['error']}"
                    for (t, p), v in sorted(parts.items()) if v.get("error")]
        lists = {k: _lists([parts[key].get(k) for key in keys]) for k in LISTS}
        n = len(keys)
        return cls(names, [first[t].get("topic_id") for t in names], [bool(first[t].get("internal")) for t in names],
                   problems, np.fromiter((rank[t] for t, _ in keys), np.int32, n),
                   np.fromiter((p for _, p in keys), np.int32, n), np.zeros(n, np.int16),
                   np.fromiter((parts[k]["leader"] for k in keys), np.int32, n),
                   np.fromiter((parts[k]["leader_epoch"] for k in keys), np.int32, n), lists, fast=False)


def _lists(vals: list[list[int] | None]) -> IdLists:
    counts = np.fromiter((len(v or ()) for v in vals), np.int64, len(vals))
    offsets = np.zeros(len(vals) + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    return IdLists(offsets, np.fromiter((x for v in vals for x in (v or ())), np.int32),
                   np.fromiter((v is not None for v in vals), bool, len(vals)))


def _error_name(code: int) -> str:
    from kafka import errors

    return errors.for_code(code).__name__


# --------------------------------------------------------------------------------------------- decoding
@dataclass
class _Page:
    """What the walk of one answer found: positions into the joined buffer."""

    topics: list[tuple[str, str | None, bool, int, int]]   # name, id, internal, error, partition count
    heads: list[int]
    arrays: list[int]                                     # 5 length-byte positions per partition
    cursor: tuple[str, int] | None


def _walk(b: bytes, pos: int, end: int) -> _Page:
    """One answer body b[pos:end]: topics, where each partition's head and list lengths are, the next cursor."""
    heads: list[int] = []
    arrays: list[int] = []
    h_add, a_add = heads.append, arrays.append

    def uvarint() -> int:
        nonlocal pos
        v = shift = 0
        while True:
            x = b[pos]
            pos += 1
            v |= (x & 0x7F) << shift
            if x < 0x80:
                return v
            shift += 7

    def string() -> str | None:
        nonlocal pos
        n = uvarint() - 1
        if n < 0:
            return None
        s = b[pos:pos + n].decode()
        pos += n
        return s

    def skip_tags() -> None:
        nonlocal pos
        for _ in range(uvarint()):
            uvarint()
            size = uvarint()   # read before pos is (pos += uvarint() would add to the old pos)
            pos += size

    pos += 4                                                       # ThrottleTimeMs
    topics = []
    for _ in range(uvarint() - 1):
        (error,) = struct.unpack_from(">h", b, pos)
        pos += 2
        name = string()
        if name is None:
            raise _Malformed("a topic without a name")
        tid = str(uuid.UUID(bytes=b[pos:pos + 16]))
        internal = b[pos + 16] != 0
        pos += 17
        n = uvarint() - 1
        if n < 0:
            raise _Malformed("null partitions")
        for _ in range(n):
            h_add(pos)
            pos += 14
            # ReplicaNodes, IsrNodes, EligibleLeaderReplicas, LastKnownElr, OfflineReplicas: one length byte
            # each (n + 1, 0 = null) while a list holds fewer than 127 ids
            x = b[pos]
            a_add(pos)
            pos += 4 * x - 3 if x else 1
            x = b[pos]
            a_add(pos)
            pos += 4 * x - 3 if x else 1
            x = b[pos]
            a_add(pos)
            pos += 4 * x - 3 if x else 1
            x = b[pos]
            a_add(pos)
            pos += 4 * x - 3 if x else 1
            x = b[pos]
            a_add(pos)
            pos += 4 * x - 3 if x else 1
            if b[pos]:
                skip_tags()
            else:
                pos += 1
        pos += 4                                                   # TopicAuthorizedOperations
        skip_tags()
        topics.append((name, None if tid == _ZERO else tid, internal, error, n))
    cursor = None
    marker = b[pos]
    pos += 1
    if marker == 1:
        cname = string()
        (cidx,) = struct.unpack_from(">i", b, pos)
        pos += 4
        skip_tags()
        cursor = (cname or "", cidx)
    elif marker != 0xFF:
        raise _Malformed(f"cursor marker {marker}")
    skip_tags()
    if pos != end:
        raise _Malformed("the answer's length does not match its content")
    return _Page(topics, heads, arrays, cursor)


_ZERO = str(uuid.UUID(int=0))


def decode(bodies: list[bytes]) -> Sweep:
    """The sweep in these answer bodies (each after its response header)."""
    try:
        return _fast(bodies)
    except (_Malformed, IndexError, struct.error, UnicodeDecodeError, ValueError):
        return _slow(bodies)


def cursor_of(body: bytes) -> tuple[str, int] | None:
    """The next cursor of one answer (its walk; kafka-python's decoder if the walk fails)."""
    try:
        return _walk(body, 0, len(body)).cursor
    except (_Malformed, IndexError, struct.error, UnicodeDecodeError, ValueError):
        return _slow([body]).cursors[0]


def _fast(bodies: list[bytes]) -> Sweep:
    buf = b"".join(bodies)
    pages, at = [], 0
    for body in bodies:
        pages.append(_walk(buf, at, at + len(body)))
        at += len(body)
    heads = np.fromiter((h for p in pages for h in p.heads), np.int64)
    arrays = np.fromiter((a for p in pages for a in p.arrays), np.int64).reshape(-1, 5)
    raw = np.frombuffer(buf, np.uint8)
    if len(arrays) and (raw[arrays] >= 0x80).any():     # a list of 127+ ids: its length took two bytes
        raise _Malformed("a two-byte list length")
    info: dict[str, tuple[str | None, bool]] = {}
    problems: list[str] = []
    for p in pages:
        for name, tid, internal, error, _ in p.topics:
            if error:
                problems.append(f"{name}: {_error_name(error)}")
            info.setdefault(name, (tid, internal))
    per_topic = np.fromiter((n for p in pages for *_, n in p.topics), np.int64)
    order_names = sorted(info)
    rank = {n: i for i, n in enumerate(order_names)}
    t = np.repeat(np.fromiter((rank[name] for p in pages for name, *_ in p.topics), np.int32), per_topic)
    head = raw[heads[:, None] + np.arange(14)].reshape(-1).view(_HEAD) if len(heads) else np.zeros(0, _HEAD)
    lists = {}
    for k, name in enumerate(LISTS):
        lens = raw[arrays[:, k]].astype(np.int64) - 1 if len(arrays) else np.zeros(0, np.int64)
        if not NULLABLE[k] and (lens < 0).any():
            raise _Malformed(f"{name} null")
        counts = np.maximum(lens, 0)
        offsets = np.zeros(len(counts) + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        total = int(offsets[-1])
        first = np.repeat(arrays[:, k] + 1 - 4 * offsets[:-1], counts) + 4 * np.arange(total, dtype=np.int64)
        values = raw[first[:, None] + np.arange(4)].reshape(-1).view(">i4").astype(np.int32) if total else \
            np.zeros(0, np.int32)
        lists[name] = IdLists(offsets.astype(np.int32), values, lens >= 0)
    error = head["error"].astype(np.int16)
    partition = head["partition"].astype(np.int32)
    for i in np.flatnonzero(error):
        problems.append(f"{order_names[t[i]]}-{partition[i]}: {_error_name(int(error[i]))}")
    sweep = Sweep(order_names, [info[n][0] for n in order_names], [info[n][1] for n in order_names], problems, t,
                  partition, error, head["leader"].astype(np.int32), head["leader_epoch"].astype(np.int32), lists,
                  tuple(bytes(b[4:]) for b in bodies), tuple(p.cursor for p in pages))
    return _sorted(sweep)


def _sorted(s: Sweep) -> Sweep:
    """Rows in (topic, partition) order (Kafka answers so; kept exact whatever the order of the answers)."""
    order = np.lexsort((s.partition, s.t))
    if np.array_equal(order, np.arange(len(order))):
        return s
    return Sweep(s.topics, s.topic_ids, s.internal, s.problems, s.t[order], s.partition[order], s.error[order],
                 s.leader[order], s.leader_epoch[order], {k: v.take(order) for k, v in s.lists.items()}, s.pages,
                 s.cursors, s.fast)


def _slow(bodies: list[bytes]) -> Sweep:
    """kafka-python's own decoder (the fallback, and the tests' reference)."""
    from kafka.protocol.admin import DescribeTopicPartitionsResponse

    rows: list[tuple[str, int, int, int, int, list]] = []
    info: dict[str, tuple[str | None, bool]] = {}
    problems: list[str] = []
    cursors = []
    for body in bodies:
        resp = DescribeTopicPartitionsResponse.decode(bytes(body), version=0)
        for tp in resp.topics:
            tid = str(tp.topic_id) if tp.topic_id is not None else None
            info.setdefault(tp.name, (None if tid == _ZERO else tid, bool(tp.is_internal)))
            if tp.error_code:
                problems.append(f"{tp.name}: {_error_name(tp.error_code)}")
            for p in tp.partitions:
                if p.error_code:
                    problems.append(f"{tp.name}-{p.partition_index}: {_error_name(p.error_code)}")
                rows.append((tp.name, p.partition_index, p.error_code, p.leader_id, p.leader_epoch,
                             [p.replica_nodes, p.isr_nodes, p.eligible_leader_replicas, p.last_known_elr,
                              p.offline_replicas]))
        c = resp.next_cursor
        cursors.append(None if c is None else (c.topic_name, c.partition_index))
    names = sorted(info)
    rank = {n: i for i, n in enumerate(names)}
    rows.sort(key=lambda r: (rank[r[0]], r[1]))
    lists = {name: _lists([r[5][k] for r in rows]) for k, name in enumerate(LISTS)}
    return Sweep(names, [info[n][0] for n in names], [info[n][1] for n in names], problems,
                 np.fromiter((rank[r[0]] for r in rows), np.int32, len(rows)),
                 np.fromiter((r[1] for r in rows), np.int32, len(rows)),
                 np.fromiter((r[2] for r in rows), np.int16, len(rows)),
                 np.fromiter((r[3] for r in rows), np.int32, len(rows)),
                 np.fromiter((r[4] for r in rows), np.int32, len(rows)), lists,
                 tuple(bytes(b[4:]) for b in bodies), tuple(cursors), fast=False)


# --------------------------------------------------------------------------------------------- requests
class RawAnswer:
    """What kafka-python's parser takes for the response class of a `request()`: it reads the response header
    as kafka-python does, then keeps the body's bytes (decoded later, all pages at once)."""

    def parse_header(self, buffer: Any) -> Any:
        from kafka.protocol.admin import DescribeTopicPartitionsResponse

        return DescribeTopicPartitionsResponse.parse_header(buffer, version=0)

    def decode(self, buffer: Any) -> bytes:
        return bytes(buffer.read())


def request(topics: list[str], limit: int, cursor: tuple[str, int] | None) -> Any:
    """A DescribeTopicPartitions request (all topics when `topics` is empty) whose answer comes back as bytes."""
    cls = _request_class()
    return cls(topics=[cls.TopicRequest(name=t) for t in topics], response_partition_limit=limit,
               cursor=cls.Cursor(topic_name=cursor[0], partition_index=cursor[1]) if cursor else None)


@functools.cache
def _request_class() -> type:
    from kafka.protocol.admin import DescribeTopicPartitionsRequest

    class RawDescribeTopicPartitionsRequest(DescribeTopicPartitionsRequest, init=False):
        __slots__ = ()

        def with_header(self, correlation_id: int = 0, client_id: str = "kafka-python") -> None:
            super().with_header(correlation_id=correlation_id, client_id=client_id)
            self._header = RawHeader(self._header, lambda _version: RawAnswer())

    return RawDescribeTopicPartitionsRequest


# --------------------------------------------------------------------------------------------- topic configs
TOPIC_CONFIG = 1        # DescribeConfigsResponse ConfigSource TOPIC_CONFIG: a topic's own override
TOPIC_RESOURCE = 2      # ConfigResource.Type TOPIC


class ConfigsAnswer:
    """What kafka-python's parser takes for the response class of a `configs_request()`: the body's bytes, read
    by `topic_overrides` (version 4, flexible) or, for another version, kafka-python's own decoder."""

    def __init__(self, version: int):
        self.version = version

    def parse_header(self, buffer: Any) -> Any:
        from kafka.protocol.admin import DescribeConfigsResponse

        return DescribeConfigsResponse.parse_header(buffer, version=self.version)

    def decode(self, buffer: Any) -> tuple[int, bytes]:
        return self.version, bytes(buffer.read())


def configs_request(topics: list[str]) -> Any:
    """DescribeConfigs of these topics, every key, no synonyms, no documentation; the answer comes back as bytes."""
    cls = _configs_request_class()
    return cls(resources=[cls.DescribeConfigsResource(resource_type=TOPIC_RESOURCE, resource_name=t,
                                                      configuration_keys=None) for t in topics],
               include_synonyms=False, include_documentation=False)


@functools.cache
def _configs_request_class() -> type:
    from kafka.protocol.admin import DescribeConfigsRequest

    class RawDescribeConfigsRequest(DescribeConfigsRequest, init=False):
        __slots__ = ()

        def with_header(self, correlation_id: int = 0, client_id: str = "kafka-python") -> None:
            super().with_header(correlation_id=correlation_id, client_id=client_id)
            self._header = RawHeader(self._header, ConfigsAnswer)

    return RawDescribeConfigsRequest


def topic_overrides(version: int, body: bytes) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """A DescribeConfigs answer of topics: ({topic: {key: value}} of their own overrides (ConfigSource
    TOPIC_CONFIG, value not null), {topic: error} for every resource Kafka answered with an error)."""
    try:
        if version != 4:
            raise _Malformed(f"version {version}")
        return _overrides_fast(body)
    except (_Malformed, IndexError, struct.error, UnicodeDecodeError, ValueError):
        return _overrides_slow(version, body)


def _overrides_fast(b: bytes) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    pos = 4                                                        # ThrottleTimeMs

    def uvarint() -> int:
        nonlocal pos
        v = shift = 0
        while True:
            x = b[pos]
            pos += 1
            v |= (x & 0x7F) << shift
            if x < 0x80:
                return v
            shift += 7

    def string() -> str | None:
        nonlocal pos
        n = uvarint() - 1
        if n < 0:
            return None
        s = b[pos:pos + n].decode()
        pos += n
        return s

    def skip_string() -> None:
        nonlocal pos
        x = b[pos]
        if x < 0x80:
            pos += x if x else 1
        else:
            n = uvarint() - 1
            pos += max(n, 0)

    def skip_tags() -> None:
        nonlocal pos
        for _ in range(uvarint()):
            uvarint()
            size = uvarint()
            pos += size

    out: dict[str, dict[str, str]] = {}
    errors: dict[str, str] = {}
    for _ in range(uvarint() - 1):
        (error,) = struct.unpack_from(">h", b, pos)
        pos += 2
        message = string()
        kind = b[pos]
        pos += 1
        name = string()
        if name is None:
            raise _Malformed("a resource without a name")
        own: dict[str, str] = {}
        for _ in range(uvarint() - 1):
            key = string()
            start = pos                                            # Value
            skip_string()
            source = b[pos + 1]                                    # after ReadOnly
            if source == TOPIC_CONFIG and b[start]:
                end = pos
                pos = start
                value = string()
                pos = end
                if key is not None and value is not None:
                    own[key] = value
            pos += 3                                               # ReadOnly, ConfigSource, IsSensitive
            if b[pos] != 1:                                        # Synonyms: asked for none
                raise _Malformed("synonyms in the answer")
            pos += 2                                               # the empty Synonyms, ConfigType
            skip_string()                                          # Documentation
            if b[pos]:
                skip_tags()
            else:
                pos += 1
        skip_tags()
        if kind != TOPIC_RESOURCE:
            raise _Malformed(f"resource type {kind}")
        if error:
            errors[name] = f"{_error_name(error)}" + (f" ({message})" if message else "")
        else:
            out[name] = own
    skip_tags()
    if pos != len(b):
        raise _Malformed("the answer's length does not match its content")
    return out, errors


def _overrides_slow(version: int, body: bytes) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """kafka-python's own decoder (another version, or an answer the fast reader does not expect)."""
    from kafka.protocol.admin import DescribeConfigsResponse

    resp = DescribeConfigsResponse.decode(bytes(body), version=version)
    out: dict[str, dict[str, str]] = {}
    errors: dict[str, str] = {}
    for r in resp.results:
        if r.error_code:
            errors[r.resource_name] = _error_name(r.error_code) + (f" ({r.error_message})" if r.error_message
                                                                   else "")
            continue
        out[r.resource_name] = {c.name: c.value for c in r.configs
                                if getattr(c, "config_source", -1) == TOPIC_CONFIG and c.value is not None}
    return out, errors
