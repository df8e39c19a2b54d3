"""`kplan risk` on a KRaft snapshot: the KRaft rules, in the Spark job (planner.spark.kraft_election, the job
given a KRaft view of the request: `spark_view`) or with the numpy reference (planner.replay_kraft) in-process,
writing the same folder as for ZooKeeper (partitions.parquet, scenarios.parquet, summary.json) with the KRaft
columns besides (elr, last_known_elr, new_elr, new_last_known_elr) and summary.json's `backend` naming the rules
and the engine. The spark-submit entry (planner.spark.submit) runs the same Spark path."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from planner import replay_kraft as kr
from planner import risk_model as rm
from planner.risk import Prepared, build_summary

log = logging.getLogger(__name__)

WORST_SCENARIOS = 20    # as the Spark job lists: the requested scenarios and the 20 worst of the sweep
WORST_COLUMNS = ["scenario_id", "topic", "partition", "replicas", "leader", "isr", "new_leader", "new_isr",
                 "severity", *rm.OUTCOMES, "leader_changes", "shutdown_blocked_by", "clean_return",
                 "isr_alternatives", "new_elr", "new_last_known_elr"]


def session_timeout(prepared: Prepared) -> float:
    """The window a kill leaves the killed brokers' partitions unanswered: broker.session.timeout.ms (9 s by
    default on KRaft) unless the request named one other than ZooKeeper's default."""
    s = prepared.session_timeout_s
    return kr.DEFAULT_SESSION_TIMEOUT_S if s == rm.DEFAULT_SESSION_TIMEOUT_S else s


def listed(table: pa.Table) -> list[int]:
    """The scenarios whose worst partitions the summary lists (planner.risk_job.listed_scenarios' rule)."""
    rows = table.select(["scenario_id", "kind", "level_rank", "score"]).to_pylist()
    requested = [r["scenario_id"] for r in rows if r["kind"] in rm.REQUESTED_KINDS]
    sweep = sorted((r for r in rows if r["kind"] not in rm.REQUESTED_KINDS),
                   key=lambda r: (-r["level_rank"], -r["score"], r["scenario_id"]))
    return requested + [r["scenario_id"] for r in sweep[:WORST_SCENARIOS]]


def worst(rows: pa.Table, scenario_ids: list[int], k: int = rm.WORST_PER_SCENARIO) -> pa.Table:
    """Each listed scenario's k worst rows by (severity desc, topic, partition), severity >= 1 only."""
    t = rows.filter(pc.and_(pc.is_in(rows.column("scenario_id"), pa.array(scenario_ids, pa.int32())),
                            pc.greater_equal(rows.column("severity"), 1))).select(WORST_COLUMNS)
    t = t.sort_by([("scenario_id", "ascending"), ("severity", "descending"), ("topic", "ascending"),
                   ("partition", "ascending")])
    sid = t.column("scenario_id").to_numpy()
    keep = [i for i in range(len(sid)) if i < k or sid[i - k] != sid[i]]
    return t.take(pa.array(keep, pa.int64()))


def spark_view(prepared: Prepared) -> Prepared:
    """The request as the Spark job takes it for a KRaft snapshot: brokers that are fenced or in controlled
    shutdown count as not alive (no candidates, not survivors: replay_kraft's `active`), the produce-side
    min ISR is min(min.insync.replicas, RF) (the 3.7+ rule), and a kill's window is broker.session.timeout.ms."""
    from dataclasses import replace

    from planner.snapshot_io import Snapshot

    info = prepared.info
    b = info.brokers
    active = kr.KraftState.active_of(b)
    brokers = b.set_column(b.column_names.index("alive"), "alive", pa.array(active))
    view = Snapshot(info.path, info.manifest, brokers, info.topics, info._partitions)
    return replace(prepared, info=view, kafka_version="3.9", session_timeout_s=session_timeout(prepared))


def run(prepared: Prepared, out: Path | str, progress: Callable[[str], None] = log.info,
        spark: Any = None, written: Callable[[], None] | None = None) -> dict[str, Any]:
    """Evaluate every scenario with the KRaft rules and write the risk folder's files into `out`: in the Spark
    job (planner.spark.kraft_election) when `spark` is given, else with the numpy reference in-process."""
    assert prepared.kraft is not None
    started = time.monotonic()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    progress(f"KRaft rules: {prepared.kraft.describe()}")
    if spark is not None:
        from planner.spark import job

        summary = job.run(spark, spark_view(prepared), out, progress=progress, written=written)
        engine = "spark"
    else:
        state = kr.KraftState.from_snapshot(prepared.info, prepared.kraft)
        plan_state = state.with_plan(prepared.plan_entries) if prepared.plan_entries is not None else None
        res = kr.replay(state, prepared.scenarios, plan_state, session_timeout(prepared))
        pq.write_table(res.rows, out / "partitions.parquet")
        pq.write_table(res.scenarios, out / "scenarios.parquet")
        base = {"current": kr.baseline(state)}
        if plan_state is not None:
            base["plan"] = kr.baseline(plan_state)
        summary = build_summary(prepared, res.scenarios, worst(res.rows, listed(res.scenarios)), base,
                                time.monotonic() - started)
        engine = "numpy"
    src = prepared.kraft
    summary["kafka_version"] = f"KRaft (metadata.version {src.metadata_version or 'unknown'}, ELR " \
                               f"{'on' if src.elr else 'off'})"
    summary["effective_min_isr"] = "least(min_isr, rf) (the ELR's: least(min_isr, rf of the topic's partition 0))"
    summary["backend"] = {"backend": "kraft", "metadata_version": src.metadata_version, "features": src.features,
                          "elr": src.elr, "rules": "planner.replay_kraft (Kafka 4.1.1 controller)",
                          "engine": engine, "session_timeout_s": session_timeout(prepared)}
    tmp = out / "summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=1) + "\n")
    tmp.replace(out / "summary.json")
    progress(f"{summary['evaluated']} partition-scenarios evaluated, level {summary['level']}")
    return summary
