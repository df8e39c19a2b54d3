"""Which connection names the cluster (issue 24 item 4), without a cluster: a Kafka connection of the Apache Kafka
provider's type read through the provider's own parsing into bootstrap servers and security (the password in
no repr, str or log line), the refusals naming the connection, the ZooKeeper connection's extra naming the
Kafka connection its brokers are asked for sizes with, and the trigger check's both / neither refusal with the
form's defaults (`[kplan] kafka_conn_id` flips them). The same checks on real brokers and a real API server:
tests/test_airflow_kraft.py."""

from __future__ import annotations

import json
import logging

import pytest
from kplan_airflow.form import cluster_defaults, cluster_problem
from kplan_airflow.hooks import ZooKeeperHook
from kplan_airflow.kafka_conn import KafkaClusterHook, KafkaConnectionError
from kplan_airflow.trigger_check import trigger_problem

from planner.errors import BadInput

PW = "Zq8-kafka-secret"


def _conn(monkeypatch, conn_id: str, conn_type: str = "kafka", **fields) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": conn_type, **fields}))


def test_a_kafka_connection_names_bootstrap_servers_and_security_never_the_password(monkeypatch, caplog):
    _conn(monkeypatch, "k_prod", extra={"bootstrap.servers": "k1:9093, k2:9093", "security.protocol": "SASL_SSL",
                                        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "ops",
                                        "sasl.password": PW, "ssl.endpoint.identification.algorithm": "none",
                                        "group.id": "unused-by-the-planner"})
    caplog.set_level(logging.DEBUG)
    t = KafkaClusterHook(kafka_config_id="k_prod").target()
    assert t.bootstrap == "k1:9093,k2:9093"
    s = t.security
    assert (s.protocol, s.sasl_mechanism, s.username, s.password, s.ssl_check_hostname) == (
        "SASL_SSL", "SCRAM-SHA-512", "ops", PW, False)
    assert str(t) == "k1:9093,k2:9093 (SASL_SSL, SASL SCRAM-SHA-512 user ops; Kafka connection 'k_prod')"
    logging.getLogger("test").info("target %s %r", t, t)
    for text in (repr(t), str(t), caplog.text):
        assert PW not in text
    assert "group.id" in caplog.text   # the key the planner ignores is named (its value is not a secret)


@pytest.mark.parametrize("conn_type, extra, error, match", [
    ("zookeeper", None, KafkaConnectionError, "has type 'zookeeper', not 'kafka'"),
    ("kafka", {"security.protocol": "PLAINTEXT"}, KafkaConnectionError,
     r"Kafka connection 'k_bad': config\['bootstrap.servers'\] must be provided"),
    ("kafka", {"bootstrap.servers": "zk1:2181/kafka"}, BadInput, "has a path: a ZooKeeper connect string"),
    ("kafka", {"bootstrap.servers": "k1:9092", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
               "sasl.username": "ops"}, BadInput, "needs a username and a password"),
])
def test_a_connection_that_names_no_kafka_cluster_is_refused_naming_why(monkeypatch, conn_type, extra, error, match):
    _conn(monkeypatch, "k_bad", conn_type, **({"extra": extra} if extra else {"host": "zk1"}))
    with pytest.raises(error, match=match):
        KafkaClusterHook(kafka_config_id="k_bad").target()


def test_a_zookeeper_connection_names_the_kafka_connection_its_brokers_are_asked_with(monkeypatch):
    _conn(monkeypatch, "zk_sizes", "zookeeper", host="zk1", schema="kafka", extra={"kafka_conn_id": "k_sizes"})
    assert ZooKeeperHook("zk_sizes").get_conn().kafka_conn_id == "k_sizes"
    _conn(monkeypatch, "zk_plain", "zookeeper", host="zk1")
    assert ZooKeeperHook("zk_plain").get_conn().kafka_conn_id is None


def test_exactly_one_connection_names_the_cluster(monkeypatch):
    assert cluster_problem("zookeeper_default", None) is None
    assert cluster_problem(None, "k") is None and cluster_problem("", "k") is None and cluster_problem("None", "k") is None
    assert cluster_problem("zk", "k").startswith("both a ZooKeeper connection (zk) and a Kafka connection (k)")
    assert cluster_problem(None, " ").startswith("no cluster is named")
    monkeypatch.delenv("AIRFLOW__KPLAN__KAFKA_CONN_ID", raising=False)
    assert cluster_defaults() == {"zk_conn_id": "zookeeper_default", "kafka_conn_id": None}
    monkeypatch.setenv("AIRFLOW__KPLAN__KAFKA_CONN_ID", "k_prod")
    assert cluster_defaults() == {"zk_conn_id": None, "kafka_conn_id": "k_prod"}


