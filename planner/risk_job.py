"""Drain risk as a Spark job: replay Kafka's election rules for every scenario on every affected partition.

Part of the package, so an installed planner (wheel, docker image) has it: functions that take a SparkSession
and paths. In-process: `assess(spark, RiskRequest(snapshot=..., out=...))`, or `run(spark, prepared, out)`
with a request planner.risk.prepare checked (what `kplan risk` does). Through spark-submit (any master; in
Airflow the Spark provider's SparkSubmitOperator), the application is `spark/drain_risk.py` in a checkout or
`planner/jobs/drain_risk.py` in an installed package, both a few lines that call `main` here:

    spark-submit .../drain_risk.py --snapshot D --out D2 [--drain 1,2] [--drain-rack r1] [--all-brokers]
        [--all-racks] [--mode controlled|failure|both] [--plan D3] [--kafka-version 3.7] [--force]

Shape of the job (no cross product of partitions and scenarios, no Python UDF):
  partitions --explode(replicas)--> (partition, broker) --broadcast join--> scenario brokers
  --keep the first replica that is in the scenario--> one row per (scenario, affected partition)
  --SQL array functions (array_except / array_intersect / get ...)--> new leader, new ISR, outcomes.
Nearly every row is `solo` (the scenario takes one of the partition's brokers: every row of a single broker,
and of a rack where replicas are placed on distinct racks): it removes that broker with array_remove, as
each of Spark's set functions builds a hash set per row (the dominant task cost before, issue 22).
Rolling sequences fold their steps per partition with the `aggregate` higher-order function. The outcome
definitions, levels and score come from planner.risk_model (the same expressions the numpy reference
replay evaluates); the election rules are planner.replay's, written as column expressions (the differential
test holds the two to the same result on every partition of every scenario).

Outputs (column lists in planner.risk_model):
  partitions.parquet  a Spark folder, one row per evaluated (scenario, partition): scenario_id, topic,
                      partition, replicas, rf, eff_min_isr, leader/isr before, new_leader/new_isr after, the
                      outcome flags (offline, under_min_isr, at_min_isr, under_replicated, unclean_taken,
                      would_need_unclean, leadership_moved, rf1_hit, was_offline), severity 0-4, and for
                      rolling steps returned_leader (the leader once the step's brokers came back)
  scenarios.parquet   one row per scenario: id, name, kind, mode, state (current | plan), brokers, rack,
                      rolling sequence/step, the outcome counts, survivors' leader load (max vs ideal),
                      level (low | medium | high | critical), level_rank, score
  summary.json        levels, the worst scenarios, the baseline health of each state, every scenario's
                      figures, and the worst partitions of the requested scenarios and of the 20 worst
                      sweep scenarios
`main` exits 2 on bad input, with nothing written.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from planner import risk as risk_lib
from planner import risk_model as rm
from planner.errors import PlannerError
from planner.requests import RiskRequest
from planner.risk_args import add_arguments, request_from_args
from planner.runfolder import step_output

log = logging.getLogger(__name__)

# Small-machine defaults (2 cores): few shuffle partitions, no UI, quiet logs, a bounded driver heap.
CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "2g",
    # split even a few-MB snapshot into one task per core (Spark splits Parquet at row groups)
    "spark.sql.files.openCostInBytes": str(1 << 20),
    # smaller generated methods: the JIT (C2) compiles them for a fraction of the CPU a cold run spends
    "spark.sql.codegen.methodSplitThreshold": "256",
    # HotSpot never JIT-compiles a method over 8000 bytes of bytecode (DontCompileHugeMethods): the election
    # stage's generated processNext grew to 8210 bytes with the ordered controlled shutdowns and ran in the
    # bytecode interpreter (2x the CPU of the whole job). Spark's advice for HotSpot: above 8000 bytes, fall
    # back from whole-stage codegen to per-operator code, which the JIT compiles.
    "spark.sql.codegen.hugeMethodLimit": "8000",
}
# Parallel GC: a batch job wants throughput, and G1's concurrent threads compete for the 2 cores.
# C2 later than HotSpot's default (tier 4 at 15000 calls, not 5000): in a job of some 30 s the JIT compilers took
# as much CPU as the task threads (17 s each at 200k partitions, mostly Janino, Java serialization and class
# loading warming up, read per thread from /proc); lukewarm methods now stay C1-compiled, while the per-row
# loops still reach C2 (C1 alone made the tasks 2.4x slower).
JAVA_OPTIONS = ("-XX:+UseParallelGC -XX:Tier4InvocationThreshold=15000 -XX:Tier4MinInvocationThreshold=2000 "
                "-XX:Tier4CompileThreshold=30000")
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
    f = Path(tempfile.gettempdir()) / "kplan-spark-log4j2.properties"
    if not f.exists() or f.read_text() != LOG4J:
        f.write_text(LOG4J)
    return str(f)


def session(master: str | None = None, driver_memory: str | None = None) -> Any:
    """A SparkSession for the job. Master: argument, else $SPARK_MASTER, else local[2]; under spark-submit the
    submitted master is kept. Returns the active session if one exists (tests share one)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName("kplan-drain-risk")
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    master = master or os.environ.get("SPARK_MASTER") or (None if under_submit else risk_lib.DEFAULT_MASTER)
    if master:
        builder = builder.master(master)
    conf = dict(CONF)
    conf["spark.driver.memory"] = driver_memory or os.environ.get("KPLAN_SPARK_DRIVER_MEMORY", CONF["spark.driver.memory"])
    conf["spark.driver.extraJavaOptions"] = f"-Dlog4j.configurationFile=file:{log4j_file()} {JAVA_OPTIONS}"
    for k, v in conf.items():
        builder = builder.config(k, v)
    with _keep_sigint_handler():
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


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
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()


def gateway_running() -> bool:
    """Whether this process already talks to a Spark JVM (then a new session reuses it)."""
    from pyspark import SparkContext

    return SparkContext._gateway is not None


def shutdown(spark: Any | None) -> None:
    """Stop the session and the JVM this process launched for it, and wait until that JVM is gone, also when
    the start was interrupted half-way (Ctrl-C must not leave a JVM behind)."""
    from pyspark import SparkContext

    try:
        if spark is not None:
            # Stopping under a running job (Ctrl-C) makes Spark log each aborted job and task with its whole
            # stack trace (~60 lines a job, ERROR level): nobody asked for those, the interrupt is the news
            spark.sparkContext.setLogLevel("OFF")
            with warnings.catch_warnings():   # "Unable to cleanly shutdown Spark JVM": handled below
                warnings.simplefilter("ignore", RuntimeWarning)
                spark.stop()
    except Exception as e:   # noqa: BLE001 - the JVM may already be gone; it is stopped below either way
        log.debug("stopping the Spark session: %s", e)
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
    _stop_child_jvms()   # a JVM whose launch was interrupted before PySpark kept its handle
    SparkContext._gateway = None
    SparkContext._jvm = None
    SparkContext._active_spark_context = None


