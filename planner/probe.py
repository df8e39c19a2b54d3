"""Which server answers at an address, ZooKeeper or a Kafka broker: for the one-line error when one is given
where the other belongs (--zk HOST:PORT of a Kafka broker, --bootstrap-server of a ZooKeeper). Standard
library only, a few bytes each way, asked only after the expected client failed to connect.

- ZooKeeper answers the four-letter word `srvr` with "Zookeeper version: ..." or, when four-letter words are
  not allowed (ZooKeeper 3.5+ default list), with "srvr is not executed because it is not in the whitelist."
  (NettyServerCnxn / NIOServerCnxn); either names ZooKeeper.
- A Kafka broker answers ApiVersions v0 (API key 18: size, api_key, api_version, correlation_id, client_id)
  with a response carrying the same correlation id, as every Kafka version since 0.10 does (KIP-35).
"""

from __future__ import annotations

import socket
import struct

CORRELATION = 0x6B706C6E          # "kpln"


def _ask(host: str, port: int, payload: bytes, timeout: float, want: int) -> bytes:
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(payload)
            got = b""
            while len(got) < want:
                chunk = s.recv(want - len(got))
                if not chunk:
                    break
                got += chunk
            return got
    except OSError:
        return b""


def is_zookeeper(host: str, port: int, timeout: float = 2.0) -> bool:
    answer = _ask(host, port, b"srvr", timeout, 64)
    return answer.startswith(b"Zookeeper version") or b"not in the whitelist" in answer or \
        b"not executed" in answer


def is_kafka(host: str, port: int, timeout: float = 2.0) -> bool:
    client = b"kplan-probe"
    body = struct.pack(">hhih", 18, 0, CORRELATION, len(client)) + client
    answer = _ask(host, port, struct.pack(">i", len(body)) + body, timeout, 8)
    return len(answer) == 8 and struct.unpack(">ii", answer)[1] == CORRELATION


def split(server: str) -> tuple[str, int] | None:
    host, sep, port = server.strip().rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)
