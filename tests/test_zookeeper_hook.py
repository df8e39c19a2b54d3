"""The `zookeeper` connection type: registered through the provider entry point, fields mapped to a connect
string (hosts, port, chroot from schema) and digest auth from login/password, the password never in a repr
or a log line, bad fields refused with the field named, and the UI's Test button against a real ZooKeeper."""

from __future__ import annotations

import json
import logging

import pytest
from kplan_airflow.hooks import ZkTarget, ZooKeeperConnectionError, ZooKeeperHook, connect_string


def _conn(monkeypatch, conn_id: str, **fields) -> ZooKeeperHook:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "zookeeper", **fields}))
    return ZooKeeperHook(conn_id)


@pytest.mark.parametrize("host, port, schema, want", [
    ("zk1:2181,zk2:2182", None, "kafka", "zk1:2181,zk2:2182/kafka"),
    ("zk1,zk2", 2888, None, "zk1:2888,zk2:2888"),
    ("zk1", None, "/kafka/prod/", "zk1:2181/kafka/prod"),
    (" zk1:2181 , 10.0.0.5 ", None, "", "zk1:2181,10.0.0.5:2181"),
    ("[::1]:2181", None, "k", "[::1]:2181/k"),
])
def test_connect_string(host, port, schema, want):
    assert connect_string(host, port, schema) == want


@pytest.mark.parametrize("host, schema, field", [
    ("", None, "no host"), ("zk1:2181/kafka", None, "schema field"), ("zk1:99999", None, "out of range"),
    ("zk 1", None, "host or host:port"), ("zk1", "ka fka", "chroot"),
])
def test_bad_fields_are_refused_naming_the_field(host, schema, field):
    with pytest.raises(ZooKeeperConnectionError, match=field):
        connect_string(host, None, schema)


def test_connection_from_environment_with_digest_auth_never_shown(monkeypatch, caplog):
    hook = _conn(monkeypatch, "zk_prod", host="zk1:2181,zk2:2181", schema="kafka", login="kplan",
                 password="s3cret-Pa55")
    target = hook.get_conn()
    assert target == ZkTarget("zk1:2181,zk2:2181/kafka", ("kplan", "s3cret-Pa55"))
    caplog.set_level(logging.DEBUG)
    logging.getLogger("test").info("target %s %r", target, target)
    for text in (repr(target), str(target), caplog.text):
        assert "s3cret-Pa55" not in text
    assert "digest auth" in str(target)


@pytest.mark.parametrize("fields, missing", [({"login": "kplan"}, "login"), ({"password": "x"}, "password")])
def test_digest_auth_needs_both_fields(monkeypatch, fields, missing):
    with pytest.raises(ZooKeeperConnectionError, match=f"only the {missing}"):
        _conn(monkeypatch, "zk_half", host="zk1", **fields).get_conn()


def test_wrong_connection_type_is_refused(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_NOT_ZK", json.dumps({"conn_type": "postgres", "host": "db"}))
    with pytest.raises(ZooKeeperConnectionError, match="'postgres', not 'zookeeper'"):
        ZooKeeperHook("not_zk").get_conn()


def test_registered_through_the_provider_entry_point():
    from airflow.providers_manager import ProvidersManager

    pm = ProvidersManager()
    assert pm.providers["kafka-maintenance-planner"].data["connection-types"][0]["connection-type"] == "zookeeper"
    hook = pm.hooks["zookeeper"]
    assert hook is not None and hook.hook_class_name == "kplan_airflow.hooks.ZooKeeperHook"
    assert hook.connection_id_attribute_name == "zookeeper_conn_id"
    assert pm.field_behaviours["zookeeper"]["relabeling"]["schema"] == "Chroot"


def test_test_button_against_a_real_zookeeper(monkeypatch, zk_server, zk_client, zk_connect):
    from planner import loader

    loader.load_cluster(zk_client, {"brokers": [{"id": 1}, {"id": 2}, {"id": 3}], "topics": []})
    hosts, _, chroot = zk_connect.partition("/")
    ok, message = _conn(monkeypatch, "zk_t", host=hosts, schema=chroot).test_connection()
    assert ok and "3 brokers registered" in message
    ok, message = _conn(monkeypatch, "zk_e", host=hosts, schema=chroot + "_nothing_here").test_connection()
    assert not ok and "no Kafka cluster" in message