def _descendants() -> dict[int, str]:
    """This process's descendants (pid -> command line), from /proc (Linux)."""
    parent: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
                parent[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    out, todo = {}, [os.getpid()]
    while todo:
        me = todo.pop()
        for pid, ppid in parent.items():
            if ppid == me and pid not in out:
                try:
                    out[pid] = (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                except OSError:
                    out[pid] = ""
                todo.append(pid)
    return out


def _stop_child_jvms(timeout: float = 20.0) -> None:
    """SIGTERM (then SIGKILL) the Spark JVMs this process started, and wait until they are gone."""
    if not Path("/proc/self/stat").exists():
        return
    jvms = [pid for pid, cmd in _descendants().items() if "org.apache.spark.deploy.SparkSubmit" in cmd]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in jvms:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            jvms = [pid for pid in jvms if _running(pid)]
            if not jvms:
                return
            time.sleep(0.1)


def _running(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)   # reap it if it is our child
    except ChildProcessError:
        pass
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


# ------------------------------------------------------------------------------------------ inputs
def _ints(values: list[int] | tuple[int, ...]) -> Any:
    from pyspark.sql import functions as F

    return F.array(*[F.lit(int(v)) for v in values]).cast("array<int>")


def load_partitions(spark: Any, prepared: risk_lib.Prepared) -> Any:
    """One row per (state, partition): state 'current' from the snapshot, 'plan' once the plan completed
    (replicas = ISR = target, leader = target[0]), with the topic's min ISR and unclean setting joined in."""
    from pyspark.sql import functions as F

    info = prepared.info
    cols = ["topic", "partition", "replicas", "isr", "leader", "has_state"]
    if info.in_memory:
        t = info.partitions
        if prepared.unknown:   # a partition whose state is unknown is counted apart, never scored
            t = t.filter(t.column("state_error").is_null())
        t = t.select(cols)
        t = t.set_column(0, "topic", t.column("topic").cast(pa.string()))
        parts = spark.createDataFrame(t)
    else:
        f = info.path / "partitions.parquet"
        parts = spark.read.parquet(str(f))
        if prepared.unknown:
            parts = parts.where(F.col("state_error").isNull())
        parts = parts.select(*cols)
        # Spark splits a Parquet file by row groups: with fewer row groups than cores, spread the rows
        # over the cores first (a shuffle of the partitions table, small next to the evaluation).
        cores = spark.sparkContext.defaultParallelism
        if pq.ParquetFile(f).metadata.num_row_groups < cores:
            parts = parts.repartition(cores * 2)
    topics = spark.createDataFrame(info.topics.select(["topic", "min_insync_replicas", "unclean_leader_election"]))
    parts = (parts.join(F.broadcast(topics), "topic", "left")
             .select(*cols,
                     F.coalesce("min_insync_replicas", F.lit(1)).cast("int").alias("min_isr"),
                     F.coalesce("unclean_leader_election", F.lit(False)).alias("unclean"))
             .withColumn("state", F.lit("current")))
    if prepared.plan_entries is not None:
        plan = spark.createDataFrame(
            pa.table({"topic": pa.array([e.topic for e in prepared.plan_entries], pa.string()),
                      "partition": pa.array([e.partition for e in prepared.plan_entries], pa.int32()),
                      "target": pa.array([list(e.replicas) for e in prepared.plan_entries], pa.list_(pa.int32()))}))
        after = (parts.join(F.broadcast(plan), ["topic", "partition"], "left")
                 .select("topic", "partition",
                         F.coalesce("target", "replicas").alias("replicas"),
                         F.coalesce("target", "isr").alias("isr"),
                         F.when(F.col("target").isNotNull(), F.get("target", 0)).otherwise(F.col("leader")).alias("leader"),
                         (F.col("has_state") | F.col("target").isNotNull()).alias("has_state"),
                         "min_isr", "unclean", F.lit("plan").alias("state")))
        parts = parts.unionByName(after)
    return parts.withColumn("rf", F.size("replicas"))


# ---------------------------------------------------------------------------------- election rules
# The rules of planner.replay as stages of named columns; a stage reads inputs and earlier stages through
# `g(name)`. Inputs: replicas, isr, leader, has_state, unclean, rf (the partition), s (brokers going away, in
# the order their controlled shutdowns are requested), down (s plus brokers already dead), dead, ev (the
# brokers of s that die in the event, in the order Kafka visits them: `visit_order`), controlled (bool).
# Outputs: new_leader, new_isr, new_has_state, unclean_taken, live_replica_exists, leader_changes,
# shutdown_blocked_by, clean_return, order_dependent, isr_alternatives. Names starting with "_" are intermediate. Most rows
# only lose a follower, so the election candidates are computed lazily, for the rows that need an election.
Stage = Callable[[Callable[[str], Any]], dict[str, Any]]


def minus(arr: Any, gone: Any, only: Any = None) -> Any:
    """arr without the brokers in `gone`, order kept: array_remove when one broker goes, or when `only` (a
    column) names the one broker of `gone` that can be in arr (a `solo` row), else array_except (a hash set)."""
    from pyspark.sql import functions as F

    one = F.when(F.size(gone) == 1, F.array_remove(arr, F.get(gone, 0)))
    if only is not None:
        one = one.when(only.isNotNull(), F.array_remove(arr, only))
    return one.otherwise(F.array_except(arr, gone))


def _stage_requests(g: Callable[[str], Any]) -> dict[str, Any]:
    """planner.replay.controlled_shutdown's requests, one broker at a time in the order of `s` (only the
    brokers holding a replica of the partition can change it, so it runs over at most RF of them): the
    broker joins the asked set; a partition it leads (RF > 1, with a state) moves to the first replica that
    is not dead, in the ISR and not asked yet, with ISR minus the asked set, or else blocks that broker's
    shutdown; a partition it only follows drops it from the ISR unless it is the only member.
    Outputs the state the brokers then stop from and what happened on the way (`_req`). One request (single
    brokers, and racks holding one replica of the partition: nearly every row) is plain array expressions;
    only several requests on one partition fold with `aggregate` (higher-order functions run interpreted)."""
    from pyspark.sql import functions as F

    acting = g("has_state") & (g("rf") > 1)
    start = F.struct(g("leader").alias("leader"), g("isr").alias("isr"), F.array().cast("array<int>").alias("asked"),
                     F.lit(0).alias("moves"), F.lit(-1).alias("blocked"))
    # in the order of s; a dead broker sends no request. `solo` rows (nearly all) hold one broker of s: the
    # joined `broker`
    no_one = F.array().cast("array<int>")
    mine = F.when(g("solo"), F.when(F.array_contains(g("dead"), g("broker")), no_one).otherwise(F.array(g("broker")))
                  ).otherwise(F.array_except(F.array_intersect(g("s"), g("replicas")), g("dead")))

    # one request, from k
    k = F.get(mine, 0)
    led = acting & (g("leader") == k)
    cand = F.get(F.array_intersect(g("replicas"), F.array_except(g("isr"), F.array_union(g("dead"), F.array(k)))), 0)
    moved = led & cand.isNotNull()
    followed = acting & (g("leader") != k) & F.array_contains(g("isr"), k) & (F.size(g("isr")) > 1)
    one = F.struct(F.when(moved, cand).otherwise(g("leader")).alias("leader"),
                   F.when(moved | followed, F.array_remove(g("isr"), k)).otherwise(g("isr")).alias("isr"),
                   F.array(k).alias("asked"), F.when(moved, 1).otherwise(0).alias("moves"),
                   F.when(led & ~moved, k).otherwise(-1).alias("blocked"))

    def request(acc: Any, k: Any) -> Any:
        asked = F.concat(acc["asked"], F.array(k))
        led = acting & (acc["leader"] == k)
        cand = F.get(F.filter(g("replicas"), lambda r: F.array_contains(acc["isr"], r) & ~F.array_contains(asked, r)
                              & ~F.array_contains(g("dead"), r)), 0)
        moved = led & cand.isNotNull()
        followed = acting & (acc["leader"] != k) & F.array_contains(acc["isr"], k) & (F.size(acc["isr"]) > 1)
        isr = (F.when(moved, F.filter(acc["isr"], lambda x: ~F.array_contains(asked, x)))
               .when(followed, F.array_remove(acc["isr"], k)).otherwise(acc["isr"]))
        return F.struct(F.when(moved, cand).otherwise(acc["leader"]).alias("leader"), isr.alias("isr"),
                        asked.alias("asked"), (acc["moves"] + F.when(moved, 1).otherwise(0)).alias("moves"),
                        F.when(led & ~moved, k).otherwise(acc["blocked"]).alias("blocked"))

    done = (F.when(~g("controlled") | (F.size(mine) == 0), start).when(F.size(mine) == 1, one)
            .otherwise(F.aggregate(mine, start, request)))
    return {"_req": done}


def _stage_who(g: Callable[[str], Any]) -> dict[str, Any]:
    from pyspark.sql import functions as F

    leader, isr = g("_req")["leader"], g("_req")["isr"]
    led_gone = F.array_contains(g("s"), leader)
    elect = g("has_state") & (led_gone | (leader < 0))  # hard failure re-elects these (offline rule)
    # the ISR's members dying in the event, in the order Kafka visits them (a `solo` row: at most `broker`)
    no_one = F.array().cast("array<int>")
    mine = F.array_contains(g("ev"), g("broker")) & F.array_contains(isr, g("broker"))
    evm = F.when(g("solo"), F.when(mine, F.array(g("broker"))).otherwise(no_one)).otherwise(F.array_intersect(g("ev"), isr))
    kept = F.when(F.size(evm) == 0, isr).when(g("solo"), F.array_remove(isr, g("broker"))).otherwise(F.array_except(isr, evm))
    return {"_cleader": leader, "_cisr": isr, "_elect": elect, "_needs": elect | ~g("has_state"), "_evm": evm,
            "_kept": kept}


def _stage_candidates(g: Callable[[str], Any]) -> dict[str, Any]:
    from pyspark.sql import functions as F

    # down = s and the dead brokers: in a `solo` row without dead brokers only `broker` can be in these lists
    only = F.when(g("solo") & (F.size(g("dead")) == 0), g("broker"))
    live_isr = minus(g("_cisr"), g("down"), only)           # ISR restricted to live brokers, order kept
    cand = F.struct(
        live_isr.alias("live_isr"),
        # offline (clean) election: first replica in assignment order that is live and in the ISR
        F.get(F.array_intersect(g("replicas"), live_isr), 0).alias("clean"),
        # offline (unclean) election / new partition: the first live replica (and all live replicas)
        minus(g("replicas"), g("down"), only).alias("live_reps"))
    return {"_cand": F.when(g("_needs"), cand)}


def _stage_choice(g: Callable[[str], Any]) -> dict[str, Any]:
    from pyspark.sql import functions as F

    clean = g("_cand")["clean"]
    first_live = F.get(g("_cand")["live_reps"], 0)
    by_clean = g("_elect") & clean.isNotNull()
    return {
        "_by_clean": by_clean,
        "_by_unclean": g("_elect") & ~by_clean & g("unclean") & first_live.isNotNull(),
        "_first_live": first_live,
    }


def _stage_result(g: Callable[[str], Any]) -> dict[str, Any]:
    from pyspark.sql import functions as F

    clean, live_isr, live_reps = g("_cand")["clean"], g("_cand")["live_isr"], g("_cand")["live_reps"]
    new = ~g("has_state")
    kept, cisr, cleader = g("_kept"), g("_cisr"), g("_cleader")
    # planner.replay.remove_visited: the event's brokers leave one at a time in Kafka's order, an ISR never
    # empties: where all its members die, the one visited last stays
    emptied = (F.size(kept) == 0) & (F.size(cisr) > 0)
    last = F.element_at(g("_evm"), -1)
    removed = F.when(emptied, F.array(last)).otherwise(kept)
    new_leader = (F.when(new, F.coalesce(g("_first_live"), F.lit(-1)))
                  .when(g("_by_clean"), clean).when(g("_by_unclean"), g("_first_live"))
                  .when(g("_elect"), F.lit(-1)).otherwise(cleader)).cast("int")
    has_state = g("has_state") | g("_first_live").isNotNull()
    leaderless = has_state & (new_leader < 0)
    # several of the event's brokers were the ISR's last members: had their deaths been noticed in separate
    # events, the one noticed last would stay instead
    order_dependent = leaderless & emptied & (F.size(g("_evm")) >= 2)
    no_one = F.array().cast("array<int>")
    alternatives = F.when(order_dependent, F.array_remove(F.array_intersect(cisr, g("_evm")), last)).otherwise(no_one)
    new_isr = (F.when(new, live_reps).when(g("_by_clean"), live_isr)
               .when(g("_by_unclean"), F.array(g("_first_live"))).otherwise(removed))
    return {
        "new_leader": new_leader,
        "new_isr": new_isr,
        "new_has_state": has_state,
        "unclean_taken": g("_by_unclean"),
        # only read for offline partitions (would-need-unclean), which always went through `_needs`
        "live_replica_exists": F.when(g("_needs"), g("_first_live").isNotNull()).otherwise(F.lit(True)),
        "leader_changes": (g("_req")["moves"] + F.when(g("has_state") & (new_leader >= 0) & (new_leader != cleader), 1)
                           .otherwise(0)).cast("int"),
        "shutdown_blocked_by": g("_req")["blocked"].cast("int"),
        # leaderless: the ISR's (dead) members, then the others it may keep instead
        "clean_return": F.when(leaderless, F.concat(new_isr, alternatives)).otherwise(no_one),
        "order_dependent": order_dependent,
        "isr_alternatives": alternatives,
    }


STEP_STAGES: list[Stage] = [_stage_requests, _stage_who, _stage_candidates, _stage_choice, _stage_result]


def apply_flat(df: Any, stages: list[Stage], drop: bool = True) -> Any:
    """Run the stages as successive projections (codegen'd; each intermediate computed once)."""
    from pyspark.sql import functions as F

    for stage in stages:
        df = df.withColumns(stage(F.col))
    return df.drop(*[c for c in df.columns if c.startswith("_")]) if drop else df


def _let(value: Any, body: Callable[[Any], Any]) -> Any:
    """Bind a value once inside a lambda expression: transform(array(v), x -> body(x))[0]."""
    from pyspark.sql import functions as F

    return F.get(F.transform(F.array(value), body), 0)


def apply_let(stages: list[Stage], env: dict[str, Any], final: Callable[[dict[str, Any]], Any]) -> Any:
    """Run the stages inside a higher-order function, binding each stage's values once."""
    from pyspark.sql import functions as F

    if not stages:
        return final(env)
    vals = stages[0](lambda n: env[n])
    packed = F.struct(*[v.alias(k) for k, v in vals.items()])
    return _let(packed, lambda r: apply_let(stages[1:], {**env, **{k: r[k] for k in vals}}, final))


# ------------------------------------------------------------------------------------------ scenarios
def _frame(spark: Any, columns: dict[str, tuple[pa.DataType, list]]) -> Any:
    """A small DataFrame from driver data via Arrow (a local table scan: no Python worker is started)."""
    return spark.createDataFrame(pa.table({k: pa.array(v, t) for k, (t, v) in columns.items()}))


_INTS = pa.list_(pa.int32())
_STEP = pa.struct([("sid", pa.int32()), ("s", _INTS), ("down", _INTS), ("ev", _INTS)])
_MODE = pa.struct([("sid", pa.int32()), ("mode", pa.string())])

_HASH_MASK = 0xFFFFFFFF


def _improve(k: Any) -> Any:
    """scala.collection.Hashing.improve of an Int key (a bigint column holding it; 32-bit arithmetic kept
    in the low bits of a bigint, so ANSI mode sees no overflow)."""
    from pyspark.sql import functions as F

    m = F.lit(_HASH_MASK).cast("long")
    h = (k + F.bitwise_not(F.shiftleft(k, 9)).bitwiseAND(m)).bitwiseAND(m)
    h = h.bitwiseXOR(F.shiftright(h, 14))
    h = (h + F.shiftleft(h, 4).bitwiseAND(m)).bitwiseAND(m)
    return h.bitwiseXOR(F.shiftright(h, 10))


def visit_order(keys: Any) -> Any:
    """The broker ids of the array column `keys` in the order Scala 2.13's immutable.HashMap (a CHAMP trie)
    iterates them: what ZkReplicaStateMachine.handleStateChanges' `groupBy(_.replica).forKeyValue` visits
    (planner.scala_hashmap explains the order). Per key, over the 5-bit chunks of its improved hash, lowest
    first: its level is the deepest one at which another key still shares all lower chunks; its sort key
    holds, for each level down to its own, (0 at its own level else 1, the chunk) in 6 bits. Evaluated on the
    scenario rows (a few hundred), never per partition."""
    from pyspark.sql import functions as F

    hashed = F.transform(keys, lambda k: F.struct(k.alias("k"), _improve(k.cast("long")).alias("h")))

    def shared(x: Any) -> Any:   # how many of the lowest 5-bit chunks of two hashes are equal (x = h1 ^ h2)
        return sum(F.when(x.bitwiseAND(F.lit((1 << (5 * (lv + 1))) - 1).cast("long")) == 0, 1).otherwise(0)
                   for lv in range(6))

    def keyed(x: Any) -> Any:
        depth = F.aggregate(hashed, F.lit(0), lambda acc, y: F.greatest(
            acc, F.when(y["k"] == x["k"], 0).otherwise(shared(x["h"].bitwiseXOR(y["h"])))))

        def key(d: Any) -> Any:
            parts = [F.when(F.lit(lv) <= d, F.shiftleft(F.when(d == lv, 0).otherwise(32).cast("long")
                                                        + F.shiftright(x["h"], 5 * lv).bitwiseAND(31), 6 * (6 - lv)))
                     .otherwise(0) for lv in range(7)]
            return F.struct(sum(parts).alias("key"), x["k"].alias("k"))

        return _let(depth, key)

    return F.transform(F.array_sort(F.transform(hashed, keyed)), lambda e: e["k"])


def hosting(prepared: risk_lib.Prepared) -> dict[str, set[int]]:
    """Per state, the brokers holding a replica of an evaluated partition of a topic not queued for deletion:
    the brokers whose death takes replicas offline, so the keys of the controller's per-broker HashMap
    (planner.replay.ClusterState.hosting_ids, computed here from the snapshot's columns)."""
    import pyarrow.compute as pc

    info = prepared.info
    t = info.partition_columns(["topic", "partition", "replicas", "state_error"])
    topic = t.column("topic")
    topic = pc.cast(topic, pa.string()) if pa.types.is_dictionary(topic.type) else topic
    deleting = [n for n, d in zip(info.topics.column("topic").to_pylist(),
                                  info.topics.column("queued_for_deletion").to_pylist(), strict=True) if d]
    keep = pc.and_(pc.is_null(t.column("state_error")),
                   pc.invert(pc.is_in(topic, value_set=pa.array(deleting, pa.string()))))
    reps = pc.filter(t.column("replicas"), keep)
    out = {"current": set(pc.unique(pc.list_flatten(reps)).to_pylist())}
    if prepared.plan_entries is not None:
        entries = [e for e in prepared.plan_entries if e.topic not in set(deleting)]
        keys = pc.binary_join_element_wise(pc.filter(topic, keep),
                                           pc.cast(pc.filter(t.column("partition"), keep), pa.string()), "\t")
        moved = pc.is_in(keys, value_set=pa.array([f"{e.topic}\t{e.partition}" for e in prepared.plan_entries],
                                                   pa.string()))
        kept = pc.list_flatten(pc.filter(reps, pc.invert(moved)))
        out["plan"] = set(pc.unique(kept).to_pylist()) | {b for e in entries for b in e.replicas}
    return out


def scenario_frames(spark: Any, scenarios: list[rm.Scenario], dead: list[int],
                    holders: dict[str, set[int]] | None = None) -> tuple[Any, Any]:
    """(one-shot broker-set x broker rows, rolling sequence x broker rows) as small DataFrames.

    One-shot scenarios with the same brokers and state (the modes of one drain) form one group: a
    partition is joined and its election candidates computed once per group, then split per mode. A
    restart step is one-shot too, with its broker demoted first (`demote`). `ev`: the brokers whose death is
    the scenario's controller event (registered, holding a replica in the state: `holders`), in the order
    Kafka visits them (`visit_order`)."""
    from pyspark.sql import functions as F

    gone_dead = set(dead)

    def event(state: str, bs: list[int]) -> list[int]:
        return [b for b in bs if b not in gone_dead and (holders is None or b in holders.get(state, ()))]

    groups: dict[tuple[str, tuple[int, ...], bool], list[rm.Scenario]] = {}
    for s in scenarios:
        if s.kind != "rolling":  # s keeps the scenario's order: controlled shutdowns are requested in it
            groups.setdefault((s.state, tuple(dict.fromkeys(s.brokers)), s.kind == "restart"), []).append(s)
    one = [(state, list(bs), sorted(set(bs) | set(dead)), sorted(dead), [{"sid": x.id, "mode": x.mode} for x in members],
            demote, event(state, list(bs))) for (state, bs, demote), members in groups.items()]
    one_df = _frame(spark, dict(zip(
        ["state", "s", "down", "dead", "modes", "demote", "ev"],
        [(t, [r[i] for r in one]) for i, t in enumerate([pa.string(), _INTS, _INTS, _INTS, pa.list_(_MODE),
                                                          pa.bool_(), _INTS])],
        strict=True)))
    # the order once per group, then a row per broker of the group (the join key)
    one_df = one_df.withColumn("ev", visit_order(F.col("ev"))).select("*", F.explode("s").alias("broker"))
    seqs: dict[int, list[rm.Scenario]] = {}
    for s in scenarios:
        if s.kind == "rolling":
            seqs.setdefault(s.sequence, []).append(s)
    roll = []
    for steps in seqs.values():
        steps.sort(key=lambda x: x.step)
        union = sorted({b for x in steps for b in x.brokers})
        st = [{"sid": x.id, "s": list(x.brokers), "down": sorted(set(x.brokers) | set(dead)),
               "ev": event(x.state, list(x.brokers))} for x in steps]
        for b in union:
            roll.append((steps[0].sequence, steps[0].state, steps[0].mode, union, st, b))
    roll_df = _frame(spark, dict(zip(
        ["sequence", "state", "mode", "s", "steps", "broker"],
        [(t, [r[i] for r in roll]) for i, t in enumerate([pa.int32(), pa.string(), pa.string(), _INTS,
                                                          pa.list_(_STEP), pa.int32()])], strict=True)))
    roll_df = roll_df.withColumn("steps", F.transform("steps", lambda x: x.withField("ev", visit_order(x["ev"]))))
    return one_df, roll_df


def _affected(parts: Any, table: Any, width: int) -> Any:
    """Partitions with a replica on the scenario's brokers, once each: explode the replicas, broadcast-join
    the scenario brokers, keep the row of the first replica (assignment order) that is in the scenario.
    `solo`: `broker` is the only one of the partition's brokers (replicas and ISR) that the scenario takes
    away, as for every partition of a single broker's scenario and, with replicas placed on distinct racks,
    of a rack's; the election stages then remove that one broker instead of intersecting arrays. `width`:
    the longest replica or ISR list. Written as scans of `s` per list position, so no row builds a hash set."""
    from functools import reduce

    from pyspark.sql import functions as F

    x = parts.select("*", F.posexplode("replicas").alias("_pos", "broker"))
    j = x.join(F.broadcast(table), ["state", "broker"])

    def taken(v: Any) -> Any:
        return F.coalesce(F.array_contains("s", v), F.lit(False))

    def all_of(conds: list[Any]) -> Any:
        return reduce(lambda a, b: a & b, conds, F.lit(True))

    first = all_of([(F.col("_pos") <= i) | ~taken(F.get("replicas", i)) for i in range(width - 1)])
    others = [F.get(arr, i) for arr in ("replicas", "isr") for i in range(width)]
    solo = all_of([F.coalesce(v == F.col("broker"), F.lit(True)) | ~taken(v) for v in others])
    return j.where(first).withColumn("solo", solo).drop("_pos")


_STEP_OUT = ["leader_changes", "shutdown_blocked_by", "clean_return", "order_dependent", "isr_alternatives"]
_ROW = ["scenario_id", "topic", "partition", "replicas", "rf", "min_isr", "unclean", "leader", "isr",
        "new_leader", "new_isr", "unclean_taken", "live_replica_exists", "returned_leader", "controlled",
        "leader_gone", *_STEP_OUT, "demoted_from"]


def demote(j: Any) -> Any:
    """planner.replay.demote as column expressions, on the rows of a restart step (`demote`, broker s[0]):
    a partition the broker leads or is the preferred leader of gets its list reordered (the first other
    registered in-sync replica first, the broker last); the partitions it leads move to that replica. Other
    rows pass unchanged; `demoted_from` is the leader before, where it moved (else null)."""
    from pyspark.sql import functions as F

    b = F.get(F.col("s"), 0)
    first = F.get(F.col("replicas"), 0)
    cand = F.get(F.filter("replicas", lambda x: F.array_contains(F.col("isr"), x) & (x != b)
                          & ~F.array_contains(F.col("dead"), x)), 0)
    led = F.col("demote") & F.col("has_state") & (F.col("leader") == b)
    moved = led & cand.isNotNull()
    reorder = F.col("demote") & (led | (first == b)) & cand.isNotNull() & (first != cand)
    ordered = F.concat(F.array(cand), F.filter("replicas", lambda x: (x != cand) & (x != b)), F.array(b))
    return j.withColumns({"replicas": F.when(reorder, ordered).otherwise(F.col("replicas")),
                          "leader": F.when(moved, cand).otherwise(F.col("leader")),
                          "demoted_from": F.when(moved, F.col("leader")).cast("int")})


def one_shot_rows(parts: Any, one_df: Any, width: int) -> Any:
    from pyspark.sql import functions as F

    j = demote(_affected(parts, one_df, width))
    # one row per mode: a controlled shutdown changes the state the election stages start from
    j = j.select("*", F.explode("modes").alias("_m")).withColumns(
        {"scenario_id": F.col("_m.sid"), "controlled": F.col("_m.mode") == "controlled",
         "leader_gone": F.array_contains("s", F.col("leader"))})
    return apply_flat(j, STEP_STAGES).withColumn("returned_leader", F.lit(None).cast("int")).select(*_ROW)


_OUT_TYPE = ("array<struct<sid:int, leader:int, isr:array<int>, new_leader:int, new_isr:array<int>, "
             "unclean_taken:boolean, live_replica_exists:boolean, returned_leader:int, leader_gone:boolean, "
             "leader_changes:int, shutdown_blocked_by:int, clean_return:array<int>, order_dependent:boolean, "
             "isr_alternatives:array<int>>>")


_FOLD_CACHE: dict[int, Any] = {}


def _rolling_fold() -> Any:
    """The fold of a partition through its sequence's steps, as one `aggregate` expression over the
    `steps` column (built once per Spark session: it is a large expression, and it reads everything it
    needs from columns, so it does not depend on the request)."""
    from pyspark import SparkContext
    from pyspark.sql import functions as F

    key = id(SparkContext._active_spark_context)
    if key in _FOLD_CACHE:
        return _FOLD_CACHE[key]
    const = {n: F.col(n) for n in ("replicas", "unclean", "rf")}
    no_one = F.array().cast("array<int>")

    def merge(acc: Any, st: Any) -> Any:
        env = {**const, "isr": acc["isr"], "leader": acc["leader"], "has_state": acc["has_state"],
               "s": st["s"], "down": st["down"], "dead": F.col("dead"), "ev": st["ev"],
               "controlled": F.col("controlled"), "solo": F.lit(False), "broker": F.lit(None).cast("int")}

        def after_step(e: dict[str, Any]) -> Any:
            back = {**const, "isr": e["new_isr"], "leader": e["new_leader"], "has_state": e["new_has_state"],
                    "s": no_one, "down": F.col("dead"), "dead": F.col("dead"), "ev": no_one,
                    "controlled": F.lit(False), "solo": F.lit(False), "broker": F.lit(None).cast("int")}

            def after_return(r: dict[str, Any]) -> Any:
                # planner.replay.return_brokers: elect offline/new partitions, then the returning ISR
                # members rejoin (appended in the order of the ISR the step started from)
                isr = F.when(r["new_leader"] >= 0,
                             F.array_union(r["new_isr"], F.array_intersect(acc["isr"], st["s"]))
                             ).otherwise(r["new_isr"])
                rec = F.struct(st["sid"].alias("sid"), acc["leader"].alias("leader"), acc["isr"].alias("isr"),
                               e["new_leader"].alias("new_leader"), e["new_isr"].alias("new_isr"),
                               e["unclean_taken"].alias("unclean_taken"),
                               e["live_replica_exists"].alias("live_replica_exists"),
                               r["new_leader"].alias("returned_leader"),
                               F.array_contains(st["s"], acc["leader"]).alias("leader_gone"),
                               *[e[k].alias(k) for k in _STEP_OUT])
                return F.struct(r["new_leader"].alias("leader"), isr.alias("isr"),
                                r["new_has_state"].alias("has_state"),
                                F.concat(acc["out"], F.array(rec)).alias("out"))

            return apply_let(STEP_STAGES, back, after_return)

        stepped = apply_let(STEP_STAGES, env, after_step)
        return F.when(F.arrays_overlap(F.col("replicas"), st["s"]), stepped).otherwise(acc)

    start = F.struct(F.col("leader").alias("leader"), F.col("isr").alias("isr"), F.col("has_state").alias("has_state"),
                     F.array().cast(_OUT_TYPE).alias("out"))
    _FOLD_CACHE.clear()
    _FOLD_CACHE[key] = F.aggregate("steps", start, merge)["out"]
    return _FOLD_CACHE[key]


def rolling_rows(parts: Any, roll_df: Any, dead: list[int], width: int) -> Any:
    """Fold each partition's state through the sequence's steps; emit a row for every step that touches it."""
    from pyspark.sql import functions as F

    j = _affected(parts, roll_df, width).withColumns({"controlled": F.col("mode") == "controlled", "dead": _ints(dead)})
    folded = j.select("topic", "partition", "replicas", "rf", "min_isr", "unclean", "controlled",
                      F.explode(_rolling_fold()).alias("o"))
    return folded.select(F.col("o.sid").alias("scenario_id"), "topic", "partition", "replicas", "rf", "min_isr",
                         "unclean", "o.leader", "o.isr", "o.new_leader", "o.new_isr", "o.unclean_taken",
                         "o.live_replica_exists", "o.returned_leader", "controlled", "o.leader_gone",
                         *[f"o.{k}" for k in _STEP_OUT], F.lit(None).cast("int").alias("demoted_from")).select(*_ROW)


def with_outcomes(rows: Any, kafka_version: str) -> Any:
    """The outcome columns, from planner.risk_model's expressions."""
    from pyspark.sql import functions as F

    facts = rows.withColumns({"new_isr_size": F.size("new_isr"), "unclean_allowed": F.col("unclean"),
                              "failure_mode": ~F.col("controlled")})
    facts = facts.withColumn("eff_min_isr", rm.to_spark(rm.effective_min_isr(kafka_version)).cast("int"))
    facts = facts.withColumns({k: rm.to_spark(e) for k, e in rm.OUTCOMES.items()})
    facts = facts.withColumn("severity", rm.to_spark(rm.SEVERITY).cast("byte"))
    return facts.select(*rm.ROW_COLUMNS)


def list_width(prepared: risk_lib.Prepared) -> int:
    """The longest replica or ISR list of either state (the plan's targets are both)."""
    import pyarrow.compute as pc

    t = prepared.info.partition_columns(["replicas", "isr"])
    lengths = [int(pc.max(pc.list_value_length(t.column(c))).as_py() or 0) for c in ("replicas", "isr")]
    lengths += [len(e.replicas) for e in prepared.plan_entries or ()]
    return max([1, *lengths])


def evaluate(spark: Any, prepared: risk_lib.Prepared, parts: Any | None = None) -> Any:
    """Every (scenario, affected partition) row with its outcome columns (risk_model.ROW_COLUMNS)."""
    parts = parts if parts is not None else load_partitions(spark, prepared)
    dead = sorted(b for b, ok in prepared.info.alive.items() if not ok)
    one_df, roll_df = scenario_frames(spark, prepared.scenarios, dead, hosting(prepared))
    width = list_width(prepared)
    rows = one_shot_rows(parts, one_df, width)
    if any(s.kind == "rolling" for s in prepared.scenarios):
        rows = rows.unionByName(rolling_rows(parts, roll_df, dead, width))
    return with_outcomes(rows, prepared.kafka_version)


# ------------------------------------------------------------------------------------------ aggregates
_BASELINE = ["offline", "under_min_isr", "at_min_isr", "under_replicated", "rf1_hit"]
SEVERITY_COUNTS = ["_sev1", "_sev2", "_sev3", "_sev4"]


def aggregates(spark: Any, prepared: risk_lib.Prepared, rows: Any, parts: Any) -> pa.Table:
    """One aggregation (one shuffle) of small results, keyed (sid, b):
      sid >= 0, b = -2   a scenario's evaluated count and outcome counts
      sid >= 0, b >= 0   a scenario's leader-count change on broker b (new leader +1, old leader -1; for
                         rolling steps also the changes earlier steps left once their brokers returned,
                         for restart steps also the demotion's)
      sid = -1 - state   b = leader: the state's leader counts before any scenario, plus its baseline
                         health (offline, under-min-ISR, ... with the same outcome definitions).
    """
    from pyspark.sql import functions as F

    flags = rm.COUNTED + SEVERITY_COUNTS
    zeros = [F.lit(0).cast("long").alias(k) for k in flags]

    def moves(frame: Any, sid: str, new: str, old: str = "leader") -> Any:
        pair = F.array(F.struct(F.col(new).alias("b"), F.lit(1).alias("d")),
                       F.struct(F.col(old).alias("b"), F.lit(-1).alias("d")))
        return (frame.where(F.col(new) != F.col(old))
                .select(F.col(sid).alias("sid"), F.explode(pair).alias("x")).where("x.b >= 0")
                .select("sid", F.col("x.b").cast("int").alias("b"), F.col("x.d").cast("long").alias("d"), *zeros))

    counts = rows.select(F.col("scenario_id").alias("sid"), F.lit(-2).alias("b"), F.lit(1).cast("long").alias("d"),
                         *[F.col(k).cast("long").alias(k) for k in rm.COUNTED],
                         *[(F.col("severity") == i).cast("long").alias(k) for i, k in enumerate(SEVERITY_COUNTS, 1)])
    later = [(a.id, b.id) for a in prepared.scenarios for b in prepared.scenarios
             if a.kind == b.kind == "rolling" and a.sequence == b.sequence and a.step < b.step]
    later_df = _frame(spark, {"sid_j": (pa.int32(), [x for x, _ in later]),
                              "sid_k": (pa.int32(), [y for _, y in later])})
    carried = (rows.where(F.col("returned_leader").isNotNull())
               .join(F.broadcast(later_df), F.col("scenario_id") == F.col("sid_j")))
    # The state as it is: a leader that is not registered leads nothing, and ISR members that are not
    # registered are not in sync (replay.baseline counts the same way).
    dead_ids = sorted(b for b, ok in prepared.info.alive.items() if not ok)
    dead = _ints(dead_ids)
    facts = {"new_leader": F.when(F.array_contains(dead, F.col("leader")), F.lit(-1)).otherwise(F.col("leader")),
             "new_isr_size": F.size(F.array_except("isr", dead)) if dead_ids else F.size("isr"), "unclean_allowed": F.col("unclean"),
             "unclean_taken": F.lit(False), "live_replica_exists": F.lit(True)}
    base = parts.withColumns(facts).withColumn("eff_min_isr", rm.to_spark(rm.effective_min_isr(prepared.kafka_version)))
    base = base.select((-1 - F.when(F.col("state") == "plan", 1).otherwise(0)).alias("sid"), F.col("leader").alias("b"),
                       F.lit(1).cast("long").alias("d"),
                       *[(rm.to_spark(rm.OUTCOMES[k]).cast("long") if k in _BASELINE else F.lit(0).cast("long")).alias(k)
                         for k in flags])
    # b <= -3: broker -3 - b's controlled shutdown fails in this scenario (some partition blocks it)
    blocked = (rows.where(F.col("shutdown_blocked_by") >= 0)
               .select(F.col("scenario_id").alias("sid"), (F.lit(-3) - F.col("shutdown_blocked_by")).cast("int").alias("b"),
                       F.lit(0).cast("long").alias("d"), *zeros))
    # restart steps: the demotion moved leadership before the broker stopped (demoted_from -> leader)
    demoted = rows.where(F.col("demoted_from").isNotNull())
    union = counts.unionByName(moves(rows, "scenario_id", "new_leader")).unionByName(base).unionByName(blocked)
    # each branch scans partitions.parquet: only those that can hold rows
    if any(s.kind == "restart" for s in prepared.scenarios):
        union = union.unionByName(moves(demoted, "scenario_id", "leader", "demoted_from"))
    if later:
        union = union.unionByName(moves(carried, "sid_k", "returned_leader"))
    return union.groupBy("sid", "b").agg(F.sum("d").alias("d"), *[F.sum(k).alias(k) for k in flags]).toArrow()


def finish(prepared: risk_lib.Prepared, agg: pa.Table) -> tuple[pa.Table, dict[str, dict[str, int]],
                                                                 dict[int, list[int]]]:
    """Per-scenario numbers from the aggregated table (a few thousand rows, driver side): counts, the
    survivors' leader load (risk_model.leader_load), level and score (risk_model.scenario_table)."""
    import numpy as np

    sid = agg.column("sid").to_numpy()
    b = agg.column("b").to_numpy()
    d = agg.column("d").to_numpy()
    flag = {k: agg.column(k).to_numpy() for k in rm.COUNTED + SEVERITY_COUNTS}
    info = prepared.info
    size = max([*info.broker_ids, int(b.max(initial=0)), *(x for s in prepared.scenarios for x in s.brokers)]) + 2
    alive = np.zeros(size, dtype=bool)
    alive[[x for x, ok in info.alive.items() if ok]] = True
    base_counts, baseline = {}, {}
    for i, state in enumerate(rm.STATES):
        m = sid == -1 - i
        if not m.any():
            continue
        lead = m & (b >= 0)
        base_counts[state] = np.bincount(b[lead], weights=d[lead], minlength=size).astype(np.int64)
        baseline[state] = {"partitions": int(d[m].sum()), **{k: int(flag[k][m].sum()) for k in _BASELINE}}
        baseline[state]["rf1"] = baseline[state].pop("rf1_hit")
    order = np.argsort(sid, kind="stable")
    sid_sorted = sid[order]
    records, severities = [], {}
    for s in prepared.scenarios:
        lo, hi = np.searchsorted(sid_sorted, [s.id, s.id + 1])
        idx = order[lo:hi]
        cnt = idx[b[idx] == -2]
        rec: dict[str, Any] = {"scenario": s, "evaluated": int(d[cnt].sum())}
        rec.update({k: int(flag[k][cnt].sum()) for k in rm.COUNTED})
        severities[s.id] = [int(flag[k][cnt].sum()) for k in SEVERITY_COUNTS]
        mv = idx[b[idx] >= 0]
        counts = base_counts.get(s.state, np.zeros(size, dtype=np.int64)) + np.bincount(b[mv], weights=d[mv], minlength=size).astype(np.int64)
        survivors = alive.copy()
        survivors[list(s.brokers)] = False
        rec.update(rm.leader_load(counts, survivors))
        rec["failed_shutdowns"] = sorted({int(-3 - x) for x in b[idx] if x <= -3})
        rec["unavailable_window_s"] = rm.unavailable_window(s.mode, prepared.session_timeout_s)
        records.append(rec)
    return rm.scenario_table(records), baseline, severities


WORST_SCENARIOS = 20


def worst_partitions(spark: Any, rows: Any, severities: dict[int, list[int]], scenario_ids: list[int],
                     k: int = rm.WORST_PER_SCENARIO) -> Any:
    """Top k rows by (severity desc, topic, partition) of each listed scenario. Only rows at or above the
    severity where a scenario's k worst are found take part (known from the severity counts), so the
    window sorts a few rows per scenario instead of all of them."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    floor = []
    for sid in scenario_ids:
        hist = severities.get(sid, [0, 0, 0, 0])  # rows with severity 1..4
        t = next((lvl for lvl in (4, 3, 2, 1) if sum(hist[lvl - 1:]) >= k), 1)
        floor.append((sid, t))
    th = _frame(spark, {"scenario_id": (pa.int32(), [x for x, _ in floor]), "_floor": (pa.int8(), [t for _, t in floor])})
    w = Window.partitionBy("scenario_id").orderBy(F.desc("severity"), "topic", "partition")
    keep = ["scenario_id", "topic", "partition", "replicas", "leader", "isr", "new_leader", "new_isr", "severity",
            *rm.OUTCOMES, "leader_changes", "shutdown_blocked_by", "clean_return", "isr_alternatives"]
    return (rows.join(F.broadcast(th), "scenario_id").where(F.col("severity") >= F.col("_floor"))
            .withColumn("_rn", F.row_number().over(w)).where(F.col("_rn") <= k).select(*keep))


def listed_scenarios(table: pa.Table) -> list[int]:
    """Scenarios whose worst partitions the summary lists: the requested ones (drain, rolling steps, both
    states) and the WORST_SCENARIOS worst of the sweep (partitions.parquet holds every row)."""
    rows = table.select(["scenario_id", "kind", "level_rank", "score"]).to_pylist()
    requested = [r["scenario_id"] for r in rows if r["kind"] in rm.REQUESTED_KINDS]
    sweep = sorted((r for r in rows if r["kind"] not in rm.REQUESTED_KINDS),
                   key=lambda r: (-r["level_rank"], -r["score"], r["scenario_id"]))
    return requested + [r["scenario_id"] for r in sweep[:WORST_SCENARIOS]]


def _log(message: str) -> None:
    log.info("%s", message)


def run(spark: Any, prepared: risk_lib.Prepared, out: Path | str,
        progress: Callable[[str], None] = _log) -> dict[str, Any]:
    """The whole job: evaluate, write partitions.parquet, aggregate from it, write scenarios and summary."""
    started = time.monotonic()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    parts = load_partitions(spark, prepared)
    rows = evaluate(spark, prepared, parts)
    rows_path = str(out / "partitions.parquet")
    rows.write.mode("overwrite").parquet(rows_path)
    progress(f"partitions.parquet written ({time.monotonic() - started:.1f}s)")
    written = spark.read.parquet(rows_path)
    table, base, severities = finish(prepared, aggregates(spark, prepared, written, parts))
    worst = worst_partitions(spark, written, severities, listed_scenarios(table)).toArrow()
    pq.write_table(table, out / "scenarios.parquet")
    summary = risk_lib.build_summary(prepared, table, worst, base, time.monotonic() - started)
    tmp = out / "summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=1) + "\n")
    tmp.replace(out / "summary.json")
    progress(f"{summary['evaluated']} partition-scenarios evaluated, level {summary['level']}")
    return summary


def assess(spark: Any, req: RiskRequest, progress: Callable[[str], None] = _log) -> dict[str, Any]:
    """Check the request, then run the job in `spark`, writing `req.out` completely or not at all."""
    prepared = risk_lib.prepare(req)
    inputs = tuple(Path(p) for p in (req.snapshot, req.plan) if isinstance(p, str | Path))
    with step_output(req.out, req.force, inputs) as tmp:
        return run(spark, prepared, tmp, progress)


# ------------------------------------------------------------------------------------------- command
def main(argv: list[str] | None = None) -> int:
    """The spark-submit entry: arguments as `kplan risk` takes them; exit 0, or 2 on bad input."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    p = argparse.ArgumentParser(prog="drain_risk.py", description="Drain risk as a Spark job (planner.risk_job).")
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        req = request_from_args(args)
        risk_lib.prepare(req)
    except PlannerError as e:
        log.error("%s", e)
        return e.exit_code
    spark = session(req.master, req.driver_memory)
    try:
        assess(spark, req)
    except PlannerError as e:
        log.error("%s", e)
        return e.exit_code
    finally:
        spark.stop()
    return 0
