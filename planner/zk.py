"""The one way the planner talks to ZooKeeper: kazoo sessions with bounded connect time, digest auth from
the environment, chroot handling, and the cluster checks every command needs first.

Credentials never come from code or arguments that end up in logs: `--zk-auth-env VAR` names an
environment variable holding `user:password` (default `KPLAN_ZK_AUTH`); Airflow passes a connection's
login/password the same way.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import AuthFailedError, NoAuthError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry
from kazoo.security import make_digest_acl

from planner import codec
from planner.errors import BadInput, KraftMigration, NotAKafkaCluster, ZkUnavailable
from planner.zk_migration import Migration, classify

log = logging.getLogger(__name__)

DEFAULT_AUTH_ENV = "KPLAN_ZK_AUTH"
_HOSTS_RE = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+(,[A-Za-z0-9_.\-\[\]:]+)*$")


@dataclass(frozen=True)
class ZkTarget:
    """A parsed `HOST:PORT[,HOST:PORT...][/chroot]` connect string."""

    hosts: str
    chroot: str | None

    @property
    def connect_string(self) -> str:
        return self.hosts + (self.chroot or "")

    def __str__(self) -> str:
        return self.connect_string


def parse_connect(zk: str) -> ZkTarget:
    if not zk or not isinstance(zk, str):
        raise BadInput("a ZooKeeper connect string HOST:PORT[/chroot] is required")
    hosts, sep, chroot = zk.partition("/")
    if not _HOSTS_RE.match(hosts):
        raise BadInput(f"bad ZooKeeper connect string {zk!r}: expected HOST:PORT[,HOST:PORT...][/chroot]")
    for h in hosts.split(","):
        port = h.rsplit(":", 1)[1] if ":" in h else "2181"
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise BadInput(f"bad port in ZooKeeper connect string {zk!r}")
    chroot_path = None
    if sep:
        chroot_path = "/" + chroot.strip("/")
        if chroot_path == "/":
            chroot_path = None
        elif "//" in chroot_path or any(part in (".", "..") for part in chroot_path.split("/")[1:]):
            raise BadInput(f"bad chroot in ZooKeeper connect string {zk!r}")
    return ZkTarget(hosts, chroot_path)


def auth_from_env(env_var: str | None = None) -> tuple[str, str] | None:
    """`user:password` from the named environment variable (default KPLAN_ZK_AUTH), or None."""
    name = env_var or DEFAULT_AUTH_ENV
    value = os.environ.get(name)
    if value is None:
        if env_var:
            raise BadInput(f"environment variable {env_var} (ZooKeeper digest credentials) is not set")
        return None
    user, sep, password = value.partition(":")
    if not sep or not user:
        raise BadInput(f"{name} must hold digest credentials as user:password")
    return user, password


# kazoo's client and connection log through this logger (KazooClient(logger=...)): at DEBUG kazoo logs every
# request it sends, including the digest credentials of the Auth request, so the logger carries a filter that
# removes every credential any session of this process was given. The CLI keeps it at ERROR unless -v.
SESSION_LOG = logging.getLogger("planner.zk.session")


class _Redact(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self.secrets: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            msg = record.getMessage()
            if any(x in msg for x in self.secrets):
                for x in sorted(self.secrets, key=len, reverse=True):
                    msg = msg.replace(x, "***")
                record.msg, record.args = msg, None
        return True


_REDACT = _Redact()
SESSION_LOG.addFilter(_REDACT)


def redact(*secrets: str) -> None:
    """Never let these strings reach a log line of a ZooKeeper session."""
    _REDACT.secrets.update(x for x in secrets if x)


def _check_resolvable(target: ZkTarget) -> None:
    """Name an unresolvable host as such (kazoo would retry it silently until the timeout)."""
    hosts = [h.rsplit(":", 1)[0].strip("[]") if ":" in h else h for h in target.hosts.split(",")]
    failures = []
    for h in hosts:
        try:
            socket.getaddrinfo(h, None)
            return
        except socket.gaierror as e:
            failures.append((h, e))
    names = ", ".join(h for h, _ in failures)
    if all(e.errno == socket.EAI_AGAIN for _, e in failures):
        raise ZkUnavailable(f"cannot resolve ZooKeeper host {names} right now (temporary DNS failure)")
    raise BadInput(f"cannot resolve ZooKeeper host {names}: no such host name (check the connect string)")


def connect(zk: str | ZkTarget, auth: tuple[str, str] | None = None, timeout: float = 10.0,
            read_only: bool = False) -> KazooClient:
    """Start a kazoo session or raise ZkUnavailable within about `timeout` seconds."""
    target = parse_connect(zk) if isinstance(zk, str) else zk
    _check_resolvable(target)
    auth_data = None
    if auth:
        redact(f"{auth[0]}:{auth[1]}", auth[1])
        auth_data = [("digest", f"{auth[0]}:{auth[1]}")]
    client = KazooClient(
        hosts=target.connect_string,
        timeout=max(timeout, 4.0),
        connection_retry=KazooRetry(max_tries=-1, delay=0.2, max_delay=1.0),
        command_retry=KazooRetry(max_tries=5, delay=0.1, max_delay=2.0),
        auth_data=auth_data,
        read_only=read_only,
        logger=SESSION_LOG,
    )
    try:
        with warnings.catch_warnings():
            # "No chroot path exists": every command checks for the cluster itself (require_kafka) and says so
            warnings.filterwarnings("ignore", message="No chroot path exists")
            client.start(timeout=timeout)
    except KazooTimeoutError:
        _close(client)
        raise ZkUnavailable(
            f"could not connect to ZooKeeper at {target.hosts} within {timeout:.0f}s "
            "(is it running and reachable?)"
        ) from None
    except AuthFailedError:
        _close(client)
        raise BadInput(f"ZooKeeper at {target.hosts} rejected the digest credentials") from None
    except NoAuthError:
        # kazoo checks that the chroot exists; an ACL-protected chroot answers NOAUTH to that.
        _close(client)
        who = "the digest credentials given" if auth else "a session without credentials"
        raise BadInput(
            f"ZooKeeper at {target.hosts} denied {who} access to {target.chroot} (NOAUTH): the znodes are "
            "ACL-protected; give digest credentials user:password (auth)"
        ) from None
    return client


def _close(client: KazooClient) -> None:
    try:
        client.stop()
    finally:
        client.close()


@contextmanager
def session(zk: str | ZkTarget, auth: tuple[str, str] | None = None, timeout: float = 10.0
            ) -> Iterator[KazooClient]:
    client = connect(zk, auth=auth, timeout=timeout)
    try:
        yield client
    finally:
        _close(client)


def digest_acl(user: str, password: str):
    """Full-permission digest ACL for `user` (what a secured cluster's znodes carry)."""
    return make_digest_acl(user, password, all=True)


def require_kafka(client: KazooClient, where: str = "") -> None:
    """Refuse a chroot that holds no Kafka cluster (no /brokers/ids and no /brokers/topics)."""
    has_ids = client.exists(codec.BROKER_IDS) is not None
    has_topics = client.exists(codec.TOPICS) is not None
    if not (has_ids or has_topics):
        root = where or (client.chroot or "/")
        missing = ("the chroot does not exist" if client.chroot and client.exists("/") is None
                   else "/brokers/ids and /brokers/topics are missing")
        raise NotAKafkaCluster(
            f"no Kafka cluster at {root}: {missing} "
            "(wrong chroot? Kafka's zookeeper.connect may end in a path like /kafka)"
        )


def kraft_migration_state(client: KazooClient) -> Migration | None:
    """The cluster's ZooKeeper-to-KRaft migration state (planner.zk_migration: /migration, /controller and the
    brokers registered in ZooKeeper), or None in ZooKeeper mode."""
    try:
        migration: bytes | None = client.get(codec.MIGRATION)[0]
    except NoNodeError:
        migration = None
    controller = epoch = -1
    try:
        c = codec.decode_controller(client.get(codec.CONTROLLER)[0])
        controller, epoch = c.broker_id, c.kraft_controller_epoch
    except NoNodeError:
        pass
    try:
        brokers = len(client.get_children(codec.BROKER_IDS))
    except NoNodeError:
        brokers = 0
    return classify(migration, controller, epoch, brokers)


def refuse_kraft_read(client: KazooClient) -> Migration | None:
    """Refuse to read a cluster through ZooKeeper once the KRaft controller leads its migration (ZooKeeper then
    holds only the copy the controller writes); the migration state, or None in ZooKeeper mode."""
    m = kraft_migration_state(client)
    if m is not None and m.authoritative != "zookeeper":
        raise KraftMigration(m.read_refusal(), migration=m)
    return m


def refuse_kraft_migration(client: KazooClient) -> None:
    """The one refusal of a ZooKeeper write during a migration: it names the state and what to do (every state
    of a migration makes ZooKeeper writes unsafe: planner.zk_migration)."""
    m = kraft_migration_state(client)
    if m is not None:
        raise KraftMigration(m.write_refusal(), migration=m)
