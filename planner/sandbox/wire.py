"""The emulated brokers' Kafka protocol endpoint: each emulated broker listens on the endpoint it registers
in ZooKeeper and answers ApiVersions and DescribeLogDirs from the emulator's own model, as a Kafka 3.9
broker would (the request and response structs are kafka-python's; nothing of the planner's is used).

Kafka's rules followed (Kafka 3.9, `KafkaApis.handleApiVersionsRequest`, `handleDescribeLogDirsRequest`,
`ReplicaManager.describeLogDirs`):
- an ApiVersions request of a version the broker does not know is answered in v0 with UNSUPPORTED_VERSION
  and the broker's own ApiVersions range, so the client retries lower;
- DescribeLogDirs (v1-v4, as Kafka 3.9) with topics null describes every partition the broker holds a log
  for: here every replica the controller's assignment puts on it (a replica still copying reports what it has
  copied so far), with TotalBytes = the broker's `disk_bytes` and UsableBytes = that minus the bytes it holds;
- a log dir in error (a fault the sandbox can inject) is reported with KAFKA_STORAGE_ERROR and no topics;
- a broker that is not running (or made unreachable) closes every connection at once.
"""

from __future__ import annotations

import logging
import socket
import socketserver
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

log = logging.getLogger("planner.sandbox.wire")

API_VERSIONS, DESCRIBE_LOG_DIRS = 18, 35
SUPPORTED = {API_VERSIONS: (0, 3), DESCRIBE_LOG_DIRS: (1, 4)}   # Kafka 3.9's ranges for these two
UNSUPPORTED_VERSION, KAFKA_STORAGE_ERROR = 35, 56
DEFAULT_DISK = 4 << 40          # 4 TiB per emulated broker unless the description says `disk_bytes`


