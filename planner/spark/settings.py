"""The risk job's Spark settings, built once: the in-process session (planner.spark.session), `kplan risk
--spark-submit` (planner.risk_run) and Airflow's SparkSubmitOperator (planner.api.risk_submit, whose
RiskSubmit the plugin's RiskOperator passes on) all take them from here.

No pyspark here: validating a request and describing its spark-submit need no Spark installation.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from importlib.util import find_spec
from pathlib import Path

DEFAULT_DRIVER_MEMORY = "2g"

# Small-machine defaults (2 cores): few shuffle partitions, no UI, quiet logs. The driver's heap is apart
# (`driver_memory`): spark-submit takes it as --driver-memory, a session builder as spark.driver.memory.
CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    # split even a few-MB snapshot into one task per core (Spark splits Parquet at row groups)
    "spark.sql.files.openCostInBytes": str(1 << 20),
    # smaller generated methods: the JIT (C2) compiles them for a fraction of the CPU a cold run spends
    "spark.sql.codegen.methodSplitThreshold": "256",
    # HotSpot never JIT-compiles a method over 8000 bytes of bytecode (DontCompileHugeMethods): the election
    # stage's generated processNext grew to 8210 bytes with the ordered controlled shutdowns and ran in the
    # bytecode interpreter (2x the CPU of the whole job). Spark's advice for HotSpot: above 8000 bytes, fall
    # back from whole-stage codegen to per-operator code, which the JIT compiles.
    "spark.sql.codegen.hugeMethodLimit": "8000",
    # PySpark's DataFrame debugging records the Python call site of every function call in the JVM (py4j calls
    # to set and clear it, and to read its depth setting, each time): some 6,000 of the 10,500 py4j calls that
    # build the risk job's plan at 200k partitions. The job's errors are reported by planner code, not by
    # Spark's query context.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
}
# Parallel GC: a batch job wants throughput, and G1's concurrent threads compete for the 2 cores.
# C2 later than HotSpot's default (tier 4 at 45000 calls, not 5000; loops at 120000 back-edges, not 40000): in a
# job of some 20 s the JIT compilers took as much CPU as the task threads, mostly on code the driver runs a few
# thousand times (Janino, Java serialization, class loading, Catalyst's rules warming up, read per thread from
# /proc); lukewarm methods now stay C1-compiled, while the per-row loops (millions of calls) still reach C2 (C1
# alone made the tasks 2.4x slower). 15000 calls (session 7) took 3 s of JIT CPU off 5000 at 200k partitions;
# 45000 another 1.6 s (3 runs each, side by side, issue 22 session 10: JIT 8.1 -> 6.6 s, tasks 8.2 -> 8.1 s);
# 150000 took 0.8 s more off the JIT but put it back on the tasks (2 runs).
JAVA_OPTIONS = ("-XX:+UseParallelGC -XX:Tier4InvocationThreshold=45000 -XX:Tier4MinInvocationThreshold=6000 "
                "-XX:Tier4CompileThreshold=90000 -XX:Tier4BackEdgeThreshold=120000")
LOG4J = """status = error
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
"""


def log4j_file() -> str:
    """The log4j2 configuration file the driver JVM reads (errors only, to stderr). Named for its content and
    written whole, never rewritten, so a JVM starting beside another checkout's job never reads it half-written.
    Without it log4j's defaults print to the JVM's stdout, which is `kplan risk --json`'s output."""
    f = Path(tempfile.gettempdir()) / f"kplan-spark-log4j2-{hashlib.sha256(LOG4J.encode()).hexdigest()[:12]}.properties"
    if not f.is_file():
        tmp = f.with_name(f"{f.name}.{os.getpid()}.tmp")
        tmp.write_text(LOG4J)
        tmp.replace(f)
    return str(f)


def driver_memory(asked: str | None = None) -> str:
    """The driver's heap: the request's, else $KPLAN_SPARK_DRIVER_MEMORY, else 2g."""
    return asked or os.environ.get("KPLAN_SPARK_DRIVER_MEMORY") or DEFAULT_DRIVER_MEMORY


def java() -> Path | None:
    """The java that spark-submit starts: $JAVA_HOME's, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else (Path(w) if (w := shutil.which("java")) else None)
    return found.resolve() if found is not None and found.exists() else None


def class_archive() -> Path | None:
    """Where the class-data sharing archive (CDS, JEP 350) of the driver JVM's classes lives: one per JVM,
    Spark installation and JVM options, in ~/.cache/kplan/spark-cds (the JVM itself checks the classpath and
    its build before it maps one). None without a JVM or a Spark installation."""
    spec = find_spec("pyspark")
    jvm = java()
    if jvm is None or spec is None or not spec.origin:
        return None
    jars = Path(spec.origin).resolve().parent / "jars"
    key = "\n".join([str(jvm), str(jvm.stat().st_mtime_ns), str(jars),
                     str(jars.stat().st_mtime_ns) if jars.exists() else "", JAVA_OPTIONS])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kplan" / "spark-cds"
    return cache / f"driver-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


# Keep the most recently used archives (~120 MB each, 0.7 GB in all; one per virtualenv, JVM and options that ran the
# job on this machine): enough that several worktrees and a benchmark's baseline checkout do not evict each other's,
# which costs the next run of the evicted one ~10 s of JVM CPU to make its archive again.
KEEP_ARCHIVES = 6


def java_options(archive: Path | None = None) -> str:
    """The driver JVM's options: log4j, GC and JIT (JAVA_OPTIONS), and class-data sharing. With an archive of
    Spark's classes (written by an earlier run, planner.spark.session.save_class_archive) the JVM maps the
    classes instead of reading, parsing and verifying them from the jars: at 200k partitions some 4 s less
    JVM CPU, half of it before the first Spark job. Without one, it records what a later dump needs."""
    opts = f"-Dlog4j.configurationFile=file:{log4j_file()} {JAVA_OPTIONS}"
    archive = archive or class_archive()
    if archive is None:
        return opts
    if archive.is_file():
        try:   # mark it used: planner.spark.session.save_class_archive evicts the least recently used (by mtime)
            os.utime(archive)   # mode 0444, but ours
        except OSError:
            pass
        # an archive that does not fit this JVM is skipped, without a word on stdout (kplan risk --json's)
        return f"{opts} -XX:SharedArchiveFile={archive} -Xshare:auto -Xlog:cds*=off"
    return f"{opts} -XX:+RecordDynamicDumpInfo -Xlog:cds*=off"


def submit_conf() -> dict[str, str]:
    """The Spark properties of the job, without the driver's heap (spark-submit's --driver-memory)."""
    return {**CONF, "spark.driver.extraJavaOptions": java_options()}


def session_conf(asked_memory: str | None = None) -> dict[str, str]:
    """The Spark properties of the job for a SparkSession builder (which launches the JVM): with its heap."""
    return {**submit_conf(), "spark.driver.memory": driver_memory(asked_memory)}


def submit_args(asked_memory: str | None = None) -> list[str]:
    """The same settings as spark-submit arguments."""
    args = ["--driver-memory", driver_memory(asked_memory)]
    for k, v in submit_conf().items():
        args += ["--conf", f"{k}={v}"]
    return args
