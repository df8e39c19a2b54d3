"""kafka-utils' replication groups from the brokers' racks (for bench/bench_rebalance_spread.py).

kafka-utils' default parser puts every broker in one group, so its rebalance would ignore racks; this one takes
the `rack` of each broker's registration (/brokers/ids/<id>), the rule kplan and Kafka's AdminUtils follow.
Loaded by kafka-cluster-manager (`--group-parser bench/kafka_utils_rack.py`) inside its own throwaway venv; it
imports only kafka-utils.
"""

from kafka_utils.kafka_cluster_manager.cluster_info.replication_group_parser import (  # type: ignore[import-not-found]
    ReplicationGroupParser,
)


class RackParser(ReplicationGroupParser):
    def get_replication_group(self, broker):  # noqa: ANN001, ANN201 (kafka-utils' interface)
        return (broker.metadata or {}).get("rack")
