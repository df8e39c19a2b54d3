"""Provider metadata for the `apache_airflow_provider` entry point: the `zookeeper` connection type and the
`[kplan]` config section. Airflow reads this without importing the hook."""

from __future__ import annotations

from typing import Any

RUNS_ROOT_DEFAULT = "{AIRFLOW_HOME}/kplan-runs"


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "kafka-maintenance-planner",
        "name": "Kafka Maintenance Planner",
        "description": "Drain and rebalance Kafka clusters (ZooKeeper mode through ZooKeeper, KRaft through the "
                       "Admin API): snapshot, drain risk (Spark), OR-Tools plans reviewed in the Airflow UI, apply "
                       "and verify.",
        "connection-types": [
            {
                "connection-type": "zookeeper",
                "hook-class-name": "kplan_airflow.hooks.ZooKeeperHook",
                "hook-name": "ZooKeeper (Kafka)",
                "ui-field-behaviour": {
                    "hidden-fields": [],
                    "relabeling": {"host": "Hosts", "schema": "Chroot", "login": "Digest user",
                                   "password": "Digest password"},
                    "placeholders": {"host": "zk1:2181,zk2:2181,zk3:2181", "port": "2181",
                                     "schema": "kafka (Kafka's chroot, without the leading /)",
                                     "login": "only when ZooKeeper ACLs need digest auth",
                                     "extra": '{"kafka_conn_id": "kafka_brokers"} (optional: a Kafka connection '
                                              'whose SASL / SSL settings the brokers are asked for sizes with)'},
                },
            }
        ],
        "config": {
            "kplan": {
                "description": "Kafka Maintenance Planner: where runs are stored and how applies are serialised.",
                "options": {
                    "runs_root": {
                        "description": "Folder holding one run folder per DAG run (snapshot, risk, plan, apply, "
                                       "verify). Workers, the API server (review pages) and Spark executors "
                                       "must all see it at this path.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "/data/kplan/runs",
                        "default": RUNS_ROOT_DEFAULT,
                    },
                    "kafka_conn_id": {
                        "description": "A KRaft deployment's cluster: the Apache Kafka provider connection the "
                                       "DAGs' Kafka connection field defaults to (their ZooKeeper connection field "
                                       "then defaults to empty). Unset: the ZooKeeper connection zookeeper_default.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "kafka_default",
                        "default": None,
                    },
                    "apply_pool": {
                        "description": "Airflow pool (1 slot) every apply task runs in, so a manual drain and "
                                       "the nightly rebalance never apply at the same time (apply also holds "
                                       "a ZooKeeper lock).",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "kplan_apply",
                        "default": "kplan_apply",
                    },
                },
            }
        },
    }
