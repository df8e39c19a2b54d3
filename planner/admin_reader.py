"""The KRaft backend's cluster reader: the whole cluster through Kafka's Admin API only, as frozen records.

It implements planner.cluster_reader.ClusterReader (the ZooKeeper reader is the other implementation), so
the snapshot's assembly (planner.snapshot_assembly) and every step after it (plan, risk) never know which
backend was read. The requests, each sent by kafka-python 3.0.12 (planner.kraft_admin):

| what                          | request (KIP)                                  | into                                  |
|-------------------------------|------------------------------------------------|---------------------------------------|
| brokers, racks, fenced        | DescribeCluster v2 (KIP-919 / KIP-1073)        | BrokerRecord (+ fenced)               |
| active controller             | DescribeQuorum of __cluster_metadata (KIP-595) | ControllerRecord (kraft=True)         |
| features, metadata.version    | ApiVersions finalized features (KIP-584)       | manifest source                       |
| leader, epoch, replicas, ISR, | DescribeTopicPartitions (KIP-966, API key 75,  | PartitionBlock                        |
| ELR, last-known ELR           | paged by its cursor)                           |                                       |
| topic configs                 | DescribeConfigs (topic overrides: DYNAMIC_TOPIC_CONFIG) | TopicRecord.config           |
| broker configs                | DescribeConfigs of each broker and the cluster default entity ("") | broker_configs   |
| reassignments                 | ListPartitionReassignments (KIP-455)           | AdminRecord + adding/removing columns |
| brokers in maintenance        | `__kplan` read to its end, read_committed (Fetch, KIP-98) | maintenance (planner/maintenance_kraft.py) |

What the Admin API does not expose is said, never guessed: a broker's epoch (-1), a partition's partition
epoch (`state_version` -1) and its leader recovery state (0), the controller epoch (the quorum's leader epoch
stands in), whether a broker is in controlled shutdown (null). KRaft has no preferred-election znode and no
topic-deletion queue (a deleted topic is gone from the metadata at once).

Hybrid (a ZooKeeper-to-KRaft migration whose KRaft controller leads while the brokers still run in ZooKeeper
mode; planner.zk_migration): ZooKeeper-mode brokers answer neither DescribeTopicPartitions nor DescribeQuorum
(Kafka 3.9's schemas list them for KRaft brokers and controllers only, not "zkBroker"), and finalize no
metadata.version. The KRaft controller sends them its metadata (UpdateMetadata, KRaftMigrationDriver:
SendRPCsToBrokersEvent and every change after), so the partitions are read from their Metadata answers
(leader, leader epoch, replicas, ISR; no ELR: the brokers do not say it, and 3.9's migration runs without it);
the controller is the one ZooKeeper's /migration names; the features stay empty. Only the ZooKeeper backend
knows the cluster is migrating, so it hands such a cluster to this reader (planner.snapshot.ZkClusterReader).

Consistency: the reads are separate requests, so the reader reads everything, then reads the partitions,
brokers and reassignments again, until two reads in a row agree (at most `max_rounds`); otherwise the
manifest says it is not consistent, as the ZooKeeper backend does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import numpy as np
import pyarrow as pa

from planner import codec, maintenance_kraft
from planner import kafka_config as kc
from planner.errors import BadInput, KafkaUnavailable
from planner.execution.kraftstore import TOPIC
from planner.kafka_admin import KafkaSecurity
from planner.kraft_dtp import Sweep
from planner.snapshot_assembly import ClusterRead, Consistency
from planner.snapshot_reader import (
    AdminRecord,
    BrokerRecord,
    ControllerRecord,
    PartitionBlock,
    Problems,
    TopicRecord,
)
from planner.zk_migration import Migration

log = logging.getLogger(__name__)

Progress = Callable[[str], None]
MAX_ROUNDS = 5
# broker configs a snapshot keeps (the ZooKeeper backend keeps every dynamic broker config; the Admin API
# answers hundreds of keys per broker, so only those the planner reads)
BROKER_KEYS = (kc.MIN_ISR, kc.UNCLEAN, kc.LEADER_THROTTLE_RATE, kc.FOLLOWER_THROTTLE_RATE)
DYNAMIC_TOPIC, DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC = (
    "DYNAMIC_TOPIC_CONFIG", "DYNAMIC_BROKER_CONFIG", "DYNAMIC_DEFAULT_BROKER_CONFIG", "STATIC_BROKER_CONFIG")

# Kafka's MetadataVersion feature levels (server-common MetadataVersion.java; 7-29 listed by Kafka 4.1.1's own
# jar, MetadataVersion.VERSIONS; 1-6 from the 3.x source)
METADATA_VERSIONS = {
    1: "3.0-IV1", 2: "3.1-IV0", 3: "3.2-IV0", 4: "3.3-IV0", 5: "3.3-IV1", 6: "3.3-IV2", 7: "3.3-IV3",
    8: "3.4-IV0", 9: "3.5-IV0", 10: "3.5-IV1", 11: "3.5-IV2", 12: "3.6-IV0", 13: "3.6-IV1", 14: "3.6-IV2",
    15: "3.7-IV0", 16: "3.7-IV1", 17: "3.7-IV2", 18: "3.7-IV3", 19: "3.7-IV4", 20: "3.8-IV0", 21: "3.9-IV0",
    22: "4.0-IV0", 23: "4.0-IV1", 24: "4.0-IV2", 25: "4.0-IV3", 26: "4.1-IV0", 27: "4.1-IV1", 28: "4.2-IV0",
    29: "4.2-IV1",
}
# DescribeTopicPartitions came with 3.7 (metadata.version 3.7-IV0 and later answer it; KIP-966)
DTP_MIN_LEVEL = 15


def metadata_version_name(level: int | None) -> str | None:
    if level is None:
        return None
    return METADATA_VERSIONS.get(int(level), f"level {int(level)}")


class AdminClusterReader:
    """ClusterReader over the Admin API (module docstring). `bootstrap`: host:port[,host:port...]."""

    backend = "kraft"

    def __init__(self, bootstrap: str, security: KafkaSecurity | None = None, timeout: float = 10.0,
                 problems: Problems | None = None, max_rounds: int = MAX_ROUNDS, migration: Migration | None = None):
        self.bootstrap = bootstrap
        # a ZooKeeper-to-KRaft migration in its hybrid phase (planner.zk_migration), as ZooKeeper showed it: the
        # KRaft controller leads, the brokers still run in ZooKeeper mode (module docstring, "Hybrid")
        self.migration = migration
        self.security = security or KafkaSecurity()
        self.timeout = timeout
        self.problems = problems or Problems(False)
        self.max_rounds = max_rounds
        self.features: dict[str, int] = {}
        self.admin: Any = None

    # ------------------------------------------------------------------------------ ClusterReader
    def source(self) -> dict[str, Any]:
        level = self.features.get("metadata.version")
        out = {"backend": "kraft", "bootstrap_servers": self.bootstrap,
               "metadata_version": metadata_version_name(level), "features": dict(sorted(self.features.items())),
               "security_protocol": self.security.protocol}
        if self.migration is not None:
            out["migration"] = {**self.migration.as_manifest(), "partitions_from": "Metadata"}
        return out

    @property
    def hybrid(self) -> bool:
        return self.migration is not None

    def read_cluster(self, say: Progress) -> ClusterRead:
        from planner import kraft_admin as ka

        say(f"connecting to {self.bootstrap} over {self.security.describe()} (Admin API)")
        try:
            self.admin = ka.connect(self.bootstrap, self.security.client_config(), self.timeout)
        except KafkaUnavailable:
            self._refuse_zookeeper_address()
            self._refuse_credentials()
            raise
        if self.hybrid:
            say("reading the cluster through the Admin API of its brokers in ZooKeeper mode (Metadata): the "
                "KRaft controller leads its migration")
            m = self.migration
            assert m is not None
            controller = ControllerRecord(m.kraft_controller_id, m.kraft_controller_epoch, m.kraft_controller_epoch,
                                          kraft=True)
        else:
            self._check_kraft()
            say(f"reading cluster metadata through the Admin API (metadata.version "
                f"{self.source()['metadata_version']})")
            controller = self._controller()
        say("reading every partition (DescribeTopicPartitions), topic configs (DescribeConfigs)")
        first = self._volatile()
        names = list(first[1].topics)
        say(f"read {len(first[1])} partitions of {len(names)} topics; reading their configs (DescribeConfigs)")
        configs, _ = ka.topic_overrides(self.admin, names)
        broker_configs = self._broker_configs(first[0])
        say("reading brokers, partitions and reassignments again, until two reads agree")
        rounds, rereads, consistent = 0, 0, True
        while True:
            again = self._volatile(first[1])
            rereads += len(again[1])
            if _same(first, again):
                break
            rounds += 1
            first = again
            if rounds >= self.max_rounds:
                consistent = False
                self.problems.by_key.setdefault("consistency", []).append({
                    "path": "DescribeTopicPartitions", "problem": f"the cluster kept changing: the partitions "
                    f"read differently in each of {self.max_rounds} re-reads; the snapshot may mix states from "
                    "different moments"})
                break
        brokers, parts, reassigning = first
        missing = [t for t in parts.topics if t not in configs]
        if missing:          # created between the first read and the last (or answered with an error then)
            got, errors = ka.topic_overrides(self.admin, missing)
            if errors:
                raise BadInput(f"DescribeConfigs refused {len(errors)} topics: " + "; ".join(
                    f"{t}: {e}" for t, e in sorted(errors.items())[:5]))
            configs.update(got)
        topics = self._topics(parts, reassigning, configs)
        admin = AdminRecord(tuple(codec.ReassignEntry(t, p, tuple(r["target"]))
                                  for (t, p), r in sorted(reassigning.items())), (), ())
        say(f"reading the brokers' maintenance state ({TOPIC}, read_committed)")
        in_maintenance = maintenance_kraft.read_entries(self.bootstrap, self.security, self.timeout, self.admin,
                                                        parts.topics)
        return ClusterRead(controller, brokers, broker_configs, admin, topics,
                           Consistency(rounds, rereads, consistent, "admin-api", 0, 0), maintenance=in_maintenance)

    def close(self) -> None:
        if self.admin is not None:
            self.admin.close()
            self.admin = None

    # ---------------------------------------------------------------------------------------- reads
    def _refuse_zookeeper_address(self) -> None:
        """No Kafka broker answered: if a ZooKeeper answers there, say so in one line (planner.probe)."""
        from planner import probe

        for server in self.bootstrap.split(","):
            addr = probe.split(server)
            if addr and probe.is_zookeeper(*addr):
                raise BadInput(f"bootstrap server {server} is a ZooKeeper server, not a Kafka broker: read a "
                               "ZooKeeper-mode cluster through its ZooKeeper connect string")

    def _refuse_credentials(self) -> None:
        """kafka-python's bootstrap reports refused SASL credentials or a failed TLS handshake only as a timeout:
        ask the first server once more through planner.kafka_admin's own connection, which tells those apart
        (docs/SNAPSHOT.md "Sizes"), and name the refusal in one line (never the secret)."""
        if self.security.protocol == "PLAINTEXT":
            return
        from planner import kafka_admin

        first = self.bootstrap.split(",")[0]
        r = kafka_admin.describe_log_dirs({-1: first}, self.security, self.timeout)[-1]
        if r.status == "auth-failed":
            raise BadInput(f"Kafka at {first} refused {self.security.describe()}: {r.error}; check the Kafka "
                           "credentials (kafka security settings)")
        if r.status == "tls-failed":
            raise BadInput(f"TLS with Kafka at {first} failed over {self.security.describe()}: {r.error}")

    def _check_kraft(self) -> None:
        """Finalized features of the cluster; a ZooKeeper-mode cluster (no metadata.version finalized) or one
        older than DescribeTopicPartitions is refused with one line."""
        from planner import kraft_admin as ka

        self.features = ka.finalized_features(self.admin)
        level = self.features.get("metadata.version")
        if level is None:
            raise BadInput(f"the Kafka cluster at {self.bootstrap} finalizes no metadata.version: its brokers run in "
                           "ZooKeeper mode (a ZooKeeper-mode cluster, or one migrating to KRaft whose brokers are not "
                           "in KRaft mode yet): read it through its ZooKeeper connect string")
        if level < DTP_MIN_LEVEL:
            raise BadInput(f"the KRaft cluster at {self.bootstrap} runs metadata.version "
                           f"{metadata_version_name(level)}, too old for DescribeTopicPartitions (3.7-IV0, Kafka 3.7, "
                           "KIP-966): upgrade its metadata.version (kafka-features.sh upgrade)")

    def _controller(self) -> ControllerRecord:
        q = self.admin.describe_metadata_quorum()
        for t in q.get("topics", []):
            for p in t.get("partitions", []):
                leader, epoch = p.get("leader_id"), p.get("leader_epoch")
                leader = -1 if leader is None else int(leader)
                epoch = -1 if epoch is None else int(epoch)
                return ControllerRecord(leader, epoch, epoch, kraft=True)
        return ControllerRecord(kraft=True)

    def _volatile(self, previous: Sweep | None = None) -> tuple[tuple[BrokerRecord, ...], Sweep, dict]:
        """What changes while a snapshot reads: brokers (fenced), every partition, reassignments. A re-read of
        the partitions that Kafka answers byte for byte as `previous` returns `previous` itself (not decoded
        again: planner.kraft_dtp)."""
        from planner import kraft_admin as ka

        brokers = tuple(self._broker(b, d) for b, d in sorted(ka.brokers(self.admin).items()))
        parts = Sweep.from_dicts(ka.metadata_partitions(self.admin)) if self.hybrid else \
            ka.partition_sweep(self.admin, previous)
        bad = parts.problems
        if bad:
            raise BadInput(f"{'Metadata' if self.hybrid else 'DescribeTopicPartitions'} refused {len(bad)} topics or partitions: {'; '.join(bad[:5])}")
        reassigning = {}
        for tp, r in self.admin.list_partition_reassignments().items():
            removing = list(r.get("removing_replicas") or [])
            reassigning[(tp.topic, tp.partition)] = {
                "replicas": list(r["replicas"]), "adding": list(r.get("adding_replicas") or []),
                "removing": removing, "target": [b for b in r["replicas"] if b not in removing]}
        return brokers, parts, reassigning

    def _broker(self, b: int, d: Mapping[str, Any]) -> BrokerRecord:
        listener = self.security.listener or self.security.protocol
        reg = codec.BrokerRegistration(b, d["host"], int(d["port"]), (f"{listener}://{d['host']}:{d['port']}",),
                                       rack=d.get("rack"),
                                       listener_security_protocol_map={listener: self.security.protocol})
        return BrokerRecord(b, reg, -1, fenced=bool(d["fenced"]), in_controlled_shutdown=None)

    def _broker_configs(self, brokers: tuple[BrokerRecord, ...]) -> Mapping[str, Mapping[str, str]]:
        """The dynamic broker configs the planner reads, as ZooKeeper keeps them: the cluster default entity
        ("<default>": DYNAMIC_DEFAULT_BROKER_CONFIG, plus a static server.properties value of min ISR or unclean
        election, which the ZooKeeper backend cannot see) and each broker's own (DYNAMIC_BROKER_CONFIG)."""
        from planner import kraft_admin as ka

        live = [str(b.id) for b in brokers if not b.fenced]
        answers = ka.configs(self.admin, "broker", live, BROKER_KEYS) if live else {}
        out: dict[str, dict[str, str]] = {}
        default: dict[str, str] = {}
        for name, cfg in answers.items():
            own = {k: c["value"] for k, c in cfg.items() if c["source"] == DYNAMIC_BROKER and c["value"] is not None}
            if own:
                out[name] = own
            for k, c in cfg.items():
                if c["value"] is not None and (c["source"] == DYNAMIC_DEFAULT
                                               or (c["source"] == STATIC and k in (kc.MIN_ISR, kc.UNCLEAN))):
                    default.setdefault(k, c["value"])
        if default:
            out[codec.DEFAULT_BROKER_ENTITY] = default
        return MappingProxyType(out)

    def _topics(self, parts: Sweep, reassigning: dict, configs: dict) -> dict[str, TopicRecord]:
        names = parts.topics
        n = len(parts)
        rank = {t: i for i, t in enumerate(names)}
        # the row of each partition in reassignment (rows are in (topic, partition) order)
        keys = (parts.t.astype(np.int64) << 32) | parts.partition.astype(np.int64)
        moving = {}
        for (t, p), r in reassigning.items():
            i = int(np.searchsorted(keys, (rank[t] << 32) | p)) if t in rank else n
            if i < n and keys[i] == (rank[t] << 32) | p:
                moving[i] = r

        def sparse(field: str) -> pa.Array:
            """A list column that is empty except on the rows in reassignment."""
            rows = sorted(moving)
            counts = np.zeros(n, np.int64)
            counts[rows] = [len(moving[i][field]) for i in rows]
            offsets = np.zeros(n + 1, np.int32)
            np.cumsum(counts, out=offsets[1:])
            values = [x for i in rows for x in moving[i][field]]
            return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(values, pa.int32()))

        table = pa.table({
            "_t": pa.array(parts.t, pa.int32()),
            "partition": pa.array(parts.partition, pa.int32()),
            "replicas": parts.lists["replicas"].arrow(),
            "adding_replicas": sparse("adding"),
            "removing_replicas": sparse("removing"),
            "has_state": pa.array(np.ones(n, dtype=bool)),
            "leader": pa.array(parts.leader, pa.int32()),
            "leader_epoch": pa.array(parts.leader_epoch, pa.int32()),
            "isr": parts.lists["isr"].arrow(),
            "controller_epoch": pa.array(np.full(n, -1, np.int32)),
            "leader_recovery_state": pa.array(np.zeros(n, np.int8)),
            "state_version": pa.array(np.full(n, -1, np.int32)),
            "state_error": pa.nulls(n, pa.string()),
            "elr": parts.lists["elr"].arrow(),
            "last_known_elr": parts.lists["last_known_elr"].arrow(),
        })
        block = PartitionBlock(tuple(names), table)
        out = {}
        for t, tid in zip(names, parts.topic_ids, strict=True):
            out[t] = TopicRecord(t, 3, _kafka_uuid(tid), MappingProxyType(dict(configs[t])), block)
        return out


def _kafka_uuid(value: str | None) -> str | None:
    """Kafka's topic id text (URL-safe base64 of the 16 bytes, no padding), as ZooKeeper's v3 topic znodes
    and Kafka's tools show it, from the uuid kafka-python decodes."""
    if not value:
        return None
    import base64
    import uuid

    return base64.urlsafe_b64encode(uuid.UUID(value).bytes).decode().rstrip("=")


def _same(a: tuple, b: tuple) -> bool:
    """Two reads of the volatile state agree (brokers and fencing, every partition's leader, epoch, ISR, ELR,
    reassignments): the partitions' answers byte for byte (the re-read returned the same sweep), or else
    every partition's state compared (planner.kraft_dtp.Sweep.same_state)."""
    return a[0] == b[0] and a[2] == b[2] and (a[1] is b[1] or a[1].same_state(b[1]))
