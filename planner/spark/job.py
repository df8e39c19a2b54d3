"""Drain risk as a Spark job: replay Kafka's election rules for every scenario on every affected partition.

Functions that take a SparkSession and paths. In-process: `assess(spark, RiskRequest(snapshot=..., out=...))`,
or `run(spark, prepared, out)` with a request planner.risk.prepare checked (what `kplan risk` does, through
planner.risk_run). Through spark-submit (any master; in Airflow the Spark provider's SparkSubmitOperator),
the application is `planner/jobs/drain_risk.py` in an installed package or `spark/drain_risk.py` in a
checkout (its `main`), with the settings of planner.spark.settings:

    spark-submit .../drain_risk.py --snapshot D --out D2 [--drain 1,2] [--drain-rack r1] [--all-brokers]
        [--all-racks] [--mode controlled|failure|both] [--plan D3] [--kafka-version 3.7] [--force]

Shape of the job (no cross product of partitions and scenarios, no Python UDF):
  partitions --explode(replicas)--> (partition, broker) --broadcast join--> scenario brokers
  --keep the first replica that is in the scenario--> one row per (scenario, affected partition)
  --the rule set's stages (SQL array functions)--> new leader, new ISR, outcomes.
Nearly every row is `solo` (the scenario takes one of the partition's brokers: every row of a single broker,
and of a rack where replicas are placed on distinct racks): it removes that broker with array_remove, as
each of Spark's set functions builds a hash set per row (the dominant task cost before, issue 22).
The election rules are a rule set's (planner.spark.zk_election: planner.replay's, written as column
expressions); the outcome definitions, levels and score come from planner.risk_model (the same expressions
the numpy reference replay evaluates); the aggregation is planner.spark.aggregate.

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
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from functools import reduce
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import functions as F

from planner import risk as risk_lib
from planner import risk_model as rm
from planner.requests import RiskRequest
from planner.runfolder import step_output
from planner.spark import kraft_election, zk_election
from planner.spark.aggregate import aggregates, baseline_sums, finish, listed_scenarios, worst_partitions
from planner.spark.columns import STEP_OUT, apply_flat, frame, ints, sql_type

log = logging.getLogger(__name__)


def rules(prepared: risk_lib.Prepared) -> ModuleType:
    """The election rule set for the snapshot's controller: KRaft's for a KRaft snapshot (manifest
    source.backend), else ZooKeeper's."""
    return kraft_election if prepared.kraft is not None else zk_election


KRAFT_ROW = ["elr", "last_known_elr", "new_elr", "new_last_known_elr"]   # replay_kraft.KRAFT_ROW_EXTRA


def _kraft_columns(spark: Any, prepared: risk_lib.Prepared, parts: Any) -> Any:
    """A KRaft snapshot's partitions with elr, lke (empty where the snapshot has none), elr_on and elr_min, the
    controller's min ISR (min of the topic's min.insync.replicas and its partition 0's RF: computed here from
    the snapshot's columns, as replay_kraft.topic_min_isr does)."""
    info = prepared.info
    t = info.partition_columns(["topic", "partition", "replicas", "state_error"])
    t = t.filter(pc.is_null(t.column("state_error")))
    topic = t.column("topic")
    topic = pc.cast(topic, pa.string()) if pa.types.is_dictionary(topic.type) else topic
    first = (pa.table({"topic": topic, "partition": t.column("partition"), "rf": pc.list_value_length(t.column("replicas"))})
             .sort_by([("topic", "ascending"), ("partition", "ascending")]))
    rf0: dict[str, int] = {}
    for name, rf in zip(first.column("topic").to_pylist(), first.column("rf").to_pylist(), strict=True):
        rf0.setdefault(name, int(rf))
    mins = dict(zip(info.topics.column("topic").to_pylist(), info.topics.column("min_insync_replicas").to_pylist(),
                    strict=True))
    elr_min = frame(spark, {"topic": (pa.string(), list(rf0)),
                            "elr_min": (pa.int32(), [min(int(mins.get(n) or 1), r) for n, r in rf0.items()])})
    no = F.array().cast(sql_type("array<int>"))
    have = set(parts.columns)
    return (parts.join(F.broadcast(elr_min), "topic", "left")
            .withColumns({"elr": F.coalesce(F.col("elr"), no) if "elr" in have else no,
                          "lke": F.coalesce(F.col("last_known_elr"), no) if "last_known_elr" in have else no,
                          "elr_on": F.lit(bool(prepared.kraft.elr)),
                          "elr_min": F.coalesce(F.col("elr_min"), F.lit(1))}))


