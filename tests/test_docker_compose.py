"""docker/ cannot run here (no Docker engine), so check what can be checked without one: the compose file
parses and its references resolve; the Kafka brokers form one ZooKeeper-mode cluster on three racks; every
Airflow component shares one configuration (DB, JWT secret, connections, run folder); the connections point
at services that exist, on the ports they listen on; the run folder volume is where the config says, in
every container that reads or writes it (including the Spark worker); images are pinned and match
pyproject.toml; the Dockerfile installs the project non-editable with Java 17 and copies what exists."""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
COMPOSE = DOCKER / "docker-compose.yml"
DOCKERFILE = DOCKER / "Dockerfile.airflow"
AIRFLOW_SERVICES = ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


def _pins() -> dict[str, str]:
    """Every pinned distribution, of the core and of the extras (an extra naming the project's own is no pin)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = project["dependencies"] + [d for ds in project["optional-dependencies"].values() for d in ds]
    return dict(d.split("==", 1) for d in deps if "==" in d)


def _conn(env: dict, conn_id: str) -> dict:
    return json.loads(env[f"AIRFLOW_CONN_{conn_id.upper()}"])


def _mounts(svc: dict) -> dict[str, str]:
    """container path -> named volume (or host path)"""
    out = {}
    for v in svc.get("volumes", []):
        src, dst = v.split(":")[:2]
        out[dst] = src
    return out


def test_compose_parses_and_references_resolve(compose, services):
    declared_volumes = set(compose.get("volumes") or {})
    for name, svc in services.items():
        for dep in (svc.get("depends_on") or {}):
            assert dep in services, f"{name} depends on unknown service {dep}"
        assert "image" in svc, f"{name} has no image"
        for src in _mounts(svc).values():
            if not src.startswith((".", "/")):
                assert src in declared_volumes, f"{name} mounts undeclared volume {src}"
    host_ports = [p.split(":")[0] for svc in services.values() for p in svc.get("ports", [])]
    assert len(host_ports) == len(set(host_ports)), f"host port published twice: {host_ports}"
    expected = {"zookeeper", "kafka-1", "kafka-2", "kafka-3", "postgres", "airflow-init", "spark-master",
                "spark-worker", *AIRFLOW_SERVICES}
    assert expected <= set(services), f"missing services: {expected - set(services)}"


def test_images_are_pinned(services):
    for name, svc in services.items():
        image = svc["image"]
        assert ":" in image and not image.endswith((":latest", ":3", ":16")), f"{name}: unpinned image {image}"
        if "build" in svc:
            assert svc["build"]["dockerfile"] == "docker/Dockerfile.airflow"
            assert (COMPOSE.parent / svc["build"]["context"] / svc["build"]["dockerfile"]).resolve() == DOCKERFILE
    built = {svc["image"] for svc in services.values() if "build" in svc}
    assert built == {"kafka-maintenance-planner-airflow:local"}, "one image for Airflow and Spark"


def test_kafka_brokers_form_one_zookeeper_mode_cluster(services):
    kafkas = {n: s for n, s in services.items() if n.startswith("kafka-")}
    assert len(kafkas) == 3
    ids = [s["environment"]["KAFKA_BROKER_ID"] for s in kafkas.values()]
    assert len(set(ids)) == len(ids), f"duplicate broker ids {ids}"
    racks = {s["environment"]["KAFKA_BROKER_RACK"] for s in kafkas.values()}
    assert len(racks) == len(kafkas), "each broker should sit on its own rack"
    connects = {s["environment"]["KAFKA_ZOOKEEPER_CONNECT"] for s in kafkas.values()}
    assert connects == {"zookeeper:2181/kafka"}
    data_volumes = set()
    for n, s in kafkas.items():
        env = s["environment"]
        assert "KAFKA_PROCESS_ROLES" not in env, "process.roles would switch the broker to KRaft"
        # Kafka 3.9 is the last ZooKeeper-mode release line: Confluent Platform 7.9 ships it.
        assert re.fullmatch(r"confluentinc/cp-kafka:7\.9\.\d+", s["image"]), s["image"]
        host = env["KAFKA_ADVERTISED_LISTENERS"].split("//")[1].split(":")[0]
        assert host == n == s["hostname"], f"{n} advertises {host}"
        assert s["depends_on"]["zookeeper"]["condition"] == "service_healthy"
        data_volumes.add(_mounts(s)["/var/lib/kafka/data"])
    assert len(data_volumes) == 3, "each broker needs its own log volume"
    assert services["zookeeper"]["image"].startswith("zookeeper:3.9.")


def test_airflow_components_share_one_configuration(services):
    envs = [services[n]["environment"] for n in (*AIRFLOW_SERVICES, "airflow-init")]
    for env in envs[1:]:
        assert env == envs[0], "Airflow components must share DB, JWT secret, Fernet key and connections"
    env = envs[0]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert urlparse(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]).hostname == "postgres"
    assert env["AIRFLOW__API_AUTH__JWT_SECRET"], "api-server and workers must share a JWT secret"
    exec_url = urlparse(env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"])
    assert exec_url.hostname == "airflow-apiserver" and exec_url.path == "/execution/"
    api_port = int(services["airflow-apiserver"]["ports"][0].split(":")[1])
    assert exec_url.port == api_port == 8080
    assert {"command" in services[n] for n in AIRFLOW_SERVICES} == {True}
    assert [services[n]["command"][0] for n in AIRFLOW_SERVICES] == [
        "api-server", "scheduler", "dag-processor", "triggerer"]
    for n in AIRFLOW_SERVICES:
        assert services[n]["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"


def test_connections_point_at_real_services(services):
    env = services["airflow-scheduler"]["environment"]
    zk = _conn(env, "zookeeper_default")
    assert zk["conn_type"] == "zookeeper"
    host, port = zk["host"].split(":")
    assert host in services and services[host]["ports"][0].endswith(f":{port}")
    kafka_chroot = services["kafka-1"]["environment"]["KAFKA_ZOOKEEPER_CONNECT"].split("/", 1)[1]
    assert zk["schema"] == kafka_chroot, "the planner must read Kafka's chroot"
    spark = _conn(env, "spark_default")
    assert spark["conn_type"] == "spark"
    master_host = urlparse(spark["host"]).hostname
    master = services[master_host]
    cmd = master["command"]
    assert cmd[0] == "org.apache.spark.deploy.master.Master"
    assert cmd[cmd.index("--port") + 1] == str(spark["port"])
    assert cmd[cmd.index("--host") + 1] == master_host == master["hostname"]
    worker = services["spark-worker"]
    assert worker["command"][-1] == f"spark://{master_host}:{spark['port']}"
    # the Spark driver runs in the scheduler (LocalExecutor); executors connect back to its hostname
    assert services["airflow-scheduler"]["hostname"] == "airflow-scheduler"


def test_run_folder_is_shared_where_it_is_read_and_written(compose, services):
    env = services["airflow-scheduler"]["environment"]
    root = env["AIRFLOW__KPLAN__RUNS_ROOT"]
    volumes = {_mounts(services[n]).get(root) for n in (*AIRFLOW_SERVICES, "spark-worker")}
    assert len(volumes) == 1 and None not in volumes, f"{root} must be one named volume everywhere: {volumes}"
    assert volumes.pop() in compose["volumes"]
    # the image creates the folder owned by the airflow user, so the fresh named volume inherits it
    assert re.search(rf"mkdir -p {re.escape(root)}\b", DOCKERFILE.read_text())
    init = " ".join(services["airflow-init"]["command"])
    assert "airflow db migrate" in init
    assert f"airflow pools set {env['AIRFLOW__KPLAN__APPLY_POOL']} 1 " in init
    # a deferred verify must not hold the apply pool's one slot while it waits (docs/APPLY.md "In Airflow")
    assert "--include-deferred" not in init


def test_dockerfile_installs_the_project_non_editable_with_java(services):
    pins = _pins()
    text = DOCKERFILE.read_text()
    assert f"FROM apache/airflow:{pins['apache-airflow']}-python3.11" in text
    assert f'"apache-airflow=={pins["apache-airflow"]}"' in text
    assert "openjdk-17-jre-headless" in text and "JAVA_HOME=/usr/lib/jvm/java-17-openjdk-" in text
    install = re.search(r"pip install (.+)", text).group(1)
    assert " -e " not in f" {install} " and "--editable" not in install, "the image must not use -e"
    copies = re.findall(r"^COPY\s+(?:--\S+\s+)*(.+?)\s+(\S+)$", text, re.M)
    copied = set()
    for src, dst in copies:
        for item in src.split():
            assert (ROOT / item).exists(), f"Dockerfile copies {item}, which the repository lacks"
            copied.add(item)
        if "dags" in src:
            assert dst.rstrip("/") == services["airflow-scheduler"]["environment"]["AIRFLOW__CORE__DAGS_FOLDER"]
    assert {"pyproject.toml", "planner", "spark", "plugins", "dags"} <= copied
    # the build context is the repository root: its ignore file must let every copied path through
    rules = [ln.strip() for ln in (DOCKER / "Dockerfile.airflow.dockerignore").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    for item in copied:
        allowed = False
        for rule in rules:
            neg = rule.startswith("!")
            if fnmatch.fnmatch(item, rule.lstrip("!")):
                allowed = neg
        assert allowed, f"the .dockerignore hides {item} from the build"
    for name in ("spark-master", "spark-worker"):
        assert services[name]["entrypoint"][-1] == "spark-class", "Spark from the pyspark wheel in the image"


def test_the_install_carries_the_airflow_package_and_its_provider_entry_point():
    """The image installs the project non-editable: kplan_airflow (under plugins/) must be a package of the
    distribution, with its templates, and the provider entry point must name a module of it."""
    import glob

    from setuptools import find_packages

    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    find = conf["tool"]["setuptools"]["packages"]["find"]
    found = {p for where in find["where"] for p in find_packages(where=str(ROOT / where), include=find["include"])}
    assert {"planner", "planner.jobs", "kplan_airflow", "kplan_airflow.review"} <= found
    data = conf["tool"]["setuptools"]["package-data"]["kplan_airflow"]
    templates = {Path(f).name for pat in data for f in glob.glob(str(ROOT / "plugins" / "kplan_airflow" / pat))}
    assert {"base.html", "plan.html", "plans.html"} <= templates
    entry = conf["project"]["entry-points"]["apache_airflow_provider"]["provider_info"]
    module, func = entry.split(":")
    assert (ROOT / "plugins" / Path(*module.split("."))).with_suffix(".py").is_file() and func == "get_provider_info"
    extras = conf["project"]["optional-dependencies"]
    assert "plotly" in {d.split("==")[0] for d in extras["plotly"]}, "the review UI serves its plotly.js"
    assert "kafka-maintenance-planner[kafka,spark,plotly]" in extras["airflow"], "the image's Airflow has them all"
