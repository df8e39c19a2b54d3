"""A KRaft cluster named by a connection of the Apache Kafka provider's type (conn type `kafka`).

The connection's extra is the client config (the provider's "Config Dict"): `bootstrap.servers` names the
cluster, `security.protocol`, `sasl.mechanism`, `sasl.username`, `sasl.password` and `ssl.*` say how to reach
it. The provider's own parsing reads it (`KafkaBaseHook._build_config`: the extra, `bootstrap.servers`
required, allow-listed callbacks resolved), then the planner's `KafkaSecurity` takes the same keys
(planner.api.kafka_security). The secrets go only into the request's `kafka` field (excluded from its repr)
and from there into the Kafka client; Airflow masks the extra's `sasl.password` / `ssl.key.password` in task
logs because their names are sensitive, and nothing here logs them.

Imported at run time only (it imports the provider, which imports confluent-kafka): never at DAG parse.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook


class KafkaConnectionError(ValueError):
    """The connection does not describe a Kafka cluster (the message names the connection and the field)."""


@dataclass(frozen=True)
class KafkaTarget:
    """What the planner needs to reach a KRaft cluster: its bootstrap servers and the client's security."""

    conn_id: str
    bootstrap: str
    security: Any = field(repr=False)          # planner.kafka_admin.KafkaSecurity (holds the secrets)

    def __str__(self) -> str:
        s = self.security
        how = s.protocol + (f", SASL {s.sasl_mechanism} user {s.username}" if s.protocol.startswith("SASL") else "")
        return f"{self.bootstrap} ({how}; Kafka connection {self.conn_id!r})"


class KafkaClusterHook(KafkaBaseHook):
    """The Apache Kafka provider's hook, read for the planner instead of building a confluent-kafka client."""

    def target(self) -> KafkaTarget:
        from planner.api import bootstrap_servers, kafka_security

        conn_id = self.kafka_config_id
        conn = self.get_connection(conn_id)
        if conn.conn_type != self.conn_type:
            raise KafkaConnectionError(f"connection {conn_id!r} has type {conn.conn_type!r}, not {self.conn_type!r} "
                                       "(the Apache Kafka provider's): a KRaft cluster is named by a Kafka connection "
                                       "whose extra holds bootstrap.servers and the security settings")
        try:
            config = self._build_config()
        except ValueError as e:   # the provider's own refusals: no bootstrap.servers, a callback not allowed
            raise KafkaConnectionError(f"Kafka connection {conn_id!r}: {e}") from None
        return KafkaTarget(conn_id, bootstrap_servers(str(config["bootstrap.servers"])), kafka_security(config))