# ------------------------------------------------------------------------------------------ inputs
def load_partitions(spark: Any, prepared: risk_lib.Prepared) -> Any:
    """One row per (state, partition): state 'current' from the snapshot, 'plan' once the plan completed
    (replicas = ISR = target, leader = target[0]), with the topic's min ISR and unclean setting joined in."""
    info = prepared.info
    cols = ["topic", "partition", "replicas", "isr", "leader", "has_state"]
    if prepared.kraft is not None:   # the ELR columns where the snapshot has them
        have = (set(info.partitions.column_names) if info.in_memory
                else set(pq.read_schema(info.path / "partitions.parquet").names))
        cols += [c for c in ("elr", "last_known_elr") if c in have]
    if info.in_memory:
        t = info.partitions
        if prepared.unknown:   # a partition whose state is unknown is counted apart, never scored
            t = t.filter(t.column("state_error").is_null())
        t = t.select(cols)
        t = t.set_column(0, "topic", t.column("topic").cast(pa.string()))
        parts = spark.createDataFrame(t)
    else:
        f = info.path / "partitions.parquet"
        # with the schema given, Spark runs no job to read the files' footers for it
        schema = spark_schema(pq.read_schema(f), [*cols, "state_error"])
        parts = (spark.read.schema(schema) if schema else spark.read).parquet(str(f))
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
                     F.coalesce("min_insync_replicas", F.lit(1)).cast(sql_type("int")).alias("min_isr"),
                     F.coalesce("unclean_leader_election", F.lit(False)).alias("unclean"))
             .withColumn("state", F.lit("current")))
    extra: list[Any] = []
    if prepared.kraft is not None:
        parts = _kraft_columns(spark, prepared, parts).drop(*[c for c in ("last_known_elr",) if c in cols])
        # a completed reassignment leaves a full ISR: no ELR, no last known ELR (replay_kraft.with_plan)
        no = F.array().cast(sql_type("array<int>"))
        extra = [F.when(F.col("target").isNotNull(), no).otherwise(F.col(c)).alias(c) for c in ("elr", "lke")]
        extra += ["elr_on", "elr_min"]
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
                         "min_isr", "unclean", F.lit("plan").alias("state"), *extra))
        parts = parts.unionByName(after)
    return parts.withColumn("rf", F.size("replicas"))


_SQL_TYPES = {pa.int8(): "byte", pa.int16(): "short", pa.int32(): "int", pa.int64(): "long",
              pa.bool_(): "boolean", pa.string(): "string", pa.large_string(): "string"}


def spark_schema(schema: pa.Schema, names: list[str]) -> Any:
    """The Spark schema (a StructType) of the named columns of a Parquet file's Arrow schema, the columns it does
    not have left out; None for a type not mapped here (then Spark reads the schema from the files). A type
    object, not DDL text: see columns.sql_type."""

    def sql(t: pa.DataType) -> str | None:
        if pa.types.is_dictionary(t):
            t = t.value_type
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            inner = sql(t.value_type)
            return f"array<{inner}>" if inner else None
        return _SQL_TYPES.get(t)

    fields = []
    for name in dict.fromkeys(names):
        if name in schema.names:
            t = sql(schema.field(name).type)
            if t is None:
                return None
            fields.append(f"{name}:{t}")
    return sql_type(f"struct<{', '.join(fields)}>")


_INTS = pa.list_(pa.int32())
_STEP = pa.struct([("sid", pa.int32()), ("s", _INTS), ("down", _INTS), ("ev", _INTS)])
_MODE = pa.struct([("sid", pa.int32()), ("mode", pa.string())])


