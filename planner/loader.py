"""Write a cluster description into ZooKeeper in Kafka's exact znode formats.

Used by tests, benchmarks, the demo and the sandbox. Fast because it writes in multi-op transactions,
several in flight at once, in three waves (parents before children), instead of one create per round trip.
Broker registrations are ephemeral, as Kafka's are: they live as long as the kazoo session that wrote
them, so a caller that wants "alive" brokers keeps that client open (the sandbox instead lets each
emulated broker register itself and passes `brokers=False`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError

from planner import codec
from planner.cluster import Cluster, parse_cluster

log = logging.getLogger(__name__)

# Kafka creates these persistent paths when a broker first starts (KafkaZkClient.createTopLevelPaths).
KAFKA_PERSISTENT_PATHS = [
    "/consumers",
    "/admin",
    "/admin/delete_topics",
    "/brokers",
    "/brokers/ids",
    "/brokers/topics",
    "/brokers/seqid",
    "/config",
    "/config/changes",
    "/config/topics",
    "/config/clients",
    "/config/users",
    "/config/brokers",
    "/config/ips",
    "/isr_change_notification",
    "/latest_producer_id_block",
    "/log_dir_event_notification",
    "/cluster",
]

MAX_TXN_BYTES = 512 * 1024  # well under ZooKeeper's default jute.maxbuffer (1 MiB)
MAX_TXN_OPS = 1000
IN_FLIGHT = 4


@dataclass
class LoadResult:
    znodes: int
    seconds: float


def ensure_kafka_paths(client: KazooClient) -> None:
    for p in KAFKA_PERSISTENT_PATHS:
        client.ensure_path(p)


def _batches(ops: Iterable[tuple[str, bytes]]) -> Iterable[list[tuple[str, bytes]]]:
    batch: list[tuple[str, bytes]] = []
    size = 0
    for path, data in ops:
        cost = len(path) + len(data) + 32
        if batch and (size + cost > MAX_TXN_BYTES or len(batch) >= MAX_TXN_OPS):
            yield batch
            batch, size = [], 0
        batch.append((path, data))
        size += cost
    if batch:
        yield batch


def create_many(client: KazooClient, ops: Iterable[tuple[str, bytes]], ephemeral: bool = False) -> int:
    """Create persistent (or ephemeral) znodes in pipelined multi-op transactions. Parents must exist.

    Raises the first error any transaction reports (e.g. NodeExistsError) after all in-flight ones end.
    """
    pending = []
    count = 0
    errors: list[Exception] = []

    def drain(limit: int) -> None:
        while len(pending) > limit:
            batch, res = pending.pop(0)
            results = res.get()
            for (path, _), r in zip(batch, results, strict=True):
                if isinstance(r, Exception):
                    errors.append(type(r)(f"{path}: {r!r}"))
                    break

    for batch in _batches(ops):
        txn = client.transaction()
        for path, data in batch:
            txn.create(path, data, ephemeral=ephemeral)
        pending.append((batch, txn.commit_async()))
        count += len(batch)
        drain(IN_FLIGHT)
    drain(0)
    if errors:
        raise errors[0]
    return count


def register_broker(client: KazooClient, reg: codec.BrokerRegistration) -> None:
    client.create(codec.broker_path(reg.broker_id), codec.encode_broker(reg), ephemeral=True)


def load_cluster(
    client: KazooClient,
    desc: dict[str, Any] | Cluster,
    *,
    brokers: bool = True,
    controller: bool = True,
    progress: Callable[[str], None] | None = None,
) -> LoadResult:
    """Write the whole cluster under the client's chroot (which is created if missing).

    brokers: register the alive brokers (ephemeral, in this client's session).
    controller: write /controller (ephemeral) and /controller_epoch as an elected controller would.
    """
    started = time.monotonic()
    cluster = desc if isinstance(desc, Cluster) else parse_cluster(desc)
    if client.chroot:
        # kazoo prefixes the chroot on every path, so create it through a helper without the prefix.
        chroot, client.chroot = client.chroot, ""
        try:
            client.ensure_path(chroot)
        finally:
            client.chroot = chroot
    ensure_kafka_paths(client)
    say = progress or (lambda msg: log.info(msg))
    now = str(int(time.time() * 1000))
    count = 0

    if cluster.broker_defaults:
        client.create(codec.broker_config_path(codec.DEFAULT_BROKER_ENTITY), codec.encode_config(cluster.broker_defaults))
    for b in cluster.brokers:
        if b.config:
            client.create(codec.broker_config_path(b.id), codec.encode_config(b.config))
    if controller:
        client.create(codec.CONTROLLER_EPOCH, codec.encode_controller_epoch(cluster.controller_epoch))
        count += 1

    def wave1():
        for t in cluster.topics:
            ta = codec.TopicAssignment(
                partitions={i: p.replicas for i, p in enumerate(t.partitions)},
                adding_replicas={i: p.adding for i, p in enumerate(t.partitions) if p.adding},
                removing_replicas={i: p.removing for i, p in enumerate(t.partitions) if p.removing},
                topic_id=t.topic_id,
                version=t.version,
            )
            yield codec.topic_path(t.name), codec.encode_topic(ta)
            yield codec.topic_config_path(t.name), codec.encode_config(t.config)
            if t.deleting:
                yield f"{codec.DELETE_TOPICS}/{t.name}", b""

    def wave2():
        for t in cluster.topics:
            yield codec.partitions_path(t.name), b""

    def wave3():
        for t in cluster.topics:
            for i, p in enumerate(t.partitions):
                if p.has_state:
                    yield f"{codec.partitions_path(t.name)}/{i}", b""

    def wave4():
        for t in cluster.topics:
            for i, p in enumerate(t.partitions):
                if p.has_state:
                    st = codec.PartitionState(p.leader, p.leader_epoch, cluster.controller_epoch, p.isr,
                                              p.leader_recovery_state)
                    yield codec.state_path(t.name, i), codec.encode_partition_state(st)

    for name, wave in (("topics", wave1), ("partition dirs", wave2), ("partitions", wave3), ("states", wave4)):
        n = create_many(client, wave())
        count += n
        say(f"loaded {n} {name} znodes")

    if cluster.reassignment:
        client.create(codec.REASSIGN, codec.encode_reassignment(cluster.reassignment))
        count += 1
    if cluster.preferred_election:
        client.create(codec.PREFERRED_ELECTION, codec.encode_preferred_election(cluster.preferred_election))
        count += 1
    if brokers:
        for b in cluster.brokers:
            if b.alive:
                register_broker(client, codec.broker_for(b.id, b.rack, b.host, b.port, now))
                count += 1
    if controller and cluster.controller_id is not None:
        try:
            client.create(
                codec.CONTROLLER,
                codec.encode_controller(codec.Controller(cluster.controller_id, now)),
                ephemeral=True,
            )
            count += 1
        except NodeExistsError:
            pass
    return LoadResult(count, time.monotonic() - started)
