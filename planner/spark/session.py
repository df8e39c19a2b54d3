"""The job's SparkSession and its teardown: start it with the job's settings (planner.spark.settings), keep the
host's Ctrl-C handler while PySpark starts, and stop the session and the JVM this process launched for it."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from planner.risk import DEFAULT_MASTER
from planner.spark.jvms import stop_child_jvms
from planner.spark.settings import KEEP_ARCHIVES, class_archive, java, session_conf

log = logging.getLogger(__name__)

APP_NAME = "kplan-drain-risk"
STOP_TIMEOUT = 30.0   # seconds for setLogLevel + stop before the JVM gets SIGTERM
STOP_ATTEMPTS = 3     # each from a new thread, so on a new Py4J connection


def session(master: str | None = None, driver_memory: str | None = None) -> Any:
    """A SparkSession for the job. Master: argument, else $SPARK_MASTER, else local[2]; under spark-submit the
    submitted master is kept. Returns the active session if one exists (tests share one)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(APP_NAME)
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    master = master or os.environ.get("SPARK_MASTER") or (None if under_submit else DEFAULT_MASTER)
    if master:
        builder = builder.master(master)
    conf = session_conf(driver_memory)
    for k, v in conf.items():
        builder = builder.config(k, v)
    with _keep_sigint_handler():
        if not under_submit:
            _launch_jvm(conf, master)
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _launch_jvm(conf: dict[str, str], master: str | None) -> None:
    """Launch the driver JVM as PySpark would (launch_gateway, with the job's settings), unless this process has
    one, but with its stdout on this process's stderr: the JVM shares the process's stdout otherwise, and
    whatever it prints there (log4j's status lines, HotSpot's messages) would land in `kplan risk --json`.

    And in a session of its own: Ctrl-C in a terminal (and `kill -INT -<pgid>`) signals the whole foreground
    process group. PySpark starts the JVM with SIGINT ignored, but the JVM catches it all the same
    (/proc/<jvm>/status: SigIgn 0, SigCgt has SIGINT) and exits through its shutdown hooks, which stop the
    SparkContext under the running job at whatever log level is in force, racing this process's own quiet stop
    (_stop_quietly). Measured on 10 interrupted runs at a time, load 5-8: in the group, this process's `stop`
    found the JVM already going (connection refused or reset) in every run that reached it; out of it, `stop`
    succeeded in 10 of 10. Out of the group the JVM stops when this process stops it (`shutdown`), or when this
    process dies and the JVM reads EOF on its stdin (PySpark's PythonGatewayServer exits then)."""
    with SparkContext._lock:
        if SparkContext._gateway is not None:
            return
        spark_conf = SparkConf(loadDefaults=False).setAll(list(conf.items())).setAppName(APP_NAME)
        if master:
            spark_conf.setMaster(master)
        SparkContext._gateway = launch_gateway(spark_conf, popen_kwargs={"stdout": 2, "start_new_session": True})
        SparkContext._jvm = SparkContext._gateway.jvm


@contextmanager
def _keep_sigint_handler() -> Iterator[None]:
    """PySpark's SparkContext replaces the process's SIGINT handler with one that calls into the JVM from
    inside the signal handler; interrupting a Py4J call that way breaks the call (five Py4J tracebacks and
    exit 1 on Ctrl-C, issue 9). Keep whatever handler the host installed (the CLI's, Airflow's)."""
    real = signal.signal

    def keep(sig: int, handler: Any) -> Any:
        if sig == signal.SIGINT:
            return signal.getsignal(sig)
        return real(sig, handler)

    signal.signal = keep
    try:
        yield
    finally:
        signal.signal = real


def active_session() -> Any | None:
    return SparkSession.getActiveSession()


def gateway_running() -> bool:
    """Whether this process already talks to a Spark JVM (then a new session reuses it)."""
    return SparkContext._gateway is not None


def shutdown(spark: Any | None) -> None:
    """Stop the session and the JVM this process launched for it, and wait until that JVM is gone, also when
    the start was interrupted half-way (Ctrl-C must not leave a JVM behind)."""
    if spark is not None:
        _stop_quietly(spark)
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if gateway is not None:
        try:
            gateway.shutdown()
        except Exception as e:   # noqa: BLE001
            log.debug("closing the Py4J gateway: %s", e)
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except Exception:   # noqa: BLE001 - a JVM that ignores SIGTERM gets SIGKILL
            proc.kill()
            proc.wait()
    stop_child_jvms()   # a JVM whose launch was interrupted before PySpark kept its handle
    SparkContext._gateway = None
    SparkContext._jvm = None
    SparkContext._active_spark_context = None