def hosting(prepared: risk_lib.Prepared) -> dict[str, set[int]]:
    """Per state, the brokers holding a replica of an evaluated partition of a topic not queued for deletion:
    the brokers whose death takes replicas offline, so the keys of the controller's per-broker HashMap
    (planner.replay.ClusterState.hosting_ids, computed here from the snapshot's columns)."""
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
                    holders: dict[str, set[int]] | None = None,
                    visit_order: Callable[[Any], Any] = zk_election.visit_order) -> tuple[Any, Any | None]:
    """(one-shot broker-set x broker rows, rolling sequence x broker rows) as small DataFrames; the second None
    without rolling scenarios.

    One-shot scenarios with the same brokers and state (the modes of one drain) form one group: a
    partition is joined and its election candidates computed once per group, then split per mode. A
    restart step is one-shot too, with its broker demoted first (`demote`). `ev`: the brokers whose death is
    the scenario's controller event (registered, holding a replica in the state: `holders`), in the order
    Kafka visits them (`visit_order`)."""
    gone_dead = set(dead)

    def event(state: str, bs: list[int]) -> list[int]:
        return [b for b in bs if b not in gone_dead and (holders is None or b in holders.get(state, ()))]

    groups: dict[tuple[str, tuple[int, ...], bool], list[rm.Scenario]] = {}
    for s in scenarios:
        if s.kind != "rolling":  # s keeps the scenario's order: controlled shutdowns are requested in it
            groups.setdefault((s.state, tuple(dict.fromkeys(s.brokers)), s.kind == "restart"), []).append(s)
    one = [(state, list(bs), sorted(set(bs) | set(dead)), sorted(dead), [{"sid": x.id, "mode": x.mode} for x in members],
            demote, event(state, list(bs))) for (state, bs, demote), members in groups.items()]
    one_df = frame(spark, dict(zip(
        ["state", "s", "down", "dead", "modes", "demote", "ev"],
        [(t, [r[i] for r in one]) for i, t in enumerate([pa.string(), _INTS, _INTS, _INTS, pa.list_(_MODE),
                                                          pa.bool_(), _INTS])],
        strict=True)))
    # the order once per group, then a row per broker of the group (the join key)
    one_df = (one_df.withColumn("ev", visit_order(F.col("ev"))).select("*", F.explode("s").alias("broker"))
              .withColumn("in_ev", F.array_contains("ev", F.col("broker"))))
    seqs: dict[int, list[rm.Scenario]] = {}
    for s in scenarios:
        if s.kind == "rolling":
            seqs.setdefault(s.sequence, []).append(s)
    if not seqs:   # no rolling sequence (a sweep): no frame, and no plan to build for one
        return one_df, None
    roll = []
    for steps in seqs.values():
        steps.sort(key=lambda x: x.step)
        union = sorted({b for x in steps for b in x.brokers})
        st = [{"sid": x.id, "s": list(x.brokers), "down": sorted(set(x.brokers) | set(dead)),
               "ev": event(x.state, list(x.brokers))} for x in steps]
        for b in union:
            roll.append((steps[0].sequence, steps[0].state, steps[0].mode, union, st, b))
    roll_df = frame(spark, dict(zip(
        ["sequence", "state", "mode", "s", "steps", "broker"],
        [(t, [r[i] for r in roll]) for i, t in enumerate([pa.int32(), pa.string(), pa.string(), _INTS,
                                                          pa.list_(_STEP), pa.int32()])], strict=True)))
    # the struct rebuilt rather than Column.withField, whose field name the JVM parses with Spark's SQL parser
    # (columns.sql_type says why the job avoids it)
    roll_df = roll_df.withColumn("steps", F.transform("steps", lambda x: F.struct(
        *[(visit_order(x[f.name]) if f.name == "ev" else x[f.name]).alias(f.name) for f in _STEP])))
    return one_df, roll_df


