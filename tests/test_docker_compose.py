"""docker/ cannot run here (no Docker engine), so check what can be checked: the compose file parses,
references resolve, the Kafka brokers form one ZooKeeper-mode cluster, and the images match our pins."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker" / "docker-compose.yml"


def _compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_compose_parses_and_dependencies_exist():
    services = _compose()["services"]
    for name, svc in services.items():
        for dep in (svc.get("depends_on") or {}):
            assert dep in services, f"{name} depends on unknown service {dep}"
    host_ports = [p.split(":")[0] for svc in services.values() for p in svc.get("ports", [])]
    assert len(host_ports) == len(set(host_ports)), f"host port published twice: {host_ports}"


def test_kafka_brokers_form_one_zookeeper_mode_cluster():
    services = _compose()["services"]
    kafkas = {n: s for n, s in services.items() if n.startswith("kafka-")}
    assert len(kafkas) >= 3
    ids = [s["environment"]["KAFKA_BROKER_ID"] for s in kafkas.values()]
    assert len(set(ids)) == len(ids), f"duplicate broker ids {ids}"
    racks = {s["environment"]["KAFKA_BROKER_RACK"] for s in kafkas.values()}
    assert len(racks) == len(kafkas), "each broker should sit on its own rack"
    connects = {s["environment"]["KAFKA_ZOOKEEPER_CONNECT"] for s in kafkas.values()}
    assert connects == {"zookeeper:2181/kafka"}
    for s in kafkas.values():
        env = s["environment"]
        assert "KAFKA_PROCESS_ROLES" not in env, "process.roles would switch the broker to KRaft"
        # Kafka 3.9 is the last ZooKeeper-mode release line: cp-kafka 7.9.x ships it.
        assert re.fullmatch(r"confluentinc/cp-kafka:7\.[4-9]\.\d+", s["image"]), s["image"]
        host = env["KAFKA_ADVERTISED_LISTENERS"].split("//")[1].split(":")[0]
        assert host in services, f"advertised host {host} is not a compose service"


def test_airflow_matches_pins_and_planner_connection():
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    airflow_pin = next(p.split("==")[1] for p in pins if p.startswith("apache-airflow=="))
    dockerfile = (ROOT / "docker" / "Dockerfile.airflow").read_text()
    assert f"FROM apache/airflow:{airflow_pin}-" in dockerfile
    assert f'"apache-airflow=={airflow_pin}"' in dockerfile
    for src in re.findall(r"^COPY\s+(?:--\S+\s+)*(.+?)\s+\S+$", dockerfile, re.M):
        for item in src.split():
            assert (ROOT / item).exists(), f"Dockerfile copies {item}, which the repository lacks"
    services = _compose()["services"]
    api = services["airflow-apiserver"]
    assert api["environment"]["AIRFLOW_CONN_KAFKA_ZK"] == "zookeeper://zookeeper:2181/kafka"
    assert api["environment"]["AIRFLOW__CORE__EXECUTOR"] in {"LocalExecutor", "CeleryExecutor"}