@pytest.mark.parametrize("dag, conf, refused", [
    ("kafka_nightly_rebalance", {}, None),                                       # the defaults: ZooKeeper
    ("kafka_nightly_rebalance", {"kafka_conn_id": "k"}, "Cluster: both"),        # default ZooKeeper + a Kafka one
    ("kafka_nightly_rebalance", {"zk_conn_id": None, "kafka_conn_id": "k"}, None),
    ("kafka_broker_drain", {"brokers": [1], "zk_conn_id": "", "kafka_conn_id": None}, "Cluster: no cluster"),
    ("kafka_broker_return", {"brokers": [1], "zk_conn_id": "z", "kafka_conn_id": "k"}, "Cluster: both"),
    ("kafka_broker_restart", {"brokers": [1], "zk_conn_id": None}, "Cluster: no cluster"),
    ("kafka_broker_drain", {"brokers": [99], "zk_conn_id": "z", "kafka_conn_id": "k"}, "Brokers to drain: broker 99"),
    ("some_other_dag", {"zk_conn_id": "z", "kafka_conn_id": "k"}, None),
])
def test_the_trigger_check_refuses_both_or_neither(monkeypatch, dag, conf, refused):
    monkeypatch.delenv("AIRFLOW__KPLAN__KAFKA_CONN_ID", raising=False)
    known = {"brokers": [{"id": 1}, {"id": 2}], "taken_at": "t"}
    why = trigger_problem(dag, json.dumps({"conf": conf}).encode(), known)
    assert (why is None) if refused is None else (why.startswith(refused) and why.endswith("Nothing was triggered."))


def test_the_trigger_check_takes_a_kraft_deployments_defaults(monkeypatch):
    monkeypatch.setenv("AIRFLOW__KPLAN__KAFKA_CONN_ID", "k_prod")
    assert trigger_problem("kafka_nightly_rebalance", b"{}", {}) is None
    assert trigger_problem("kafka_nightly_rebalance", b'{"conf": {"zk_conn_id": "z"}}', {}).startswith("Cluster: both")


def test_a_task_of_a_run_started_otherwise_refuses_both_or_neither_and_reads_the_one_named(monkeypatch):
    """What every cluster task (snapshot, risk_after's re-read, apply, verify, the roll) calls first: a run that
    did not pass the trigger check (dag.test(), a follow-up run) fails there, with the same reason."""
    from airflow.sdk.exceptions import AirflowFailException
    from kplan_airflow.hooks import ZkTarget
    from kplan_airflow.kafka_conn import KafkaTarget
    from kplan_airflow.operators import cluster, target_fields

    with pytest.raises(AirflowFailException, match=r"^Cluster: both a ZooKeeper connection \(z\) and a Kafka"):
        cluster("z", "k")
    with pytest.raises(AirflowFailException, match="^Cluster: no cluster is named"):
        cluster(None, "")
    _conn(monkeypatch, "k_one", extra={"bootstrap.servers": "k1:9092", "security.protocol": "SASL_PLAINTEXT",
                                       "sasl.mechanism": "PLAIN", "sasl.username": "ops", "sasl.password": PW})
    _conn(monkeypatch, "zk_one", "zookeeper", host="zk1", schema="kafka")
    k = cluster(None, "k_one")
    assert isinstance(k, KafkaTarget) and target_fields(k)["bootstrap"] == "k1:9092"
    assert target_fields(k)["zk"] is None and target_fields(k)["kafka"].password == PW
    z = cluster("zk_one", "None")
    assert isinstance(z, ZkTarget) and target_fields(z) == {"zk": "zk1:2181/kafka", "auth": None}
    with pytest.raises(AirflowFailException, match="has type 'zookeeper', not 'kafka'"):
        cluster(None, "zk_one")


def test_a_kraft_request_keeps_its_none_zk_and_drops_other_nones():
    """The operators build a request from their fields, None meaning the library's default; `zk`, which has no
    default, stays None for a KRaft cluster (the Admin API writer's requests take `bootstrap` instead)."""
    from pathlib import Path

    from kplan_airflow.operators import _request

    from planner import api

    req = _request(api.VerifyRequest, {"zk": None, "plan": Path("p"), "wait": None, "fail": False})
    assert (req.zk, req.plan, req.wait, req.fail) == (None, Path("p"), 600.0, False)
    with pytest.raises(TypeError):
        _request(api.VerifyRequest, {"zk": None, "plan": Path("p"), "no_such_field": 1})
