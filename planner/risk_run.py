"""Running the risk job (planner.spark.job): in this process, in a SparkSession of the caller's or one started
for the call, or through `spark-submit` (any master). planner.api.risk calls `run_risk` with the request that
planner.risk.prepare checked; the job itself builds on planner.risk, so this runner lives apart from it (no
import cycle)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from planner.errors import BadInput
from planner.requests import RiskRequest
from planner.risk import DEFAULT_MASTER, Prepared, prepare
from planner.risk_args import to_args
from planner.spark.settings import submit_args
from planner.text import count

log = logging.getLogger(__name__)


def _log(msg: str) -> None:
    log.info("%s", msg)


def run_risk(req: RiskRequest, prepared: Prepared | None = None, spark: Any = None,
             progress: Callable[[str], None] = _log) -> dict[str, Any]:
    """Validate (unless `prepared` is given), run the job (in-process with `spark` or a new local session;
    or spark-submit when the request says so), return the summary (also written to <out>/summary.json).
    Writes into `req.out` directly: planner.api.risk gives it a temporary folder (complete or absent)."""
    prepared = prepared or prepare(req, kraft_ok=True)
    out = Path(req.out)
    n = len(prepared.scenarios)
    progress(f"{count(n, 'scenario')} ({', '.join(req.modes)}) on {prepared.info.path or 'in-memory snapshot'}")
    from planner import risk_kraft
    from planner.spark import job
    from planner.spark import session as spark_session

    if req.spark_submit:   # the job's entry takes either rule set from the snapshot (planner.spark.submit)
        return _submit(req, progress)
    # A session this call creates is this call's to stop (with its JVM, when it launched one); an existing
    # one (the caller's, or an active one getOrCreate returns) is left running.
    own = spark is None and spark_session.active_session() is None
    launched = own and not spark_session.gateway_running()
    started = time.monotonic()
    stopping: list[threading.Thread] = []

    def written() -> None:
        """partitions.parquet is written and the rest runs on the driver, without Spark: stop the JVM launched for
        the job now (at 1M partitions it holds ~1.2 GiB that the driver's last passes would otherwise add to),
        from a thread of its own, so the driver's sums run while it stops (0.6-1 s: Spark's context, the JVM's
        shutdown hooks, its exit), and wait for it before returning."""
        if launched:   # once per installation: the next runs' JVMs start from this one's classes
            spark_session.save_class_archive(spark)
            stopper = threading.Thread(target=spark_session.shutdown, args=(spark,), name="kplan-spark-shutdown")
            stopper.start()
            stopping.append(stopper)

    try:
        if spark is None:
            progress(f"starting Spark ({req.master or os.environ.get('SPARK_MASTER') or DEFAULT_MASTER})")
            spark = spark_session.session(req.master, req.driver_memory)
        if prepared.kraft is not None:   # the KRaft rule set (planner.spark.kraft_election), same job
            summary = risk_kraft.run(prepared, out, progress, spark=spark, written=written)
        else:
            summary = job.run(spark, prepared, out, progress=progress, written=written)
    finally:
        if stopping:
            stopping[0].join()
        elif launched:
            spark_session.shutdown(spark)      # the session and the JVM started for it, even when interrupted
        elif own and not launched and spark is not None:
            spark.stop()
    progress(f"done in {time.monotonic() - started:.1f}s")
    return summary


def job_entry() -> Path:
    """The spark-submit application file of the job, inside the installed package."""
    from planner import jobs

    return Path(jobs.__file__).resolve().parent / "drain_risk.py"


def spark_submit_command(req: RiskRequest) -> list[str]:
    """spark-submit (pyspark's own, so any installation has it) with the job's configuration."""
    import pyspark

    exe = Path(pyspark.__file__).resolve().parent / "bin" / "spark-submit"
    cmd = [str(exe) if exe.exists() else "spark-submit"]
    master = req.master or os.environ.get("SPARK_MASTER") or DEFAULT_MASTER
    return [*cmd, "--master", master, *submit_args(req.driver_memory), str(job_entry()), *to_args(req)]


def _submit(req: RiskRequest, progress: Callable[[str], None]) -> dict[str, Any]:
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    cmd = spark_submit_command(req)
    progress("spark-submit " + " ".join(cmd[1:]))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace")
    tail: list[str] = []
    errors: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip()
            log.debug("spark-submit: %s", line)
            tail = (tail + [line])[-20:]
            if " ERROR planner." in line:
                errors.append(line.split(": ", 1)[-1])
        rc = proc.wait()
    except BaseException:
        proc.terminate()
        proc.wait()
        raise
    if rc == 2:
        raise BadInput(errors[-1] if errors else "the Spark job refused its input")
    if rc:
        raise RuntimeError(f"spark-submit failed with exit code {rc}: " + (errors[-1] if errors else
                                                                          " | ".join(tail[-5:])))
    return json.loads((Path(req.out) / "summary.json").read_text())
