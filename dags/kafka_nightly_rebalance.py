"""Rebalance the Kafka cluster every night, within a move / bytes budget.

snapshot -> idle check (skip cleanly when a reassignment, a drain, a return or a restart is in flight, or a broker
is in maintenance part way) -> plan (OR-Tools; drained brokers get nothing: the plan names them) ->
risk after the plan (Spark: every broker and rack, before and after) -> publish -> approve -> apply ->
verify -> report. The plan is applied without waiting for a person only when it is within the auto-approve
limits (moves, bytes) and its risk is at most the auto-approve level; otherwise it waits for review like a
drain. One active run, no catch-up; apply shares the 1-slot pool and the ZooKeeper lock with the drain DAG.

Schedule: `[kplan] rebalance_schedule` (AIRFLOW__KPLAN__REBALANCE_SCHEDULE), default 02:00 UTC daily. The first
run is the next scheduled time after the DAG appears (or is unpaused), never one for a time already past.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, CronTriggerTimetable, Param, conf
from kplan_airflow import chains
from kplan_airflow.chains import READ_ONLY, dag_args, param
from kplan_airflow.form import cluster_params, no_throttle_param, sizes_params, throttle_param
from kplan_airflow.operators import IdleCheckOperator, RebalancePlanOperator, RiskOperator

with DAG(
    dag_id="kafka_nightly_rebalance",
    description="Level replicas and preferred leaders within a budget; auto-approved only when small and safe",
    # no start_date, run_immediately=timedelta(0): the first run is the next scheduled time, never the interval
    # that has just passed (a start_date in the past plus catchup=False runs the latest one at once on unpause).
    # Not run_immediately=False: Airflow 3.3's CronTriggerTimetable._calc_first_run treats False like None and
    # runs the tick just past when it is within 10% of the period (2.4 h for a daily cron): a deployment started
    # at 02:06 began a rebalance at once (seen in test_dagbag_imports_both_dags_without_errors_or_heavy_imports)
    schedule=CronTriggerTimetable(conf.get("kplan", "rebalance_schedule", fallback=None) or "0 2 * * *",
                                  timezone="UTC", run_immediately=timedelta(0)),
    doc_md=__doc__,
    **dag_args(),
    params={
        "max_moves": Param(500, type=["null", "integer"], minimum=1, title="Move budget (replica moves)"),
        "max_bytes": Param(None, type=["null", "integer"], minimum=1, title="Bytes budget"),
        "auto_approve_max_moves": Param(100, type="integer", minimum=0,
                                        title="Auto-approve up to this many replica moves"),
        "auto_approve_max_bytes": Param(10 * 2**30, type="integer", minimum=0,
                                        title="Auto-approve up to this many bytes"),
        "auto_approve_max_risk": Param("low", enum=["low", "medium", "high", "critical"],
                                       title="Auto-approve up to this risk level (after the plan)"),
        "max_disk_usage": Param(0.85, type="number", exclusiveMinimum=0, maximum=1, title="Max disk usage",
                                description="No broker may hold more than this fraction of its log dirs' capacity "
                                "after the plan or at any batch boundary"),
        **throttle_param("Replication throttle while data moves; empty = the plan's suggested rate"),
        **no_throttle_param(),
        "max_concurrent_per_broker": Param(5, type="integer", minimum=1, maximum=1000),
        "exclude_topics": Param(None, type=["null", "string"], title="Excluded topics (regex)"),
        "verify_timeout": Param(3600, type="integer", minimum=1, title="Verify timeout (s)"),
        **cluster_params(),
        **sizes_params(),
        "sizes": Param(None, type=["null", "string"], title="Partition sizes file"),
    },
) as dag:
    snapshot = chains.snapshot(sizes=param("sizes"), sizes_from=param("sizes_from"))
    idle = IdleCheckOperator(task_id="check_idle", busy_dag_ids=["kafka_broker_drain", "kafka_broker_return",
                                                                 "kafka_broker_restart"], **READ_ONLY)
    plan = RebalancePlanOperator(task_id="plan", max_moves=param("max_moves"), max_bytes=param("max_bytes"),
                                 exclude_topics=param("exclude_topics"),
                                 max_concurrent_per_broker=param("max_concurrent_per_broker"), sizes=param("sizes"),
                                 max_disk_usage=param("max_disk_usage"), **READ_ONLY)
    risk_after = RiskOperator(task_id="risk_after", all_brokers=True, all_racks=True, mode="controlled",
                              after_plan=True, **READ_ONLY)
    publish, approve = chains.review(auto_approve_max_moves=param("auto_approve_max_moves"),
                                     auto_approve_max_bytes=param("auto_approve_max_bytes"),
                                     auto_approve_max_risk=param("auto_approve_max_risk"),
                                     throttle=param("throttle"), no_throttle=param("no_throttle"),
                                     approval_timeout=timedelta(hours=8))
    apply, verify, report = chains.carry_out(throttle=param("throttle"), no_throttle=param("no_throttle"),
                                             max_concurrent_per_broker=param("max_concurrent_per_broker"))

    snapshot >> idle >> plan >> risk_after >> publish
    approve >> apply
