"""Kafka's jars from Maven Central: fetched once into the cache, used offline afterwards, a failed fetch is an
error carrying Maven's own words."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from planner.errors import BadInput
from planner.kafka import jars as kjars

pytestmark = pytest.mark.kafka


def test_the_cached_jars_hold_broker_and_tools_and_need_no_maven(kafka_jars, monkeypatch):
    names = set(kafka_jars.manifest["jars"])
    assert {"kafka_2.13-3.9.2.jar", "kafka-tools-3.9.2.jar", "kafka-clients-3.9.2.jar"} <= names
    assert kafka_jars.reassign_class == "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
    assert all((kafka_jars.lib / n).stat().st_size == size for n, size in kafka_jars.manifest["jars"].items())
    monkeypatch.setenv("PATH", "/nonexistent")  # no mvn, no java: a complete cache is all it takes
    again = kjars.ensure_jars("3.9.2")
    assert again.lib == kafka_jars.lib and again.manifest == kafka_jars.manifest


def test_an_incomplete_cache_is_never_used(tmp_path, monkeypatch):
    monkeypatch.setenv(kjars.CACHE_ENV, str(tmp_path))
    root = tmp_path / "3.9.2"
    (root / "lib").mkdir(parents=True)
    (root / kjars.MANIFEST).write_text(json.dumps({"jars": {"a.jar": 3, "b.jar": 1}, "classes": {}}))
    (root / "lib" / "a.jar").write_bytes(b"abc")
    assert kjars.cached("3.9.2") is None  # b.jar missing
    (root / "lib" / "b.jar").write_bytes(b"xy")
    assert kjars.cached("3.9.2") is None  # b.jar has the wrong size
    (root / "lib" / "b.jar").write_bytes(b"x")
    assert kjars.cached("3.9.2") is not None


def test_a_failed_fetch_is_an_error_with_mavens_message_and_leaves_no_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(kjars.CACHE_ENV, str(tmp_path))
    with pytest.raises(kjars.KafkaJarsError) as e:
        kjars.ensure_jars("3.9.99")
    assert "3.9.99" in str(e.value) and "[ERROR]" in str(e.value)
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []


def test_missing_maven_and_bad_versions_are_named(tmp_path, monkeypatch):
    monkeypatch.setenv(kjars.CACHE_ENV, str(tmp_path))
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(kjars.KafkaJarsError, match="make setup"):
        kjars.ensure_jars("3.6.2")
    for bad in ("3.9", "latest", "2.3.1"):
        with pytest.raises(BadInput):
            kjars.ensure_jars(bad)
    # Kafka 4 is fetched (the kraft engine runs it) but has no ZooKeeper mode; KRaft needs 3.7 or later
    with pytest.raises(kjars.KafkaJarsError, match="make setup"):
        kjars.ensure_jars("4.0.0")
    with pytest.raises(BadInput, match="no ZooKeeper mode"):
        kjars.parse_version("4.0.0")
    with pytest.raises(BadInput, match="too old for the kraft engine"):
        kjars.parse_version("3.6.2", "kraft")
    assert kjars.parse_version("4.1.1", "kraft") == (4, 1, 1)


def test_kafka_4_fetches_the_log4j2_binding_its_maven_artifacts_lack(monkeypatch):
    monkeypatch.setattr(kjars, "maven_executable", lambda: "mvn")
    assert "-Dkplan.log4j2=true" in kjars.maven_command("4.1.1", Path("/x"), offline=False)
    assert "-Dkplan.log4j2=true" not in kjars.maven_command("3.9.2", Path("/x"), offline=True)
    assert "<id>log4j2-binding</id>" in kjars.pom_path().read_text()


def test_the_pom_ships_inside_the_package_with_the_version_as_a_parameter():
    pom = kjars.pom_path().read_text()
    assert os.path.basename(kjars.pom_path()) == "pom.xml"
    assert "<kafka.version>3.9.2</kafka.version>" in pom and "${kafka.version}" in pom
    assert "kafka-tools" in pom and "kafka_${scala.binary.version}" in pom
