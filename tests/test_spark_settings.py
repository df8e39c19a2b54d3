"""The risk job's Spark settings are built once (planner.spark.settings) and reach every way the job starts:
the in-process session, `kplan risk --spark-submit` and Airflow's SparkSubmitOperator (api.risk_submit).
No JVM is started here."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from planner import api, risk, risk_run
from planner import snapshot_io as sio
from planner.cluster import parse_cluster
from planner.spark import settings

SEED = {"brokers": [{"id": i, "rack": f"r{i}"} for i in (1, 2, 3)],
        "topics": [{"name": "orders", "partitions": [{"replicas": [1, 2]}, {"replicas": [2, 3]}]}]}


def _log4j(java_options: str) -> Path:
    found = re.findall(r"-Dlog4j\.configurationFile=file:(\S+)", java_options)
    assert len(found) == 1, java_options
    return Path(found[0])


def test_the_driver_reads_a_log4j_file_that_exists_and_logs_to_stderr():
    """A configuration file the JVM cannot read leaves log4j on its defaults, which print to stdout (the
    output of `kplan risk --json`): the option names a file that exists, holding the job's configuration."""
    f = _log4j(settings.submit_conf()["spark.driver.extraJavaOptions"])
    assert f.is_file()
    text = f.read_text()
    assert "appender.console.target = SYSTEM_ERR" in text and "rootLogger.level = error" in text
    assert _log4j(settings.session_conf()["spark.driver.extraJavaOptions"]) == f


def test_every_way_to_start_the_job_gets_the_same_settings(tmp_path, monkeypatch):
    monkeypatch.delenv("KPLAN_SPARK_DRIVER_MEMORY", raising=False)
    s = risk.snapshot_from_cluster(parse_cluster(SEED))
    snap = sio.write_snapshot(tmp_path / "snap", s.manifest, s.brokers, s.topics, s.partitions)
    req = api.RiskRequest(snapshot=snap, out=tmp_path / "out", drains=((1,),), driver_memory="3g")
    submit = api.risk_submit(req)
    session = settings.session_conf("3g")
    assert submit.driver_memory == session.pop("spark.driver.memory") == "3g"
    assert dict(submit.conf) == session
    assert submit.conf["spark.sql.shuffle.partitions"] == "4"   # the job's own, not Spark's 200
    cmd = risk_run.spark_submit_command(req)
    pairs = [cmd[i + 1] for i, w in enumerate(cmd) if w == "--conf"]
    assert pairs == [f"{k}={v}" for k, v in submit.conf.items()]
    assert cmd[cmd.index("--driver-memory") + 1] == "3g"
    assert cmd[-len(submit.args) - 1:] == [str(submit.application), *submit.args]
    monkeypatch.setenv("KPLAN_SPARK_DRIVER_MEMORY", "5g")
    assert api.risk_submit(dataclasses.replace(req, driver_memory=None)).driver_memory == "5g"


def test_the_driver_maps_a_class_archive_once_there_is_one(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    archive = settings.class_archive()
    assert archive is not None and archive.is_relative_to(tmp_path) and not archive.exists()
    opts = settings.session_conf()["spark.driver.extraJavaOptions"]
    assert "-XX:+RecordDynamicDumpInfo" in opts and "SharedArchiveFile" not in opts   # a later dump needs it
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"archive")
    for conf in (settings.session_conf(), settings.submit_conf()):
        opts = conf["spark.driver.extraJavaOptions"]
        assert f"-XX:SharedArchiveFile={archive}" in opts and "RecordDynamicDumpInfo" not in opts
        assert "-Xlog:cds*=off" in opts   # an archive that does not fit is skipped silently
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "another-jvm"))   # another JVM: another archive (or none)
    assert settings.class_archive() != archive


def test_saving_an_archive_evicts_the_least_recently_used_not_the_oldest(tmp_path, monkeypatch):
    """Several checkouts share ~/.cache/kplan/spark-cds: one whose archive was made long ago but mapped just now
    keeps it when another checkout saves its own and the folder is full; the one used longest ago goes. The dump
    is a stand-in `jcmd` (a shell script writing the file): no Spark, no JVM."""
    import os
    import types

    from pyspark import SparkContext

    from planner.spark import session

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cds = tmp_path / "cache" / "kplan" / "spark-cds"
    cds.mkdir(parents=True)
    keep = settings.KEEP_ARCHIVES
    made = [cds / f"driver-{i:016x}.jsa" for i in range(keep)]   # a full folder, made a day apart, oldest first
    for age, archive in zip(range(keep, 0, -1), made, strict=True):
        archive.write_bytes(b"archive")
        archive.chmod(0o444)                   # as the JVM writes them
        t = 1_700_000_000 - age * 86_400
        os.utime(archive, (t, t))
    assert f"-XX:SharedArchiveFile={made[0]}" in settings.java_options(made[0])   # the oldest is mapped: used now

    jdk = tmp_path / "jdk" / "bin"
    jdk.mkdir(parents=True)
    (jdk / "java").write_text("")
    (jdk / "jcmd").write_text('#!/bin/sh\n[ "$2 $3" = "VM.cds dynamic_dump" ] && printf dump > "$4"\n')
    (jdk / "jcmd").chmod(0o755)
    new = cds / "driver-ffffffffffffffff.jsa"
    monkeypatch.setattr(session, "java", lambda: jdk / "java")
    monkeypatch.setattr(session, "class_archive", lambda: new)
    monkeypatch.setattr(SparkContext, "_gateway", types.SimpleNamespace(
        proc=types.SimpleNamespace(pid=os.getpid(), poll=lambda: None)), raising=False)
    conf = types.SimpleNamespace(get=lambda key, default="": "-XX:+RecordDynamicDumpInfo")
    spark = types.SimpleNamespace(sparkContext=types.SimpleNamespace(getConf=lambda: conf))
    session.save_class_archive(spark)

    assert new.read_bytes() == b"dump"
    left = sorted(p.name for p in cds.iterdir())
    assert made[1].name not in left                                   # the least recently used went
    assert left == sorted([made[0].name, *(p.name for p in made[2:]), new.name])   # the one used now stayed
