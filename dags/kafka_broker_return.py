"""Bring drained Kafka brokers back into service (manual trigger, with a form): the way back after a drain.

snapshot -> plan (replicas move only onto the returning brokers: the drain's own moves reversed where the
cluster still matches them, then balanced up to their share) -> risk after the plan (Spark: every broker,
before and after) -> publish for review -> approve -> apply (the brokers become `returning`) -> verify
(preferred leadership restored, then the brokers leave maintenance) -> report.

The brokers must be `drained` (kplan brokers shows it) and registered again: anything else fails `plan` with
the planner's message and nothing is applied. Apply shares the 1-slot apply pool and the ZooKeeper lock with
the drain DAG and the nightly rebalance. Thin on purpose: parameters and wiring only.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, Param
from kplan_airflow.form import broker_picker
from kplan_airflow.operators import (
    ApplyOperator,
    PlanApprovalOperator,
    PublishOperator,
    ReportOperator,
    ReturnPlanOperator,
    RiskOperator,
    SnapshotOperator,
    VerifyOperator,
)

READ_ONLY = {"retries": 2, "retry_delay": timedelta(seconds=20)}  # only transient faults get that far

with DAG(
    dag_id="kafka_broker_return",
    description="Move replicas back onto drained Kafka brokers that are running again, then end their maintenance",
    schedule=None,
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    tags=["kafka", "kplan"],
    doc_md=__doc__,
    params={
        "brokers": broker_picker("Brokers to bring back", "Drained brokers, registered again"),
        "drain_plan": Param(None, type=["null", "string"], title="The drain's plan folder",
                            description="Optional: by default the plan named by the brokers' maintenance state"),
        "reason": Param(None, type=["null", "string"], title="Reason",
                        description="Recorded with the brokers' maintenance state while they return"),
        "max_disk_usage": Param(0.85, type="number", exclusiveMinimum=0, maximum=1, title="Max disk usage",
                                description="No broker may hold more than this fraction of its log dirs' capacity "
                                "after the plan or at any batch boundary"),
        "throttle": Param(None, type=["null", "integer"], minimum=1, title="Throttle (bytes/s)",
                          description="Replication throttle while data moves; empty = the plan's suggested rate"),
        "max_concurrent_per_broker": Param(5, type="integer", minimum=1, maximum=1000,
                                           title="Max concurrent moves per broker"),
        "exclude_topics": Param(None, type=["null", "string"], title="Excluded topics (regex)"),
        "verify_timeout": Param(1800, type="integer", minimum=1, title="Verify timeout (s)"),
        "zk_conn_id": Param("zookeeper_default", type="string", minLength=1, title="ZooKeeper connection"),
        "sizes": Param(None, type=["null", "string"], title="Partition sizes file"),
    },
) as dag:
    snapshot = SnapshotOperator(task_id="snapshot", zk_conn_id="{{ params.zk_conn_id }}",
                                sizes="{{ params.sizes }}", **READ_ONLY)
    plan = ReturnPlanOperator(task_id="plan", brokers="{{ params.brokers }}", drain_plan="{{ params.drain_plan }}",
                              exclude_topics="{{ params.exclude_topics }}",
                              max_concurrent_per_broker="{{ params.max_concurrent_per_broker }}",
                              sizes="{{ params.sizes }}", max_disk_usage="{{ params.max_disk_usage }}", **READ_ONLY)
    risk_after = RiskOperator(task_id="risk_after", all_brokers=True, mode="controlled", after_plan=True,
                              **READ_ONLY)
    publish = PublishOperator(task_id="publish")
    approve = PlanApprovalOperator(
        task_id="approve",
        subject="{{ ti.xcom_pull(task_ids='publish')['subject'] }}",
        body="{{ ti.xcom_pull(task_ids='publish')['body'] }}",
        require_approval="{{ ti.xcom_pull(task_ids='publish')['require_approval'] }}",
        response_timeout=timedelta(hours=24),
    )
    apply = ApplyOperator(task_id="apply", zk_conn_id="{{ params.zk_conn_id }}", throttle="{{ params.throttle }}",
                          max_concurrent_per_broker="{{ params.max_concurrent_per_broker }}",
                          reason="{{ params.reason }}")
    verify = VerifyOperator(task_id="verify", zk_conn_id="{{ params.zk_conn_id }}",
                            timeout="{{ params.verify_timeout }}", **READ_ONLY)
    report = ReportOperator(task_id="report")

    snapshot >> plan >> risk_after >> publish >> approve >> apply >> verify >> report
