"""Kafka Maintenance Planner: snapshot, risk replay, optimizer, apply and verify for ZooKeeper-mode Kafka."""

__version__ = "0.1.0"
