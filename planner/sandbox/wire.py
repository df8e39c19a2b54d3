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
from collections.abc import Callable
from typing import Any

log = logging.getLogger("planner.sandbox.wire")

API_VERSIONS, DESCRIBE_LOG_DIRS = 18, 35
SUPPORTED = {API_VERSIONS: (0, 3), DESCRIBE_LOG_DIRS: (1, 4)}   # Kafka 3.9's ranges for these two
UNSUPPORTED_VERSION, KAFKA_STORAGE_ERROR = 35, 56
DEFAULT_DISK = 4 << 40          # 4 TiB per emulated broker unless the description says `disk_bytes`


class Endpoint:
    """One emulated broker's listener. `model(broker)` returns (log dir, total bytes, replicas) where replicas
    is a list of (topic, [(partition, size)]), or None when the broker does not answer."""

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
        self.server.shutdown()
        self.server.server_close()

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


def answer(frame: bytes, state: Any) -> bytes | None:
    """The framed response to one framed-less request `frame` (api key, version, correlation id, ...)."""
    from kafka.protocol.admin import DescribeLogDirsRequest, DescribeLogDirsResponse
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
        log_dir, total, error, replicas = state
        wanted = None if req.topics is None else {t.topic: set(t.partitions) for t in req.topics}
        R = DescribeLogDirsResponse.DescribeLogDirsResult
        T, P = R.DescribeLogDirsTopic, R.DescribeLogDirsTopic.DescribeLogDirsPartition
        if error:
            result = R(error_code=KAFKA_STORAGE_ERROR, log_dir=log_dir, topics=[], total_bytes=-1, usable_bytes=-1)
        else:
            topics, used = [], 0
            for topic, parts in replicas:
                keep = [(p, s) for p, s in parts if wanted is None or p in wanted.get(topic, ())]
                used += sum(s for _, s in parts)
                if keep:
                    topics.append(T(name=topic, partitions=[P(partition_index=p, partition_size=s, offset_lag=0,
                                                              is_future_key=False) for p, s in keep]))
            result = R(error_code=0, log_dir=log_dir, topics=topics, total_bytes=total,
                       usable_bytes=max(0, total - used))
        resp = DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=[result], version=version)
        return _framed(resp, correlation)
    return None                          # anything else: not a broker this emulator models