def _affected(parts: Any, table: Any, width: int) -> Any:
    """Partitions with a replica on the scenario's brokers, once each: explode the replicas, broadcast-join
    the scenario brokers, keep the row of the first replica (assignment order) that is in the scenario.
    `solo`: `broker` is the only one of the partition's brokers (replicas, ISR and leader) that the scenario takes
    away, as for every partition of a single broker's scenario and, with replicas placed on distinct racks,
    of a rack's; the election stages then remove that one broker instead of intersecting arrays. `width`:
    the longest replica or ISR list. Written as scans of `s` per list position, so no row builds a hash set."""
    x = parts.select("*", F.posexplode("replicas").alias("_pos", "broker"))
    j = x.join(F.broadcast(table), ["state", "broker"])

    def taken(v: Any) -> Any:
        return F.coalesce(F.array_contains("s", v), F.lit(False))

    def all_of(conds: list[Any]) -> Any:
        return reduce(lambda a, b: a & b, conds, F.lit(True))

    first = all_of([(F.col("_pos") <= i) | ~taken(F.get("replicas", i)) for i in range(width - 1)])
    others = [F.get(arr, i) for arr in ("replicas", "isr") for i in range(width)] + [F.col("leader")]
    solo = all_of([F.coalesce(v == F.col("broker"), F.lit(True)) | ~taken(v) for v in others])
    return j.where(first).withColumn("solo", solo).drop("_pos")


_ROW = ["scenario_id", "topic", "partition", "replicas", "rf", "min_isr", "unclean", "leader", "isr",
        "new_leader", "new_isr", "unclean_taken", "live_replica_exists", "returned_leader", "controlled",
        "leader_gone", *STEP_OUT, "demoted_from"]


def one_shot_rows(parts: Any, one_df: Any, width: int, rule_set: ModuleType, dead: list[int],
                  restart: bool = True, kafka_version: str = rm.DEFAULT_KAFKA_VERSION) -> Any:
    """One row per (one-shot scenario, affected partition), through the rule set's stages, with its outcome
    columns. `dead`: the brokers dead before every scenario (the same for all: a literal, not a column each
    row carries); `restart`: some scenario is a restart step (only then can a row be demoted first). The last
    stage and the outcomes are one projection (`with_outcomes`' `exprs`)."""
    j = _affected(parts, one_df, width)
    j = rule_set.demote(j) if restart else j.withColumn("demoted_from", F.lit(None).cast(sql_type("int")))
    if getattr(rule_set, "SOLO_DROPS_S", False):   # not read on solo rows: not copied with them either
        j = j.withColumns({c: F.when(~F.col("solo"), F.col(c)) for c in ("s", "ev")})
    # one row per mode: a controlled shutdown changes the state the election stages start from
    j = j.select("*", F.explode("modes").alias("_m")).withColumns(
        {"scenario_id": F.col("_m.sid"), "controlled": F.col("_m.mode") == "controlled",
         "leader_gone": F.when(F.col("solo"), F.col("leader") == F.col("broker"))
         .otherwise(F.array_contains("s", F.col("leader")))})
    # with no broker dead before the scenarios, the brokers down are the scenario's own (down = s)
    consts = {"dead": ints(dead), **({} if dead else {"down": F.col("s")})}
    *first, last = getattr(rule_set, "FLAT_STAGES", rule_set.STEP_STAGES)
    j = apply_flat(j, first, drop=False, consts=consts)
    exprs = {**last(lambda n: consts[n] if n in consts else F.col(n)), "returned_leader": F.lit(None).cast(sql_type("int"))}
    if rule_set is kraft_election:
        exprs["last_known_elr"] = F.col("lke")
        return with_outcomes(j, kafka_version, KRAFT_ROW, exprs)
    return with_outcomes(j, kafka_version, None, exprs)


def rolling_rows(parts: Any, roll_df: Any, dead: list[int], width: int, rule_set: ModuleType) -> Any:
    """Fold each partition's state through the sequence's steps; emit a row for every step that touches it."""
    j = _affected(parts, roll_df, width).withColumns({"controlled": F.col("mode") == "controlled", "dead": ints(dead)})
    folded = j.select("topic", "partition", "replicas", "rf", "min_isr", "unclean", "controlled",
                      F.explode(rule_set.rolling_fold()).alias("o"))
    extra = [f"o.{c}" for c in KRAFT_ROW] if rule_set is kraft_election else []
    return folded.select(F.col("o.sid").alias("scenario_id"), "topic", "partition", "replicas", "rf", "min_isr",
                         "unclean", "o.leader", "o.isr", "o.new_leader", "o.new_isr", "o.unclean_taken",
                         "o.live_replica_exists", "o.returned_leader", "controlled", "o.leader_gone",
                         *[f"o.{k}" for k in STEP_OUT], F.lit(None).cast(sql_type("int")).alias("demoted_from"),
                         *extra).select(*_ROW, *[c.removeprefix("o.") for c in extra])