def _stop_quietly(spark: Any, timeout: float = STOP_TIMEOUT) -> None:
    """Silence Spark, then stop the session, from a thread of its own, and again from a new one if that failed.

    Stopping under a running job (Ctrl-C) makes Spark log each aborted job and task with its whole stack trace
    (~60 lines a job, ERROR level): nobody asked for those, the interrupt is the news, so the level goes to OFF
    first. If that call fails, `stop` is never sent, and the JVM, stopped by SIGTERM after this, stops the context
    from its shutdown hook at ERROR: the aborted job's trace on the user's terminal (tests/test_bad_inputs.py's
    Ctrl-C test, intermittently). Measured with 10 interrupted runs at a time, load 5-8: from the thread that
    Ctrl-C interrupted (Py4J pins one connection to each thread) the call failed in 2 of 6 runs and the trace
    showed in 1; from a new thread it still failed in 2 of 10 ("Answer from Java side is empty", on a new
    connection; the cause is inside Py4J and not found), each time with the trace; with a second attempt from
    another new thread, 1 first attempt of 10 failed, its second succeeded, and no run showed a trace.
    A stop that fails every time or hangs is left to the SIGTERM and SIGKILL that follow."""
    failed: list[BaseException] = []

    def stop() -> None:
        try:
            spark.sparkContext.setLogLevel("OFF")
            with warnings.catch_warnings():   # "Unable to cleanly shutdown Spark JVM": handled by the caller
                warnings.simplefilter("ignore", RuntimeWarning)
                spark.stop()
        except Exception as e:   # noqa: BLE001 - the JVM may already be gone; it is stopped after this either way
            failed.append(e)

    deadline = time.monotonic() + timeout
    for attempt in range(STOP_ATTEMPTS):
        failed.clear()
        worker = threading.Thread(target=stop, name=f"kplan-spark-stop-{attempt}", daemon=True)
        worker.start()
        worker.join(max(0.0, deadline - time.monotonic()))
        if worker.is_alive():
            log.info("stopping the Spark session took over %.0f s; stopping its JVM", timeout)
            return
        if not failed or _stopped(spark):
            return
        log.info("stopping the Spark session (attempt %d): %s", attempt + 1, failed[0])


def _stopped(spark: Any) -> bool:
    """Whether the session's context is gone on the Python side (PySpark clears `_jsc` once stop was sent)."""
    return getattr(spark.sparkContext, "_jsc", None) is None


def save_class_archive(spark: Any) -> None:
    """Have the driver JVM this process launched write the class-data sharing archive of the classes it loaded
    (`jcmd PID VM.cds dynamic_dump`, JDK 17+), for the next runs to map (planner.spark.settings.java_options).
    Once per JVM, Spark installation and options, after a job that completed; the archive appears whole or
    not at all, and only the KEEP_ARCHIVES most recently used stay (java_options refreshes the mtime of the one it
    maps). Anything that fails here only costs the next run its head start."""
    archive = class_archive()
    proc = getattr(SparkContext._gateway, "proc", None)
    jvm = java()
    if archive is None or archive.is_file() or proc is None or proc.poll() is not None or jvm is None:
        return
    jcmd = jvm.parent / "jcmd"
    if not jcmd.exists() or "RecordDynamicDumpInfo" not in spark.sparkContext.getConf().get(
            "spark.driver.extraJavaOptions", ""):
        return
    archive.parent.mkdir(parents=True, exist_ok=True)
    pending = archive.with_name(f"{archive.name}.{os.getpid()}.tmp")
    try:
        done = subprocess.run([str(jcmd), str(proc.pid), "VM.cds", "dynamic_dump", str(pending)],
                              capture_output=True, text=True, timeout=120)
        if done.returncode == 0 and pending.is_file() and pending.stat().st_size > 0:
            pending.replace(archive)
            log.info("class-data sharing archive for the next Spark runs: %s", archive)
            for old in sorted(archive.parent.glob("driver-*.jsa"), key=lambda f: f.stat().st_mtime)[:-KEEP_ARCHIVES]:
                old.unlink(missing_ok=True)
        else:
            log.debug("no class-data sharing archive: %s", (done.stdout + done.stderr).strip()[-500:])
    except (OSError, subprocess.SubprocessError) as e:
        log.debug("no class-data sharing archive: %s", e)
    finally:
        pending.unlink(missing_ok=True)
