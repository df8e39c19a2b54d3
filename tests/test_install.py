"""An installed planner (a wheel, as the docker image installs it) runs a risk assessment without the source
tree: in process through planner.api, and through spark-submit with the job entry that ships in the package.

Cost kept low: the wheel is built once (pip's cache serves the build backend), the throwaway venv gets no
dependencies of its own (it sees the project venv's site-packages through a .pth line, which does not
activate the editable install's finder), and both runs use the three-partition seed snapshot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from planner import risk
from planner import snapshot_io as sio
from planner.cluster import parse_cluster

pytestmark = pytest.mark.spark
REPO = Path(__file__).resolve().parent.parent

SEED = {"brokers": [{"id": i, "rack": f"r{i}"} for i in (1, 2, 3)],
        "topics": [{"name": "payments", "partitions": [{"replicas": [1]}]},
                   {"name": "orders", "config": {"min.insync.replicas": "2"},
                    "partitions": [{"replicas": [1, 2, 3]}, {"replicas": [2, 3, 1]}, {"replicas": [3, 1, 2]}]}]}


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A venv outside the source tree with the planner wheel installed; returns its python."""
    d = tmp_path_factory.mktemp("install")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(d / "dist"),
                            str(REPO)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    wheel = next((d / "dist").glob("kafka_maintenance_planner-*.whl"))
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


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    return {**env, "SPARK_LOCAL_IP": "127.0.0.1"}


def test_installed_wheel_runs_risk_in_process_and_through_spark_submit(installed, tmp_path):
    s = risk.snapshot_from_cluster(parse_cluster(SEED))
    snap = sio.write_snapshot(tmp_path / "snap", s.manifest, s.brokers, s.topics, s.partitions)
    code = (
        "import json, sys; from pathlib import Path; import planner; from planner import api\n"
        f"out = api.risk(api.RiskRequest(snapshot=Path({str(snap)!r}), out=Path({str(tmp_path / 'r1')!r}), "
        "drains=((1,),), modes=('failure',)))\n"
        "print(json.dumps({'file': planner.__file__, 'level': out.level}))\n"
    )
    done = subprocess.run([str(installed), "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          env=_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    venv = installed.parent.parent
    assert Path(got["file"]).is_relative_to(venv) and not Path(got["file"]).is_relative_to(REPO)
    assert got["level"] == "critical"   # payments-0 has its only replica on broker 1
    summary = json.loads((tmp_path / "r1" / "summary.json").read_text())
    assert [x["name"] for x in summary["scenarios"]] == ["drain 1 [failure]"]

    done = subprocess.run([str(installed), "-m", "planner.cli", "risk", "--snapshot", str(snap), "--out",
                           str(tmp_path / "r2"), "--all-racks", "--mode", "failure", "--spark-submit", "--json"],
                          capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert [x["name"] for x in summary["scenarios"]] == ["rack r1 [failure]", "rack r2 [failure]",
                                                         "rack r3 [failure]"]
    r1 = summary["scenarios"][0]
    assert (r1["level"], r1["offline"], r1["rf1_hit"], r1["evaluated"]) == ("critical", 1, 1, 4)
    entry = next(w for w in done.stderr.split() if w.endswith("drain_risk.py"))
    assert Path(entry).is_relative_to(venv), entry   # the job entry shipped in the wheel was submitted
