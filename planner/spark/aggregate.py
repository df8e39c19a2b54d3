"""The risk job's aggregation: the rows of partitions.parquet summed per scenario in one shuffle, then the
per-scenario figures on the driver (planner.risk_model's leader load, levels and score), and the worst
partitions the summary lists."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import Window
from pyspark.sql import functions as F

from planner import risk as risk_lib
from planner import risk_model as rm
from planner.spark.columns import frame, ints

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
    later_df = frame(spark, {"sid_j": (pa.int32(), [x for x, _ in later]),
                              "sid_k": (pa.int32(), [y for _, y in later])})
    carried = (rows.where(F.col("returned_leader").isNotNull())
               .join(F.broadcast(later_df), F.col("scenario_id") == F.col("sid_j")))
    # The state as it is: a leader that is not registered leads nothing, and ISR members that are not
    # registered are not in sync (replay.baseline counts the same way).
    dead_ids = sorted(b for b, ok in prepared.info.alive.items() if not ok)
    dead = ints(dead_ids)
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
    floor = []
    for sid in scenario_ids:
        hist = severities.get(sid, [0, 0, 0, 0])  # rows with severity 1..4
        t = next((lvl for lvl in (4, 3, 2, 1) if sum(hist[lvl - 1:]) >= k), 1)
        floor.append((sid, t))
    th = frame(spark, {"scenario_id": (pa.int32(), [x for x, _ in floor]), "_floor": (pa.int8(), [t for _, t in floor])})
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

