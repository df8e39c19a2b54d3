"""An installed planner (a wheel, as the docker image installs it) runs a risk assessment without the source
tree: in process through planner.api, and through spark-submit with the job entry that ships in the package.
The core alone (the wheel with no extra: kazoo, pyarrow, pandas, numpy, OR-Tools) runs snapshot, plan, apply
and verify with `kplan` against a sandbox this full install starts (issue 23 item 5).

Cost kept low: the wheel is built once (pip's cache serves the build backend), the throwaway venv of the risk
test gets no dependencies of its own (it sees the project venv's site-packages through a .pth line, which does
not activate the editable install's finder), and both risk runs use the three-partition seed snapshot. The
core venv gets its dependencies from pip's warm cache, without pip of its own and without byte-compiling."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from apply_support import FAST, MB, Checker, drain_desc

from planner import risk
from planner import snapshot_io as sio
from planner import zk as zkmod
from planner.cluster import parse_cluster
from planner.sandbox import Sandbox

pytestmark = pytest.mark.spark
REPO = Path(__file__).resolve().parent.parent

SEED = {"brokers": [{"id": i, "rack": f"r{i}"} for i in (1, 2, 3)],
        "topics": [{"name": "payments", "partitions": [{"replicas": [1]}]},
                   {"name": "orders", "config": {"min.insync.replicas": "2"},
                    "partitions": [{"replicas": [1, 2, 3]}, {"replicas": [2, 3, 1]}, {"replicas": [3, 1, 2]}]}]}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("dist")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(d), str(REPO)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    return next(d.glob("kafka_maintenance_planner-*.whl"))


@pytest.fixture(scope="module")
def installed(tmp_path_factory, wheel) -> Path:
    """A venv outside the source tree with the planner wheel installed; returns its python."""
    d = tmp_path_factory.mktemp("install")
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(d / "venv")], check=True, timeout=120)
    py = d / "venv" / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "project-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps",
                           "--no-index", str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return py


def _env(cache: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    return {**env, "SPARK_LOCAL_IP": "127.0.0.1", **({"XDG_CACHE_HOME": str(cache)} if cache else {})}


def test_installed_wheel_runs_risk_in_process_and_through_spark_submit(installed, tmp_path):
    s = risk.snapshot_from_cluster(parse_cluster(SEED))
    snap = sio.write_snapshot(tmp_path / "snap", s.manifest, s.brokers, s.topics, s.partitions)
    code = (
        "import json, sys; from pathlib import Path; import planner; from planner import api\n"
        f"out = api.risk(api.RiskRequest(snapshot=Path({str(snap)!r}), out=Path({str(tmp_path / 'r1')!r}), "
        "drains=((1,),), modes=('failure',)))\n"
        "print(json.dumps({'file': planner.__file__, 'level': out.level}))\n"
    )
    cache = tmp_path / "cache"   # the class-data sharing archive of this installation's Spark goes here
    done = subprocess.run([str(installed), "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          env=_env(cache), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    # the JVM writes nothing on the process's stdout (planner.spark.session sends its stdout to stderr)
    got = json.loads(done.stdout)
    venv = installed.parent.parent
    assert Path(got["file"]).is_relative_to(venv) and not Path(got["file"]).is_relative_to(REPO)
    assert got["level"] == "critical"   # payments-0 has its only replica on broker 1
    summary = json.loads((tmp_path / "r1" / "summary.json").read_text())
    assert [x["name"] for x in summary["scenarios"]] == ["drain 1 [failure]"]
    # the first run left the archive of its JVM's classes; the next JVM maps it (and its results are the same)
    archives = list((cache / "kplan" / "spark-cds").glob("driver-*.jsa"))
    assert len(archives) == 1 and archives[0].stat().st_size > 10 << 20, archives

    done = subprocess.run([str(installed), "-m", "planner.cli", "risk", "--snapshot", str(snap), "--out",
                           str(tmp_path / "r2"), "--all-racks", "--mode", "failure", "--spark-submit", "--json"],
                          capture_output=True, text=True, cwd=tmp_path, env=_env(cache), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert [x["name"] for x in summary["scenarios"]] == ["rack r1 [failure]", "rack r2 [failure]",
                                                         "rack r3 [failure]"]
    r1 = summary["scenarios"][0]
    assert (r1["level"], r1["offline"], r1["rf1_hit"], r1["evaluated"]) == ("critical", 1, 1, 4)
    assert f"-XX:SharedArchiveFile={archives[0]}" in done.stderr   # the submitted command (progress line)
    entry = next(w for w in done.stderr.split() if w.endswith("drain_risk.py"))
    assert Path(entry).is_relative_to(venv), entry   # the job entry shipped in the wheel was submitted


OPTIONAL = ("airflow", "pyspark", "kafka", "plotly")   # the extras' modules: none in the core


def test_the_core_install_alone_runs_snapshot_plan_apply_verify(wheel, tmp_path, zk_connect):
    """`pip install kafka-maintenance-planner` (no extra) into a fresh venv: `kplan` snapshots, plans, applies
    and verifies a drain of broker 1 on an emulated sandbox that this (full) install starts; the cluster is
    then checked in ZooKeeper itself. What needs an extra says so in one line, writing nothing."""
    base = getattr(sys, "_base_executable", sys.executable)
    venv = tmp_path / "core"
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-compile",
                           str(wheel)], capture_output=True, text=True, timeout=600, cwd=tmp_path, env=_env())
    assert done.returncode == 0, done.stderr[-3000:]
    probe = subprocess.run([str(py), "-c", "import importlib.util as u, json; print(json.dumps({m: u.find_spec(m) "
                            f"is not None for m in {OPTIONAL + ('kazoo', 'ortools', 'pyarrow', 'pandas')!r}}}))"],
                           capture_output=True, text=True, check=True, cwd=tmp_path, env=_env())
    assert json.loads(probe.stdout) == {**dict.fromkeys(OPTIONAL, False),
                                        **dict.fromkeys(("kazoo", "ortools", "pyarrow", "pandas"), True)}

    sb = Sandbox.up(tmp_path / "sb", cluster=drain_desc(size=2 * MB), zk=zk_connect, timeout=60, **FAST)
    try:
        def kplan(*argv: str) -> subprocess.CompletedProcess:
            return subprocess.run([str(venv / "bin" / "kplan"), *argv], capture_output=True, text=True,
                                  cwd=tmp_path, env=_env(), timeout=300)

        zk = sb.connect_string
        needs = kplan("snapshot", "--zk", zk, "--out", "s0")   # sizes from the brokers: kafka-python
        assert needs.returncode == 2 and needs.stderr.count("\n") == 1, needs.stderr
        assert "reading sizes from the brokers (DescribeLogDirs) needs kafka-python, which this install lacks " \
               "(the extra kafka-maintenance-planner[kafka])" in needs.stderr and not (tmp_path / "s0").exists()
        steps = [("snapshot", "--zk", zk, "--out", "snap", "--sizes", str(sb.dir / "logdirs.json")),
                 ("plan", "drain", "--snapshot", "snap", "--brokers", "1", "--out", "run/plan"),
                 ("apply", "--zk", zk, "--plan", "run/plan"),
                 ("verify", "--zk", zk, "--plan", "run/plan", "--timeout", "60", "--poll", "0.2")]
        for argv in steps:
            ran = kplan(*argv)
            assert ran.returncode == 0, (argv, ran.stdout[-2000:], ran.stderr[-2000:])
        needs = kplan("risk", "--snapshot", "snap", "--out", "r")
        assert needs.returncode == 2 and "the risk job (Spark) needs pyspark" in needs.stderr, needs.stderr
        assert not (tmp_path / "r").exists()

        check = Checker(zkmod.connect(zk))
        try:   # the drain as the cluster has it (drain_desc: a-0 [1,2], a-1 [2,1], b-0 [1,3] held broker 1)
            parts = {(t, p): check.replicas(t, p) for t, p in (("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1))}
            assert not [k for k, r in parts.items() if 1 in r], parts
            assert {k: len(r) for k, r in parts.items()} == dict.fromkeys(parts, 2)
            assert parts[("a", 2)] == [3, 4] and parts[("b", 1)] == [4, 2]   # untouched
            assert check.throttles() == {} and check.lock_holders() == []
            assert not check.exists("/admin/reassign_partitions")
        finally:
            check.zk.stop()
            check.zk.close()
    finally:
        sb.down()