class Endpoint:
    """One emulated broker's listener. `model(broker)` returns its LogDirState, or None when the broker does not
    answer."""

    def __init__(self, broker: int, host: str, model: Callable[[int], Any]):
        self.broker = broker
        self.model = model
        endpoint = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                endpoint.serve(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server((host, 0), Handler)
        self.host, self.port = self.server.server_address[:2]
        threading.Thread(target=self.server.serve_forever, name=f"wire-{broker}", daemon=True).start()

    def close(self) -> None:
        stop_servers([self.server])

    def serve(self, sock: socket.socket) -> None:
        while True:
            head = _read(sock, 4)
            if head is None:
                return
            (size,) = struct.unpack(">i", head)
            body = _read(sock, size)
            if body is None:
                return
            state = self.model(self.broker)
            if state is None:            # not running, or made unreachable: drop the connection
                return
            reply = answer(body, state)
            if reply is None:
                return
            sock.sendall(reply)


def _read(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _framed(resp: Any, correlation: int) -> bytes:
    """Size, response header (v0; v1 for flexible versions, never for ApiVersions), body."""
    resp.with_header(correlation_id=correlation)
    return bytes(resp.encode(header=True, framed=True))


@dataclass
class LogDirState:
    """What one emulated broker's single log dir holds: every replica, grouped by topic (topics sorted, each
    topic's replicas contiguous in `pids` / `sizes`, `counts[i]` of them for `topics[i]`)."""

    log_dir: str
    total_bytes: int
    error: bool
    topics: list[str]
    counts: np.ndarray           # int64 (T,)
    pids: np.ndarray             # int32 (N,)
    sizes: np.ndarray            # int64 (N,) bytes each replica holds now

    @property
    def usable_bytes(self) -> int:
        return max(0, int(self.total_bytes) - int(self.sizes.sum()))


def describe_log_dirs_structs(version: int, state: LogDirState, wanted: dict[str, set[int]] | None) -> Any:
    """The DescribeLogDirs response as kafka-python's own structs (every version; `wanted` filters partitions).
    The reference `describe_log_dirs_frame` is checked against, byte for byte (tests/test_sizes_from_brokers.py)."""
    from kafka.protocol.admin import DescribeLogDirsResponse

    R = DescribeLogDirsResponse.DescribeLogDirsResult
    T, P = R.DescribeLogDirsTopic, R.DescribeLogDirsTopic.DescribeLogDirsPartition
    if state.error:
        result = R(error_code=KAFKA_STORAGE_ERROR, log_dir=state.log_dir, topics=[], total_bytes=-1, usable_bytes=-1)
    else:
        topics = []
        ends = np.cumsum(state.counts)
        for name, end, n in zip(state.topics, ends.tolist(), state.counts.tolist(), strict=True):
            keep = [(int(p), int(z)) for p, z in zip(state.pids[end - n:end], state.sizes[end - n:end], strict=True)
                    if wanted is None or int(p) in wanted.get(name, ())]
            if keep:
                topics.append(T(name=name, partitions=[P(partition_index=p, partition_size=z, offset_lag=0,
                                                         is_future_key=False) for p, z in keep]))
        result = R(error_code=0, log_dir=state.log_dir, topics=topics, total_bytes=int(state.total_bytes),
                   usable_bytes=state.usable_bytes)
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=[result], version=version)


# One partition entry: PartitionIndex int32, PartitionSize int64, OffsetLag int64, IsFutureKey bool, and from v2
# (flexible versions) an empty tagged-field section. Big-endian, packed.
_PART = {False: np.dtype([("p", ">i4"), ("s", ">i8"), ("lag", ">i8"), ("fut", "u1")]),
         True: np.dtype([("p", ">i4"), ("s", ">i8"), ("lag", ">i8"), ("fut", "u1"), ("tags", "u1")])}


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def describe_log_dirs_frame(version: int, correlation: int, state: LogDirState) -> bytes:
    """The framed DescribeLogDirs response (all topics) written directly, as Kafka's generated
    DescribeLogDirsResponseData serializes it (versions 1-4; flexible from 2: compact strings and arrays, tagged
    fields, response header v1; ErrorCode from 3; TotalBytes / UsableBytes from 4). The replicas' entries are one
    packed numpy record array: an emulated broker of a 200k-partition sandbox answers 3,000 replicas in well
    under a millisecond, where building kafka-python structs took ~8 ms a broker (200 brokers share one Python
    process here; a real broker answers in its own JVM)."""
    flex = version >= 2

    def string(text: str) -> bytes:
        raw = text.encode()
        return _uvarint(len(raw) + 1) + raw if flex else struct.pack(">h", len(raw)) + raw

    def array(n: int) -> bytes:
        return _uvarint(n + 1) if flex else struct.pack(">i", n)

    tags = b"\x00" if flex else b""
    out = [struct.pack(">i", correlation), tags, struct.pack(">i", 0)]        # header; ThrottleTimeMs
    if version >= 3:
        out.append(struct.pack(">h", 0))                                       # ErrorCode
    out.append(array(1))
    if state.error:
        out += [struct.pack(">h", KAFKA_STORAGE_ERROR), string(state.log_dir), array(0)]
        total, usable = -1, -1
    else:
        out += [struct.pack(">h", 0), string(state.log_dir), array(len(state.topics))]
        rec = np.zeros(len(state.pids), dtype=_PART[flex])
        rec["p"] = state.pids
        rec["s"] = state.sizes
        raw = rec.tobytes()
        width = rec.dtype.itemsize
        start = 0
        for name, n in zip(state.topics, state.counts.tolist(), strict=True):
            out += [string(name), array(n), raw[start * width:(start + n) * width], tags]
            start += n
        total, usable = int(state.total_bytes), state.usable_bytes
    if version >= 4:
        out.append(struct.pack(">qq", total, usable))
    out += [tags, tags]                                                        # result's, response's tagged fields
    body = b"".join(out)
    return struct.pack(">i", len(body)) + body


def answer(frame: bytes, state: Any) -> bytes | None:
    """The framed response to one framed-less request `frame` (api key, version, correlation id, ...)."""
    from kafka.protocol.admin import DescribeLogDirsRequest
    from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

    api_key, version, correlation = struct.unpack(">hhi", frame[:8])
    if api_key == API_VERSIONS:
        lo, hi = SUPPORTED[API_VERSIONS]
        keys = [ApiVersionsResponse.ApiVersion(api_key=k, min_version=a, max_version=b)
                for k, (a, b) in sorted(SUPPORTED.items())]
        if not lo <= version <= hi:
            resp = ApiVersionsResponse(error_code=UNSUPPORTED_VERSION, api_keys=keys, throttle_time_ms=0, version=0)
        else:
            ApiVersionsRequest.decode(frame, version=version, header=True)
            resp = ApiVersionsResponse(error_code=0, api_keys=keys, throttle_time_ms=0, version=version)
        return _framed(resp, correlation)
    if api_key == DESCRIBE_LOG_DIRS:
        lo, hi = SUPPORTED[DESCRIBE_LOG_DIRS]
        if not lo <= version <= hi:
            return None                  # Kafka closes the connection on an unsupported request version
        req = DescribeLogDirsRequest.decode(frame, version=version, header=True)
        if req.topics is None and version >= 1:
            return describe_log_dirs_frame(version, correlation, state)
        wanted = {t.topic: set(t.partitions) for t in req.topics or ()}
        return _framed(describe_log_dirs_structs(version, state, wanted), correlation)
    return None                          # anything else: not a broker this emulator models


def stop_servers(servers: Iterable[socketserver.BaseServer], timeout: float = 10.0) -> None:
    """End these servers' serve_forever() loops, all together, and close their sockets.

    socketserver's shutdown() returns once the loop has noticed the request, which it checks only between two
    select() calls: up to its poll interval (0.5 s) later. One after the other, a daemon's six brokers and its
    control server took ~2 s to stop. Here each shutdown is requested at once, and each loop is woken by a
    connection to its own socket (its handler reads end-of-stream and returns), so they all end in
    milliseconds; a loop that does not wake is still ended by the poll interval."""
    servers = list(servers)
    requests = [threading.Thread(target=s.shutdown, name="server-shutdown", daemon=True) for s in servers]
    for t in requests:
        t.start()
    deadline = time.monotonic() + timeout
    for s, t in zip(servers, requests, strict=True):
        while t.is_alive() and time.monotonic() < deadline:
            try:
                with socket.create_connection(s.server_address[:2], timeout=0.2):
                    pass
            except OSError:
                pass
            t.join(0.02)
    for s in servers:
        s.server_close()
