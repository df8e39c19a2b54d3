"""The `zookeeper` connection type: where the Kafka cluster's ZooKeeper is and how to authenticate.

Fields: host = the ensemble, comma-separated (`zk1:2181,zk2:2181`; a host without a port gets the
connection's port, else 2181), schema = Kafka's chroot (`kafka` for `zookeeper.connect=.../kafka`), login and
password = ZooKeeper digest credentials (both or neither), extra (optional) = `{"kafka_conn_id": "..."}`: a connection
of the Apache Kafka provider's type whose SASL / SSL settings the brokers are asked for sizes with
(DescribeLogDirs; its bootstrap.servers is not used: the brokers are asked where they registered). The password goes only into the planner's request
(`auth`, excluded from its repr) and from there into the ZooKeeper session; Airflow masks it in task logs
because it is a connection password, and nothing here logs it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from airflow.sdk import BaseHook

DEFAULT_PORT = 2181
_HOST = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+)(?::(\d{1,5}))?$")


class ZooKeeperConnectionError(ValueError):
    """The connection's fields do not describe a ZooKeeper ensemble (the message says which field)."""


@dataclass(frozen=True)
class ZkTarget:
    """What the planner needs to reach the cluster: the connect string and the digest credentials."""

    connect: str                                              # host:port[,host:port...][/chroot]
    auth: tuple[str, str] | None = field(default=None, repr=False)
    kafka_conn_id: str | None = None                          # the brokers' security settings, for sizes

    def __str__(self) -> str:
        return self.connect + (" (digest auth)" if self.auth else "")


def connect_string(host: str | None, port: int | None = None, schema: str | None = None) -> str:
    """host(s) + port + chroot -> `h1:p1,h2:p2/chroot`; bad values raise ZooKeeperConnectionError."""
    hosts = [h.strip() for h in (host or "").split(",") if h.strip()]
    if not hosts:
        raise ZooKeeperConnectionError("the connection has no host: give the ensemble, e.g. zk1:2181,zk2:2181")
    out = []
    for h in hosts:
        if "/" in h:
            raise ZooKeeperConnectionError(
                f"host {h!r} contains a path: put Kafka's chroot in the connection's schema field, not in host")
        m = _HOST.match(h)
        if not m:
            raise ZooKeeperConnectionError(f"host {h!r} is not host or host:port")
        p = int(m.group(2) or port or DEFAULT_PORT)
        if not 0 < p < 65536:
            raise ZooKeeperConnectionError(f"host {h!r}: port {p} is out of range")
        out.append(f"{m.group(1)}:{p}")
    chroot = (schema or "").strip().strip("/")
    if chroot and not re.fullmatch(r"[A-Za-z0-9_.\-/]+", chroot):
        raise ZooKeeperConnectionError(f"chroot {chroot!r} (the schema field) is not a ZooKeeper path")
    return ",".join(out) + (f"/{chroot}" if chroot else "")


class ZooKeeperHook(BaseHook):
    """Reads a `zookeeper` connection into a ZkTarget for planner.api requests."""

    conn_name_attr = "zookeeper_conn_id"
    default_conn_name = "zookeeper_default"
    conn_type = "zookeeper"
    hook_name = "ZooKeeper (Kafka)"

    def __init__(self, zookeeper_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.zookeeper_conn_id = zookeeper_conn_id

    def get_conn(self) -> ZkTarget:
        conn = self.get_connection(self.zookeeper_conn_id)
        if conn.conn_type and conn.conn_type != self.conn_type:
            raise ZooKeeperConnectionError(
                f"connection {self.zookeeper_conn_id!r} has type {conn.conn_type!r}, not {self.conn_type!r}")
        connect = connect_string(conn.host, conn.port, conn.schema)
        login, password = conn.login or None, conn.password or None
        if bool(login) != bool(password):
            raise ZooKeeperConnectionError(
                f"connection {self.zookeeper_conn_id!r}: digest auth needs both login and password "
                f"(got only the {'login' if login else 'password'})")
        extra = conn.extra_dejson if conn.extra else {}
        kafka = extra.get("kafka_conn_id") if isinstance(extra, dict) else None
        if kafka is not None and (not isinstance(kafka, str) or not kafka.strip()):
            raise ZooKeeperConnectionError(
                f"connection {self.zookeeper_conn_id!r}: extra's kafka_conn_id must name a Kafka connection")
        return ZkTarget(connect, (login, password) if login and password else None,
                        kafka.strip() if kafka else None)

    def test_connection(self) -> tuple[bool, str]:
        """The UI's "Test" button: connect read-only and count the registered brokers."""
        try:
            target = self.get_conn()
        except Exception as e:
            return False, str(e)
        from kazoo.client import KazooClient

        auth = [("digest", f"{target.auth[0]}:{target.auth[1]}")] if target.auth else None
        client = KazooClient(hosts=target.connect, auth_data=auth, read_only=True, timeout=10.0)
        try:
            client.start(timeout=10.0)
            if not client.exists("/brokers/ids"):
                return False, f"{target.connect} holds no Kafka cluster (no /brokers/ids): check the chroot"
            return True, f"{target.connect}: {len(client.get_children('/brokers/ids'))} brokers registered"
        except Exception as e:
            return False, f"{target.connect}: {type(e).__name__}: {e}"
        finally:
            client.stop()
            client.close()