def with_outcomes(rows: Any, kafka_version: str, extra: list[str] | None = None,
                  exprs: dict[str, Any] | None = None) -> Any:
    """The row columns (risk_model.ROW_COLUMNS, then `extra`: a rule set's own) with the outcome columns, from
    planner.risk_model's expressions, in one projection: the facts and flags, and `exprs` (columns given as
    expressions: the last stage's), are written into the expressions that read them (a projection of its own
    copies every row with its arrays; Spark evaluates an expression used twice in a projection once)."""
    exprs = exprs or {}

    def col(name: str) -> Any:
        return exprs[name] if name in exprs else F.col(name)

    facts: dict[str, Any] = {"new_isr_size": F.size(col("new_isr")), "unclean_allowed": col("unclean"),
                             "failure_mode": ~col("controlled")}

    def resolve(name: str) -> Any:
        return facts[name] if name in facts else col(name)

    facts["eff_min_isr"] = rm.to_spark(rm.effective_min_isr(kafka_version), resolve).cast(sql_type("int"))
    for k, e in rm.OUTCOMES.items():
        facts[k] = rm.to_spark(e, resolve)
    facts["severity"] = rm.to_spark(rm.SEVERITY, resolve).cast(sql_type("byte"))
    return rows.select(*[resolve(c).alias(c) for c in [*rm.ROW_COLUMNS, *(extra or [])]])


def list_width(prepared: risk_lib.Prepared) -> int:
    """The longest replica or ISR list of either state (the plan's targets are both)."""
    t = prepared.info.partition_columns(["replicas", "isr"])
    lengths = [int(pc.max(pc.list_value_length(t.column(c))).as_py() or 0) for c in ("replicas", "isr")]
    lengths += [len(e.replicas) for e in prepared.plan_entries or ()]
    return max([1, *lengths])


def evaluate(spark: Any, prepared: risk_lib.Prepared, parts: Any | None = None) -> Any:
    """Every (scenario, affected partition) row with its outcome columns (risk_model.ROW_COLUMNS)."""
    parts = parts if parts is not None else load_partitions(spark, prepared)
    dead = sorted(b for b, ok in prepared.info.alive.items() if not ok)
    rule_set = rules(prepared)
    one_df, roll_df = scenario_frames(spark, prepared.scenarios, dead, hosting(prepared), rule_set.visit_order)
    width = list_width(prepared)
    rows = one_shot_rows(parts, one_df, width, rule_set, dead, any(s.kind == "restart" for s in prepared.scenarios),
                         prepared.kafka_version)
    if roll_df is not None:   # some rolling scenario
        rolled = rolling_rows(parts, roll_df, dead, width, rule_set)
        rows = rows.unionByName(with_outcomes(rolled, prepared.kafka_version,
                                              KRAFT_ROW if rule_set is kraft_election else None))
    return rows


def _log(message: str) -> None:
    log.info("%s", message)


def run(spark: Any, prepared: risk_lib.Prepared, out: Path | str,
        progress: Callable[[str], None] = _log, written: Callable[[], None] | None = None) -> dict[str, Any]:
    """The whole job: evaluate, write partitions.parquet, aggregate from it, write scenarios and summary.
    `written`: called once partitions.parquet is written, when Spark has nothing left to do (the caller may
    stop a JVM it launched for the job there, so its memory is not held beside the driver's last passes)."""
    started = time.monotonic()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    parts = load_partitions(spark, prepared)
    rows = evaluate(spark, prepared, parts)
    # the baseline (from the snapshot) before the write: its transient memory on the driver is freed before
    # the JVM's heap grows to its peak in the evaluation, instead of adding to it afterwards
    base_sums = baseline_sums(prepared)
    rows_path = out / "partitions.parquet"
    rows.write.mode("overwrite").parquet(str(rows_path))
    progress(f"partitions.parquet written ({time.monotonic() - started:.1f}s)")
    if written is not None:
        written()
    # summed on the driver from the files just written (Arrow batches of their narrow columns), not by
    # further Spark queries: those cost more in planning, code generation and JIT than the scan itself
    table, base, severities = finish(prepared, aggregates(prepared, rows_path, base_sums))
    worst = worst_partitions(rows_path, severities, listed_scenarios(table))
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

