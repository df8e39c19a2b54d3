"""DescribeLogDirs answers read straight into arrays (planner/kafka_admin.py asks; this reads what comes back).

kafka-python decodes a response into one Python object per partition entry: at 200k partitions that is
600,000 objects and, measured on this project's 2 cores, about two thirds of the snapshot's client time for
sizes. The answer's layout is fixed by Kafka's schema (DescribeLogDirsResponse.json, versions 1-5, flexible from
2), and every partition entry has the same width: PartitionIndex int32, PartitionSize int64, OffsetLag int64,
IsFutureKey bool, plus (flexible versions) its tagged-field count. So the reader walks the topics in Python
(name and entry count) and reads all entries of a broker at once as one numpy record array.

Anything the fast reader does not expect (tagged fields inside a partition entry, a version outside 1-5, a
malformed buffer) falls back to kafka-python's own decoder for that answer: never a wrong figure, at worst the
old speed. `request()` makes kafka-python hand this module the answer's bytes: its parser asks the in-flight
request's header for the response class, and this request's header answers with `RawAnswer` (kafka-python
3.0.12's `KafkaProtocol._process_response`: `header.get_response_class()`, then `parse_header(buffer)` and
`decode(buffer)`). The tests hold the reader to kafka-python's decoder byte for byte on the emulated brokers'
answers and to Kafka's own `kafka-log-dirs.sh` on real brokers.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MAX_VERSION = 5
_ENTRY = {False: np.dtype([("p", ">i4"), ("s", ">i8"), ("lag", ">i8"), ("fut", "u1")]),
          True: np.dtype([("p", ">i4"), ("s", ">i8"), ("lag", ">i8"), ("fut", "u1"), ("tags", "u1")])}


@dataclass
class LogDir:
    """One log dir of one broker: its error code, path, volume figures (-1 before v4) and every replica in it,
    as parallel arrays (`topics[i]` holds `counts[i]` consecutive entries)."""

    error_code: int
    log_dir: str
    total_bytes: int = -1
    usable_bytes: int = -1
    topics: list[str] = field(default_factory=list)
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    partitions: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    sizes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    future: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))


@dataclass
class Answer:
    api_version: int
    error_code: int
    dirs: list[LogDir]
    fast: bool = True           # read by this module (False: kafka-python's decoder, the fallback)


class _Malformed(Exception):
    pass


def decode(body: bytes | memoryview, version: int) -> Answer:
    """The answer (response body after its header) of DescribeLogDirs `version`."""
    try:
        return _fast(bytes(body), version)
    except (_Malformed, IndexError, struct.error, UnicodeDecodeError, ValueError):
        return from_structs(_structs(body, version), version)


def _structs(body: bytes | memoryview, version: int) -> Any:
    from kafka.protocol.admin import DescribeLogDirsResponse

    return DescribeLogDirsResponse.decode(bytes(body), version=version)


def from_structs(resp: Any, version: int) -> Answer:
    """An Answer from kafka-python's decoded response (the fallback, and the tests' reference)."""
    dirs = []
    for r in resp.results:
        names, counts, parts, sizes, fut = [], [], [], [], []
        for t in r.topics:
            names.append(t.name)
            counts.append(len(t.partitions))
            for p in t.partitions:
                parts.append(p.partition_index)
                sizes.append(p.partition_size)
                fut.append(bool(p.is_future_key))
        dirs.append(LogDir(r.error_code, r.log_dir, int(getattr(r, "total_bytes", -1)),
                           int(getattr(r, "usable_bytes", -1)), names, np.asarray(counts, np.int64),
                           np.asarray(parts, np.int32), np.asarray(sizes, np.int64), np.asarray(fut, bool)))
    return Answer(version, int(getattr(resp, "error_code", 0) or 0), dirs, fast=False)


def _fast(b: bytes, version: int) -> Answer:
    if not 1 <= version <= MAX_VERSION:
        raise _Malformed(f"version {version}")
    flex = version >= 2
    pos = 0

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

    def length() -> int:            # array or string length (compact: n + 1; -1 = null)
        nonlocal pos
        if flex:
            x = b[pos]
            if x < 0x80:
                pos += 1
                return x - 1
            return uvarint() - 1
        (n,) = struct.unpack_from(">i", b, pos)
        pos += 4
        return n

    def string() -> str:
        nonlocal pos
        if flex:
            n = length()
        else:
            (n,) = struct.unpack_from(">h", b, pos)
            pos += 2
        if n < 0:
            raise _Malformed("null string")
        s = b[pos:pos + n].decode()
        pos += n
        return s

    def skip_tags() -> None:
        nonlocal pos
        for _ in range(uvarint()):
            uvarint()
            size = uvarint()   # read before pos is (pos += uvarint() would add to the old pos)
            pos += size

    pos += 4                                                    # ThrottleTimeMs
    error = 0
    if version >= 3:
        (error,) = struct.unpack_from(">h", b, pos)
        pos += 2
    rec = _ENTRY[flex]
    width = rec.itemsize
    dirs = []
    n_results = length()
    if n_results < 0:
        raise _Malformed("null results")
    for _ in range(n_results):
        (code,) = struct.unpack_from(">h", b, pos)
        pos += 2
        d = LogDir(code, string())
        n_topics = length()
        if n_topics < 0:
            raise _Malformed("null topics")
        names, counts, starts = [], [], []
        for _ in range(n_topics):
            names.append(string())
            k = length()
            if k < 0:
                raise _Malformed("null partitions")
            counts.append(k)
            starts.append(pos)
            pos += k * width
            if flex:
                skip_tags()
        if version >= 4:
            d.total_bytes, d.usable_bytes = struct.unpack_from(">qq", b, pos)
            pos += 16
        if version >= 5:
            pos += 1                                            # IsCordoned
        if flex:
            skip_tags()
        if pos > len(b):
            raise _Malformed("short answer")
        cnt = np.asarray(counts, np.int64)
        total = int(cnt.sum())
        if total:
            first = np.repeat(np.asarray(starts, np.int64) - width * (np.cumsum(cnt) - cnt), cnt)
            at = first + width * np.arange(total, dtype=np.int64)
            raw = np.frombuffer(b, np.uint8)
            entries = raw[at[:, None] + np.arange(width)].reshape(-1).view(rec)
            if flex and entries["tags"].any():
                raise _Malformed("tagged fields in a partition entry")
            d.partitions = entries["p"].astype(np.int32)
            d.sizes = entries["s"].astype(np.int64)
            d.future = entries["fut"].astype(bool)
        d.topics, d.counts = names, cnt
        dirs.append(d)
    if flex:
        skip_tags()
    if pos != len(b):
        raise _Malformed("trailing bytes")
    return Answer(version, error, dirs)


class RawAnswer:
    """What kafka-python's parser takes for the response class of a `request()`: it reads the response header
    as kafka-python does, then hands the body to `decode`."""

    def __init__(self, version: int):
        self.version = version

    def parse_header(self, buffer: Any) -> Any:
        from kafka.protocol.admin import DescribeLogDirsResponse

        return DescribeLogDirsResponse.parse_header(buffer, version=self.version)

    def decode(self, buffer: Any) -> Answer:
        return decode(buffer.read(), self.version)


class RawHeader:
    """A request's header, unchanged, except that it names `answer(request version)` as its response class
    (this module's RawAnswer; planner.kraft_dtp's for DescribeTopicPartitions)."""

    __slots__ = ("_inner", "_answer")

    def __init__(self, inner: Any, answer: Callable[[int], Any]):
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_answer", answer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._inner, name, value)

    def get_response_class(self) -> Any:
        return self._answer(self._inner.request_api_version)


def request() -> Any:
    """A DescribeLogDirs request for every topic (topics null) whose answer comes back as an `Answer`."""
    return _request_class()(topics=None)


@functools.cache
def _request_class() -> type:
    from kafka.protocol.admin import DescribeLogDirsRequest

    class RawDescribeLogDirsRequest(DescribeLogDirsRequest, init=False):
        __slots__ = ()

        def with_header(self, correlation_id: int = 0, client_id: str = "kafka-python") -> None:
            super().with_header(correlation_id=correlation_id, client_id=client_id)
            self._header = RawHeader(self._header, RawAnswer)

    return RawDescribeLogDirsRequest
